//! End-to-end tests of the `slm` binary: every test runs the real executable
//! on a fresh data root (`SLM_DATA_DIR` in its own temporary directory), so
//! the tests are independent and run in parallel. Each CLI call is a new
//! process, so whatever a later call reads has survived a "restart".

#[path = "support/serve.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

use support::{free_port, serve, slm, start_watch, url};

const DEMO: &str = "convergence-demo";
const FAIL_1: &str = "   lap 1: continue gate-fail  demo gate: lap 1";
const FAIL_2: &str = "   lap 2: continue gate-fail  demo gate: lap 2";
const PASS_3: &str = "   lap 3: done     gate-pass  demo gate: lap 3";

// ---------------------------------------------------------------- helpers

/// A fresh temporary directory; the data root is `<tmp>/data`, which `slm`
/// creates itself.
struct Root {
    tmp: TempDir,
}

impl Root {
    fn new() -> Self {
        Self {
            tmp: tempfile::Builder::new()
                .prefix("slm-cli-test-")
                .tempdir()
                .expect("temp dir"),
        }
    }

    fn data(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    /// A path beside the data root (backups, logs).
    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn run(&self, args: &[&str]) -> (i32, String, String) {
        run(slm(&self.data()).args(args))
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let mut c = slm(&self.data());
        c.args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        run(&mut c)
    }

    /// Runs, asserts exit 0, and returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "slm {args:?} failed\nstdout: {out}\nstderr: {err}");
        out
    }

    /// Runs with `--json` appended by the caller, asserts exit 0, parses.
    fn json(&self, args: &[&str]) -> Value {
        parse(&self.ok(args))
    }
}

/// Exit code, stdout, stderr.
fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("slm runs");
    let code = out
        .status
        .code()
        .unwrap_or_else(|| panic!("slm died by a signal: {:?}", out.status));
    (
        code,
        String::from_utf8(out.stdout).expect("utf-8 stdout"),
        String::from_utf8(out.stderr).expect("utf-8 stderr"),
    )
}

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

fn set<'a>(items: &[&'a str]) -> BTreeSet<&'a str> {
    items.iter().copied().collect()
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

/// `convergence-demo-` followed by 8 lowercase hex digits.
fn assert_demo_run_id(id: &str) {
    let hex = id
        .strip_prefix("convergence-demo-")
        .unwrap_or_else(|| panic!("bad run id {id:?}"));
    assert_eq!(hex.len(), 8, "bad run id {id:?}");
    assert!(
        hex.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "bad run id {id:?}"
    );
}

/// Runs `slm loop demo --json` with extra args; returns (exit code, JSON).
fn demo_json(r: &Root, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["loop", "demo", "--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = r.run(&args);
    assert!(
        [0, 3, 5].contains(&code),
        "demo failed: {code}\n{out}\n{err}"
    );
    (code, parse(&out))
}

/// A DONE demo's run id.
fn done_demo(r: &Root) -> String {
    let (code, v) = demo_json(r, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "DONE");
    v["run_id"].as_str().unwrap().to_string()
}

/// Asserts a one-line error on stderr (nothing on stdout) and exit 1.
fn assert_error(r: &Root, args: &[&str], message: &str) {
    let (code, out, err) = r.run(args);
    assert_eq!(code, 1, "slm {args:?}: {out}{err}");
    assert_eq!(out, "", "slm {args:?}");
    assert_eq!(err, format!("slm: error: {message}\n"), "slm {args:?}");
}

/// Asserts `{"ok":false,"error":message}` on stdout and exit 1.
fn assert_json_error(r: &Root, args: &[&str], message: &str) {
    let (code, out, err) = r.run(args);
    assert_eq!(code, 1, "slm {args:?}: {out}{err}");
    assert_eq!(parse(&out), json!({"ok": false, "error": message}));
    assert_eq!(err, "", "slm {args:?}");
}

fn contents(recall: &Value) -> Vec<String> {
    recall["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {recall}"))
        .iter()
        .map(|h| h["content"].as_str().unwrap().to_string())
        .collect()
}

// ---------------------------------------------------------------- demo

#[test]
fn demo_text_matches_cli05() {
    let r = Root::new();
    let (code, out, err) = r.run(&["loop", "demo"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(err, "");
    let l = lines(&out);
    assert_eq!(l.len(), 5, "{out}");
    assert_eq!(l[0], "✓ [DONE] gate-passed (laps: 3)");
    assert_eq!(l[1..4], [FAIL_1, FAIL_2, PASS_3]);
    let id = l[4]
        .strip_prefix("run_id: ")
        .and_then(|s| s.strip_suffix("  (recall with tag loop:convergence-demo)"))
        .unwrap_or_else(|| panic!("bad run_id line {:?}", l[4]));
    assert_demo_run_id(id);
    // A second run gets another id.
    let (_, out2, _) = r.run(&["loop", "demo"]);
    assert!(!out2.contains(id), "run ids repeat: {out2}");
}

#[test]
fn demo_halt_json_and_exit_3() {
    let r = Root::new();
    let (code, v) = demo_json(&r, &["--iterations", "2"]);
    assert_eq!(code, 3);
    assert_eq!(
        keys(&v),
        set(&[
            "status",
            "reason",
            "laps",
            "run_id",
            "ledger",
            "write_errors"
        ])
    );
    assert_eq!(v["status"], "HALT");
    assert_eq!(v["reason"], "max-iterations");
    assert_eq!(v["laps"], 2);
    assert_eq!(v["write_errors"], json!([]));
    assert_demo_run_id(v["run_id"].as_str().unwrap());
    assert_eq!(
        v["ledger"],
        json!([
            {"lap": 1, "decision": "continue", "passed": false},
            {"lap": 2, "decision": "continue", "passed": false},
            {"lap": 3, "decision": "halt", "passed": false},
        ])
    );

    // The same as text: the ✗ mark and the halt row.
    let (code, out, _) = r.run(&["loop", "demo", "--iterations", "2"]);
    assert_eq!(code, 3);
    let l = lines(&out);
    assert_eq!(l.len(), 5, "{out}");
    assert_eq!(l[0], "✗ [HALT] max-iterations (laps: 2)");
    assert_eq!(
        l[1..4],
        [
            FAIL_1,
            FAIL_2,
            "   lap 3: halt     gate-fail  max-iterations"
        ]
    );
    assert!(l[4].starts_with("run_id: convergence-demo-"), "{out}");
}

#[test]
fn demo_iterations_zero_means_ten_and_one_halts() {
    let r = Root::new();
    let (code, v) = demo_json(&r, &["--iterations", "0"]);
    assert_eq!(code, 0);
    assert_eq!(
        (&v["status"], &v["reason"], &v["laps"]),
        (&json!("DONE"), &json!("gate-passed"), &json!(3))
    );
    assert_eq!(
        v["ledger"],
        json!([
            {"lap": 1, "decision": "continue", "passed": false},
            {"lap": 2, "decision": "continue", "passed": false},
            {"lap": 3, "decision": "done", "passed": true},
        ])
    );
    // The default (10) and an explicit 3 finish the same way.
    for extra in [&[][..], &["--iterations", "3"][..]] {
        let (code, v) = demo_json(&r, extra);
        assert_eq!(
            (code, &v["status"], &v["laps"]),
            (0, &json!("DONE"), &json!(3))
        );
    }
    let (code, v) = demo_json(&r, &["--iterations", "1"]);
    assert_eq!(code, 3);
    assert_eq!((&v["status"], &v["laps"]), (&json!("HALT"), &json!(1)));
    assert_eq!(
        v["ledger"],
        json!([
            {"lap": 1, "decision": "continue", "passed": false},
            {"lap": 2, "decision": "halt", "passed": false},
        ])
    );
}

#[test]
fn demo_negative_iterations_is_a_clean_error() {
    let r = Root::new();
    assert_error(
        &r,
        &["loop", "demo", "--iterations", "-1"],
        "max_iterations must be >= 1",
    );
    assert_json_error(
        &r,
        &["loop", "demo", "--iterations", "-1", "--json"],
        "max_iterations must be >= 1",
    );
    // Nothing was recorded.
    assert_eq!(
        r.json(&["loop", "history", "--json"]),
        json!({"name": DEMO, "runs": []})
    );
}

// ---------------------------------------------------------------- history / show

#[test]
fn history_lists_runs_newest_first_across_processes() {
    let r = Root::new();
    let first = done_demo(&r);
    let (code, halt) = demo_json(&r, &["--iterations", "2"]);
    assert_eq!(code, 3);
    let halted = halt["run_id"].as_str().unwrap().to_string();
    let last = done_demo(&r);

    let v = r.json(&["loop", "history", "--json"]);
    assert_eq!(keys(&v), set(&["name", "runs"]));
    assert_eq!(v["name"], DEMO);
    let runs = v["runs"].as_array().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [last.as_str(), halted.as_str(), first.as_str()]);
    for (run, (fin, reason)) in runs.iter().zip([
        ("done", "demo gate: lap 3"),
        ("halt", "max-iterations"),
        ("done", "demo gate: lap 3"),
    ]) {
        assert_eq!(keys(run), set(&["run_id", "laps", "final", "reason", "ts"]));
        // `laps` counts ledger rows: the HALT run has 3 (2 laps + the halt row).
        assert_eq!(run["laps"], 3, "{run}");
        assert_eq!(run["final"], fin, "{run}");
        assert_eq!(run["reason"], reason, "{run}");
    }
    let ts: Vec<&str> = runs.iter().map(|r| r["ts"].as_str().unwrap()).collect();
    assert!(
        ts.iter().all(|t| t.len() >= 20 && t.contains('T')),
        "{ts:?}"
    );
    assert!(ts[0] > ts[1] && ts[1] > ts[2], "not newest first: {ts:?}");
    // `ts` is the last row's timestamp.
    let shown = r.json(&["loop", "show", &last, "--json"]);
    assert_eq!(shown["laps"][2]["ts"].as_str().unwrap(), ts[0]);

    let one = r.json(&["loop", "history", "--limit", "1", "--json"]);
    assert_eq!(one["runs"].as_array().unwrap().len(), 1);
    assert_eq!(one["runs"][0], runs[0]);

    // CLI-07 text.
    let text = r.ok(&["loop", "history"]);
    let mut want = format!("Runs for loop '{DEMO}':\n");
    for run in runs {
        want += &format!(
            "  {:<28} laps={:<3} final={:<8} {}\n",
            run["run_id"].as_str().unwrap(),
            run["laps"].as_u64().unwrap(),
            run["final"].as_str().unwrap(),
            run["ts"].as_str().unwrap()
        );
    }
    assert_eq!(text, want);
    assert_eq!(
        lines(&text)[1],
        format!("  {last}    laps=3   final=done     {}", ts[0])
    );

    // Another process adds a run; the earlier ones are still there.
    let newest = done_demo(&r);
    let v = r.json(&["loop", "history", "--json"]);
    let ids: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [&newest, &last, &halted, &first]);
}

#[test]
fn history_of_an_unknown_loop_is_empty() {
    let r = Root::new();
    done_demo(&r);
    assert_eq!(
        r.ok(&["loop", "history", "--name", "x"]),
        "No recorded runs for loop 'x'.\n"
    );
    assert_eq!(
        r.json(&["loop", "history", "--name", "x", "--json"]),
        json!({"name": "x", "runs": []})
    );
    // A fresh data root has no runs of the demo either.
    let empty = Root::new();
    assert_eq!(
        empty.ok(&["loop", "history"]),
        "No recorded runs for loop 'convergence-demo'.\n"
    );
}

#[test]
fn show_lists_every_lap() {
    let r = Root::new();
    let id = done_demo(&r);
    assert_eq!(
        r.ok(&["loop", "show", &id]),
        format!(
            "Loop run {id} (convergence-demo):\n\
             \x20 lap 1: continue gate-fail  demo gate: lap 1  [tokens=8]\n\
             \x20 lap 2: continue gate-fail  demo gate: lap 2  [tokens=16]\n\
             \x20 lap 3: done     gate-pass  demo gate: lap 3  [tokens=24]\n"
        )
    );

    let v = r.json(&["loop", "show", &id, "--json"]);
    assert_eq!(keys(&v), set(&["run_id", "laps"]));
    assert_eq!(v["run_id"], id.as_str());
    let laps = v["laps"].as_array().unwrap();
    assert_eq!(laps.len(), 3);
    for (i, lap) in laps.iter().enumerate() {
        let n = i + 1;
        assert_eq!(
            keys(lap),
            set(&[
                "lap",
                "ts",
                "decision",
                "passed",
                "detail",
                "agent_claimed_done",
                "tokens",
                "budget"
            ])
        );
        assert_eq!(lap["lap"], n);
        assert_eq!(lap["decision"], if n == 3 { "done" } else { "continue" });
        assert_eq!(lap["passed"], n == 3);
        assert_eq!(lap["detail"], format!("demo gate: lap {n}"));
        assert_eq!(lap["agent_claimed_done"], false);
        assert_eq!(lap["tokens"], 8 * n);
        assert_eq!(keys(&lap["budget"]), set(&["tokens", "wallclock_s"]));
        assert_eq!(lap["budget"]["tokens"], 8 * n);
        assert!(lap["budget"]["wallclock_s"].as_f64().unwrap() >= 0.0);
        assert!(lap["ts"].as_str().unwrap().contains('T'));
    }

    // A HALT run: the halt row carries the budget spent so far.
    let (_, halt) = demo_json(&r, &["--iterations", "2"]);
    let halted = halt["run_id"].as_str().unwrap();
    let text = r.ok(&["loop", "show", halted]);
    assert_eq!(
        lines(&text)[3],
        "  lap 3: halt     gate-fail  max-iterations  [tokens=16]"
    );
}

#[test]
fn show_of_an_unknown_run_is_empty() {
    let r = Root::new();
    done_demo(&r);
    let (code, out, err) = r.run(&["loop", "show", "nope"]);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (0, "No ledger entries for run 'nope'.\n", "")
    );
    assert_eq!(
        r.json(&["loop", "show", "nope", "--json"]),
        json!({"run_id": "nope", "laps": []})
    );
}

// ---------------------------------------------------------------- memory

#[test]
fn ledger_rows_are_memories() {
    let r = Root::new();
    let id = done_demo(&r);
    // A memory that mentions the demo but lacks the tag is not returned.
    r.ok(&["remember", "demo notes without the loop tag"]);

    let v = r.json(&["recall", "demo", "--tag", "loop:convergence-demo", "--json"]);
    assert_eq!(keys(&v), set(&["results", "no_confident_match"]));
    assert_eq!(v["no_confident_match"], false);
    let hits = v["results"].as_array().unwrap();
    assert_eq!(hits.len(), 3, "{v}");
    let mut laps = BTreeSet::new();
    for h in hits {
        assert_eq!(
            keys(h),
            set(&["id", "content", "score", "tags", "session_id", "created_at"])
        );
        assert!(h["id"].as_i64().unwrap() > 0);
        assert!(h["score"].as_f64().unwrap() > 0.0);
        assert!(h["created_at"].as_str().unwrap().contains('T'));
        let tags: Vec<&str> = h["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert!(tags.contains(&"loop:convergence-demo"), "{tags:?}");
        assert_eq!(h["session_id"], format!("loop:{id}"));
        let row = parse(h["content"].as_str().unwrap());
        assert_eq!(row["run_id"], id.as_str());
        assert_eq!(row["name"], DEMO);
        assert_eq!(
            row["detail"],
            format!("demo gate: lap {}", row["lap"].as_u64().unwrap())
        );
        laps.insert(row["lap"].as_u64().unwrap());
    }
    assert_eq!(laps, BTreeSet::from([1, 2, 3]));

    // Without the tag filter the untagged memory is found too.
    let all = r.json(&["recall", "demo", "--json"]);
    assert_eq!(all["results"].as_array().unwrap().len(), 4, "{all}");
    assert!(contents(&all).contains(&"demo notes without the loop tag".to_string()));
}

#[test]
fn remember_and_recall_round_trip() {
    let r = Root::new();
    let a = r.json(&[
        "remember",
        "the quick brown fox",
        "--tag",
        "animals",
        "--json",
    ]);
    assert_eq!(
        keys(&a),
        set(&["ok", "id", "profile_id", "tags", "session_id", "created_at"])
    );
    assert_eq!(a["ok"], true);
    assert_eq!(a["profile_id"], "default");
    assert_eq!(a["tags"], json!(["animals"]));
    assert_eq!(a["session_id"], "");
    let a_id = a["id"].as_i64().unwrap();
    let b = r.json(&[
        "remember",
        "the quick brown fox jumps",
        "--tag",
        "other",
        "--session",
        "s1",
        "--json",
    ]);
    assert_eq!(
        (&b["tags"], &b["session_id"]),
        (&json!(["other"]), &json!("s1"))
    );
    assert_ne!(b["id"], a["id"]);

    let v = r.json(&["recall", "quick fox", "--tag", "animals", "--json"]);
    assert_eq!(
        v,
        json!({
            "results": [{
                "id": a_id,
                "content": "the quick brown fox",
                "score": 1.0,
                "tags": ["animals"],
                "session_id": "",
                "created_at": a["created_at"],
            }],
            "no_confident_match": false,
        })
    );
    let both = r.json(&["recall", "quick fox", "--json"]);
    let mut c = contents(&both);
    c.sort();
    assert_eq!(c, ["the quick brown fox", "the quick brown fox jumps"]);
    let one = r.json(&["recall", "quick fox", "--limit", "1", "--json"]);
    assert_eq!(one["results"].as_array().unwrap().len(), 1);

    // Text forms.
    let out = r.ok(&["remember", "a third note"]);
    let rest = out
        .strip_prefix("remembered #")
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(rest.ends_with(")\n") && rest.contains(" ("), "{out:?}");
    assert_eq!(
        r.ok(&["recall", "quick fox", "--tag", "animals"]),
        format!("1.00  #{a_id}  the quick brown fox  [animals]\n")
    );
    assert_eq!(r.ok(&["recall", "xylophone"]), "No memories found.\n");
}

#[test]
fn recall_applies_the_evidence_floor() {
    let r = Root::new();
    r.ok(&["remember", "the quick brown fox"]);
    // One of three significant terms: below the floor (0.5).
    let v = r.json(&["recall", "quick zebra elephant", "--json"]);
    assert_eq!(v["no_confident_match"], true, "{v}");
    assert_eq!(contents(&v), ["the quick brown fox"]);
    let s = v["results"][0]["score"].as_f64().unwrap();
    assert!((s - 1.0 / 3.0).abs() < 1e-9, "{s}");
    assert_eq!(
        r.ok(&["recall", "quick zebra elephant"]),
        "(no confident match: nothing reaches the evidence floor 0.50)\n\
         0.33  #1  the quick brown fox\n"
    );
    // Two of three: above it.
    let v = r.json(&["recall", "quick brown elephant", "--json"]);
    assert_eq!(v["no_confident_match"], false, "{v}");
    let s = v["results"][0]["score"].as_f64().unwrap();
    assert!((s - 2.0 / 3.0).abs() < 1e-9, "{s}");
    // All of them: full coverage.
    let v = r.json(&["recall", "quick brown fox", "--json"]);
    assert_eq!(v["no_confident_match"], false);
    assert_eq!(v["results"][0]["score"], 1.0);
}

// ---------------------------------------------------------------- kill switch

#[test]
fn kill_env_var_stops_the_demo_before_lap_1() {
    let r = Root::new();
    let (code, out, _) = run(slm(&r.data())
        .env("SLM_LOOP_KILL", "0")
        .args(["loop", "demo"]));
    assert_eq!(code, 5, "{out}");
    let l = lines(&out);
    assert_eq!(l.len(), 3, "{out}");
    assert_eq!(l[0], "✗ [KILLED] killed (laps: 0)");
    assert_eq!(l[1], "   lap 1: killed   gate-fail  kill switch tripped");
    assert!(l[2].starts_with("run_id: convergence-demo-"));

    let (code, out, _) = run(slm(&r.data())
        .env("SLM_LOOP_KILL", "1")
        .args(["loop", "demo", "--json"]));
    assert_eq!(code, 5);
    let v = parse(&out);
    assert_eq!(
        (&v["status"], &v["reason"], &v["laps"]),
        (&json!("KILLED"), &json!("killed"), &json!(0))
    );
    assert_eq!(
        v["ledger"],
        json!([{"lap": 1, "decision": "killed", "passed": false}])
    );
    let h = r.json(&["loop", "history", "--json"]);
    assert_eq!(h["runs"][0]["run_id"], v["run_id"]);
    assert_eq!(h["runs"][0]["laps"], 1);
    assert_eq!(h["runs"][0]["final"], "killed");

    // An empty value does not trip it.
    let (code, _, _) = run(slm(&r.data())
        .env("SLM_LOOP_KILL", "")
        .args(["loop", "demo"]));
    assert_eq!(code, 0);
}

#[test]
fn kill_file_holds_until_cleared() {
    let r = Root::new();
    assert_eq!(
        r.ok(&["loop", "kill"]),
        "Kill switch tripped for every loop; loops stop before their next lap.\n"
    );
    assert!(r.data().join("loop-kill").is_file());
    // It stays tripped for every later run.
    for _ in 0..2 {
        let (code, v) = demo_json(&r, &[]);
        assert_eq!(code, 5);
        assert_eq!(v["status"], "KILLED");
        assert_eq!(
            v["ledger"],
            json!([{"lap": 1, "decision": "killed", "passed": false}])
        );
    }
    assert_eq!(
        r.json(&["loop", "kill", "--clear", "--json"]),
        json!({"ok": true, "engaged": false, "scope": "every loop", "running": []})
    );
    assert!(!r.data().join("loop-kill").exists());
    assert_eq!(done_demo(&r).len(), "convergence-demo-".len() + 8);
    // Clearing twice is fine.
    assert_eq!(
        r.ok(&["loop", "kill", "--clear"]),
        "Kill switch cleared for every loop.\n"
    );

    // Killing one run id leaves other runs alone.
    assert_eq!(
        r.json(&["loop", "kill", "--run", "some-other-run", "--json"]),
        json!({"ok": true, "engaged": true, "scope": "run some-other-run", "running": []})
    );
    assert!(r.data().join("loop-kill.d/some-other-run").is_file());
    done_demo(&r);
}

// ---------------------------------------------------------------- profiles

#[test]
fn profiles_are_isolated_and_deletable() {
    let r = Root::new();
    assert_eq!(
        r.ok(&["profile", "create", "work"]),
        "created profile work\n"
    );
    assert_error(
        &r,
        &["profile", "create", "work"],
        "profile 'work' already exists",
    );
    let ids: BTreeSet<String> = r.json(&["profile", "list", "--json"])["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["profile_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, BTreeSet::from(["default".into(), "work".into()]));

    let w = r.json(&[
        "--profile-id",
        "work",
        "remember",
        "alpha secret plan",
        "--json",
    ]);
    assert_eq!(w["profile_id"], "work");
    // SLM_PROFILE selects the same profile.
    let (code, out, _) = run(slm(&r.data()).env("SLM_PROFILE", "work").args([
        "remember",
        "alpha second secret",
        "--json",
    ]));
    assert_eq!(code, 0);
    assert_eq!(parse(&out)["profile_id"], "work");
    r.ok(&["remember", "alpha public plan"]);

    let mut work = contents(&r.json(&["--profile-id", "work", "recall", "alpha", "--json"]));
    work.sort();
    assert_eq!(work, ["alpha second secret", "alpha secret plan"]);
    assert_eq!(
        contents(&r.json(&["recall", "alpha", "--json"])),
        ["alpha public plan"]
    );
    // Loop runs are per profile too.
    let (_, out, _) = r.run(&["--profile-id", "work", "loop", "demo", "--json"]);
    let run_id = parse(&out)["run_id"].as_str().unwrap().to_string();
    assert_eq!(r.json(&["loop", "history", "--json"])["runs"], json!([]));
    assert_eq!(
        r.json(&["--profile-id", "work", "loop", "history", "--json"])["runs"][0]["run_id"],
        run_id.as_str()
    );

    let d = r.json(&["profile", "delete", "work", "--json"]);
    assert_eq!(d["ok"], true);
    assert_eq!(d["profile_id"], "work");
    // Two memories plus the demo's three ledger rows.
    assert_eq!(d["memories_deleted"], 5, "{d}");

    let (code, out, err) = r.run(&["--profile-id", "work", "recall", "alpha"]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("There is no profile 'work'"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, out, _) = r.run(&["--profile-id", "work", "recall", "alpha", "--json"]);
    assert_eq!(code, 1);
    assert!(
        parse(&out)["error"]
            .as_str()
            .unwrap()
            .contains("There is no profile 'work'")
    );
    // The default profile is untouched and cannot be deleted.
    assert_eq!(
        contents(&r.json(&["recall", "alpha", "--json"])),
        ["alpha public plan"]
    );
    assert_error(
        &r,
        &["profile", "delete", "default"],
        "the default profile cannot be deleted",
    );
}

// ---------------------------------------------------------------- backup / restore

#[test]
fn backup_and_restore() {
    let r = Root::new();
    r.ok(&["remember", "alpha memory kept"]);
    let dest = r.path("backup");
    let dest_s = dest.to_str().unwrap();
    let v = r.json(&["backup", dest_s, "--json"]);
    let db = std::fs::read(dest.join("memory.db")).unwrap();
    assert!(db.starts_with(b"SQLite format 3\0"));
    let receipts = std::fs::read(dest.join("receipt.db")).unwrap();
    assert!(receipts.starts_with(b"SQLite format 3\0"));
    let learning = std::fs::read(dest.join("learning.db")).unwrap();
    assert!(learning.starts_with(b"SQLite format 3\0"));
    assert_eq!(
        v,
        json!({
            "ok": true,
            "destination": dest_s,
            "files": [
                {"file": "memory.db", "bytes": db.len()},
                {"file": "receipt.db", "bytes": receipts.len()},
                {"file": "learning.db", "bytes": learning.len()},
            ],
        })
    );
    let manifest = parse(&std::fs::read_to_string(dest.join("backup.json")).unwrap());
    assert_eq!(manifest["format"], "slm-backup/v1");
    assert_eq!(manifest["source"], r.data().to_str().unwrap());
    assert_eq!(manifest["files"], v["files"]);
    assert!(manifest["created_at"].as_str().unwrap().contains('T'));

    // The destination must not exist.
    assert_error(
        &r,
        &["backup", dest_s],
        &format!("backup destination {dest_s} already exists"),
    );

    r.ok(&["remember", "bravo memory lost"]);
    assert_eq!(contents(&r.json(&["recall", "bravo", "--json"])).len(), 1);

    let v = r.json(&["restore", dest_s, "--json"]);
    assert_eq!(
        v,
        json!({"ok": true, "restored": ["memory.db", "receipt.db", "learning.db"], "data_root": r.data().to_str().unwrap()})
    );
    assert_eq!(
        contents(&r.json(&["recall", "memory", "--json"])),
        ["alpha memory kept"]
    );
    assert_eq!(r.json(&["recall", "bravo", "--json"])["results"], json!([]));
    let kept: Vec<String> = std::fs::read_dir(r.data())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("memory.db.pre-restore-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    // The replaced database still holds the lost memory.
    let old = std::fs::read(r.data().join(&kept[0])).unwrap();
    assert!(old.starts_with(b"SQLite format 3\0"));

    // A directory that is not a backup is refused.
    let not_backup = r.path("not-a-backup");
    std::fs::create_dir(&not_backup).unwrap();
    let (code, _, err) = r.run(&["restore", not_backup.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("is not a backup made by `slm backup`"),
        "{err}"
    );
}

// ---------------------------------------------------------------- serve

#[test]
fn serve_runs_the_services_for_remote_clients() {
    let server_root = Root::new();
    let client_root = Root::new();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = serve(&server_root.data(), "serve", port, &[], &[]);
    let log = server.log.clone();
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        format!(
            "slm serve: gRPC on http://{listen} (data root {})\n",
            server_root.data().display()
        )
    );

    let url = format!("http://{listen}");
    let client = |args: &[&str]| {
        run(slm(&client_root.data())
            .env("SLM_LEDGER_URL", &url)
            .env("SLM_LOOP_ENGINE_URL", &url)
            .args(args))
    };
    let client_json = |args: &[&str]| {
        let (code, out, err) = client(args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        parse(&out)
    };

    let m = client_json(&[
        "remember",
        "zulu remote memory",
        "--tag",
        "remote",
        "--json",
    ]);
    assert_eq!(m["tags"], json!(["remote"]));
    let (code, out, err) = client(&["loop", "demo", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let demo = parse(&out);
    assert_eq!(demo["status"], "DONE");
    let run_id = demo["run_id"].as_str().unwrap().to_string();

    let v = client_json(&["recall", "zulu", "--tag", "remote", "--json"]);
    assert_eq!(contents(&v), ["zulu remote memory"]);
    let h = client_json(&["loop", "history", "--json"]);
    assert_eq!(h["runs"].as_array().unwrap().len(), 1);
    assert_eq!(h["runs"][0]["run_id"], run_id.as_str());
    // Nothing was written to the client's own data root.
    assert!(!client_root.data().join("memory.db").exists());

    // The kill switch goes to the server's data root.
    let (code, _, _) = client(&["loop", "kill"]);
    assert_eq!(code, 0);
    assert!(server_root.data().join("loop-kill").is_file());
    assert!(!client_root.data().join("loop-kill").exists());
    let (code, out, _) = client(&["loop", "demo", "--json"]);
    assert_eq!((code, &parse(&out)["status"]), (5, &json!("KILLED")));
    let (code, _, _) = client(&["loop", "kill", "--clear"]);
    assert_eq!(code, 0);
    assert!(!server_root.data().join("loop-kill").exists());

    // Restoring into a served data root is refused.
    let other = Root::new();
    other.ok(&["remember", "from another root"]);
    let backup = other.path("backup");
    other.ok(&["backup", backup.to_str().unwrap()]);
    let (code, out, err) = server_root.run(&["restore", backup.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("slm serve is running"), "{err}");

    // So is a second server on the same data root.
    let (code, _, err) = run(slm(&server_root.data()).args([
        "serve",
        "--grpc",
        &format!("127.0.0.1:{}", free_port()),
    ]));
    assert_eq!(code, 1);
    assert!(err.contains("another slm serve already runs"), "{err}");

    // SIGTERM stops it cleanly.
    let pid = server.child().id().to_string();
    let status = Command::new("kill").arg(&pid).status().expect("kill runs");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = server.child().try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "slm serve ignored SIGTERM");
        sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .ends_with("slm serve: stopped\n")
    );

    // The data lives in the server's root, readable locally once it stopped.
    assert_eq!(
        contents(&server_root.json(&["recall", "zulu", "--json"])),
        ["zulu remote memory"]
    );
    let ids: Vec<String> = server_root.json(&["loop", "history", "--json"])["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[1], run_id);
    // And the lock is released: restore now works.
    server_root.ok(&["restore", backup.to_str().unwrap()]);
    assert_eq!(
        contents(&server_root.json(&["recall", "root", "--json"])),
        ["from another root"]
    );
}

// ---------------------------------------------------------------- bad input

#[test]
fn bad_input_is_a_one_line_error() {
    let r = Root::new();
    assert_error(&r, &["recall", ""], "query must not be empty");
    assert_json_error(&r, &["recall", "", "--json"], "query must not be empty");
    assert_error(&r, &["remember", ""], "content must not be empty");
    assert_error(&r, &["remember", "   "], "content must not be empty");
    assert_json_error(&r, &["remember", "", "--json"], "content must not be empty");
    assert_error(&r, &["loop", "show", ""], "run_id is required");
    assert_json_error(&r, &["loop", "show", "", "--json"], "run_id is required");
    assert_error(&r, &["loop", "history", "--name", " "], "name is required");
    assert_error(
        &r,
        &["profile", "delete", "nobody"],
        "There is no profile 'nobody' on this computer. A tool call never creates a profile.",
    );

    // A relative data root is refused before anything is written.
    let (code, out, err) = run(slm(Path::new("relative/data")).args(["recall", "x"]));
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        "slm: error: SLM_DATA_DIR must be an absolute path, got \"relative/data\"\n"
    );
}

#[test]
fn usage_errors_exit_2() {
    let r = Root::new();
    for (args, says) in [
        (&["loop"][..], "Usage: slm loop [OPTIONS] <COMMAND>"),
        (&["loop", "run"], "error: unrecognized subcommand 'run'"),
        (
            &["loop", "demo", "--iterations", "many"],
            "error: invalid value 'many' for '--iterations <ITERATIONS>'",
        ),
        (&["loop", "show"], "<RUN_ID>"),
        (&["recall"], "<QUERY>"),
    ] {
        let (code, out, err) = r.run(args);
        assert_eq!((code, out.as_str()), (2, ""), "slm {args:?}: {err}");
        assert!(err.contains(says), "slm {args:?}: {err}");
    }
    // `--help` documents the exit codes.
    let help = r.ok(&["loop", "--help"]);
    assert!(
        help.contains("  3  loop ended HALT (a safety bound tripped)"),
        "{help}"
    );
    assert!(
        help.contains("  5  loop ended KILLED (kill switch)"),
        "{help}"
    );
}

// ---------------------------------------------------------------- checks and the watcher

/// A project with one artifact and a pinned check that passes while the
/// artifact says "ready".
fn project(r: &Root) -> PathBuf {
    let p = r.path("project");
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::write(p.join("src/app.txt"), "ready\n").unwrap();
    std::fs::write(p.join("check.sh"), "grep -q ready src/app.txt\n").unwrap();
    p
}

fn register(r: &Root, proj: &Path, watcher: &str) -> String {
    let v = r.json(&[
        "check",
        "register",
        "--task",
        "build",
        "--watcher",
        watcher,
        "--producer",
        "operator-checker",
        "--cwd",
        proj.to_str().unwrap(),
        "--check",
        "check.sh",
        "--artifact",
        "src/*.txt",
        "--json",
        "--",
        "sh",
        "check.sh",
    ]);
    let id = v["job_id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 32);
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert_eq!(v["watcher_name"], watcher);
    assert_eq!(v["argv"], json!(["/usr/bin/sh", "check.sh"]));
    id
}

#[test]
fn check_commands_register_run_and_report_the_gate() {
    let r = Root::new();
    let proj = project(&r);
    let job = register(&r, &proj, "build");
    let (code, out, _) = r.run(&["check", "status", &job, "--watcher", "build", "--json"]);
    assert_eq!(code, 3);
    assert_eq!(
        parse(&out),
        json!({"passed": false, "reason": "no execution receipt"})
    );

    let (code, out, err) = r.run(&["check", "run", &job, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = parse(&out);
    assert_eq!(
        (v["verdict"].as_str(), v["exit_code"].as_i64()),
        (Some("PASS"), Some(0))
    );
    assert_eq!(v["stop_reason"], Value::Null);
    assert_eq!(v["containment"], "cgroup-v2");
    assert_eq!(v["receipt_id"].as_str().unwrap().len(), 32);
    assert!(
        err.contains("running /usr/bin/sh"),
        "progress goes to stderr: {err}"
    );
    let v = r.json(&["check", "status", &job, "--watcher", "build", "--json"]);
    assert_eq!(
        v,
        json!({"passed": true, "reason": "authenticated PASS for current copied revision"})
    );
    // The running agent cannot be the producer.
    let (code, out, _) = r.run(&[
        "check",
        "status",
        &job,
        "--watcher",
        "build",
        "--agent",
        "operator-checker",
    ]);
    assert_eq!(
        (code, out.trim()),
        (3, "✗ receipt producer is the running agent")
    );

    std::fs::write(proj.join("src/app.txt"), "broken\n").unwrap();
    let (code, out, _) = r.run(&["check", "run", &job, "--json"]);
    assert_eq!(code, 3);
    assert_eq!(parse(&out)["verdict"], "FAIL");
    let (code, out, _) = r.run(&["check", "status", &job, "--watcher", "build"]);
    assert_eq!((code, out.trim()), (3, "✗ check FAILED (exit 1)"));

    let v = r.json(&["check", "list", "--json"]);
    assert_eq!(v["jobs"][0]["job_id"], job);
    assert_eq!(v["jobs"][0]["latest"]["verdict"], "FAIL");
    assert_eq!(v["jobs"][0]["current"], true);
}

#[test]
fn check_refusals_are_one_clear_line() {
    let r = Root::new();
    let proj = project(&r);
    let p = proj.to_str().unwrap();
    let (code, _, err) = r.run(&[
        "check",
        "register",
        "--task",
        "t",
        "--watcher",
        "w",
        "--producer",
        "p",
        "--cwd",
        p,
        "--check",
        "check.sh",
        "--artifact",
        "../x",
        "--",
        "sh",
        "check.sh",
    ]);
    assert_eq!(
        (code, err.trim()),
        (
            1,
            "slm: error: Gate inputs require confined, non-runtime relative paths"
        )
    );
    let (code, out, _) = r.run(&[
        "check",
        "register",
        "--task",
        "t",
        "--watcher",
        "w",
        "--producer",
        "p",
        "--cwd",
        p,
        "--check",
        "check.sh",
        "--artifact",
        "src/*.txt",
        "--ttl",
        "0",
        "--json",
        "--",
        "sh",
        "check.sh",
    ]);
    assert_eq!(code, 1);
    assert_eq!(
        parse(&out),
        json!({"ok": false, "error": "Gate lifetime must be positive and at most one day"})
    );
    let job = register(&r, &proj, "w");
    let (code, _, err) = r.run_env(&["check", "run", &job], &[("SLM_OPERATOR_TOKEN", "forged")]);
    assert_eq!(code, 1);
    assert!(err.contains("needs the operator credential"), "{err}");
    let (code, _, err) = r.run(&["check", "run", &"0".repeat(32)]);
    assert_eq!(
        (code, err.trim()),
        (1, "slm: error: No such operator gate job")
    );
}

/// The seed's scenario across real processes: `slm serve` runs a watcher
/// that waits; the operator runs the check from another process with the
/// CLI; the watcher learns of the receipt through the change feed and ends
/// DONE long before its 30 s poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_run_by_another_process_ends_a_waiting_watcher_done() {
    let r = Root::new();
    let proj = project(&r);
    let job = register(&r, &proj, "build");
    r.ok(&[
        "remember",
        "The build status is checked by the operator's registered job",
    ]);
    let port = free_port();
    let _server = serve(&r.data(), "serve", port, &[], &[]);

    let watcher = start_watch(url(port), &job, 60.0, 30.0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!watcher.is_finished(), "the watcher waits for the receipt");
    let data = r.data();
    let job2 = job.clone();
    let (code, out, err) =
        tokio::task::spawn_blocking(
            move || run(slm(&data).args(["check", "run", &job2, "--json"])),
        )
        .await
        .unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!(parse(&out)["verdict"], "PASS");
    let (laps, o) = tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .expect("DONE well before the 30 s poll")
        .unwrap();
    let o = o.unwrap();
    assert_eq!(
        (o.status.as_str(), o.reason.as_str()),
        ("DONE", "gate-passed")
    );
    assert_eq!(
        o.receipt_reason,
        "authenticated PASS for current copied revision"
    );
    assert_eq!(laps.last().unwrap().decision, "done");
    assert_eq!(laps[0].decision, "continue");
    assert!(
        laps[0]
            .detail
            .ends_with("receipt_reason=no execution receipt"),
        "{}",
        laps[0].detail
    );
}

/// Deleting a profile deletes what every service holds for it: memories,
/// registered jobs and receipts, bridge evidence.
#[test]
fn deleting_a_profile_erases_its_jobs_and_receipts() {
    let r = Root::new();
    let proj = project(&r);
    r.ok(&["profile", "create", "work"]);
    let v = r.json(&[
        "--profile-id",
        "work",
        "check",
        "register",
        "--task",
        "t",
        "--watcher",
        "w",
        "--producer",
        "op",
        "--cwd",
        proj.to_str().unwrap(),
        "--check",
        "check.sh",
        "--artifact",
        "src/*.txt",
        "--json",
        "--",
        "sh",
        "check.sh",
    ]);
    let job = v["job_id"].as_str().unwrap().to_string();
    r.ok(&["--profile-id", "work", "check", "run", &job]);
    r.ok(&["--profile-id", "work", "remember", "a work memory"]);
    let v = r.json(&["profile", "delete", "work", "--json"]);
    assert_eq!(
        v,
        json!({"ok": true, "profile_id": "work", "memories_deleted": 1,
               "jobs_deleted": 1, "receipts_deleted": 1})
    );
    r.ok(&["profile", "create", "work"]);
    let v = r.json(&["--profile-id", "work", "check", "list", "--json"]);
    assert_eq!(v["jobs"], json!([]));
    let (code, _, err) = r.run(&["profile", "delete", "nobody"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("slm: error: There is no profile 'nobody' on this computer."),
        "{err}"
    );
}
