//! Fault tolerance of the real binary: `kill -9` of `slm serve` (SQLite) and
//! of single service processes (PostgreSQL) in the middle of a loop, a
//! PostgreSQL restart under a waiting watcher (a private cluster, never the
//! shared server), and a full disk under the data root.
//!
//! What must hold: no committed ledger row is lost or changed; history, show
//! and the database agree; a run cut off before its terminal row is never
//! reported as ended (let alone DONE); failed writes are reported, not fatal;
//! a full disk gives a clear error and leaves an intact database.

#[path = "support/serve.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slm_runtime::testing::TestDatabase;

use support::{ENV_CLEARED, Proc, free_port, run, serve, slm, start_watch, url};

// ------------------------------------------------------------------ helpers

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// `slm <args>` on `data` with `env`; exit 0 and JSON stdout required.
fn cli_json(data: &Path, env: &[(&str, String)], args: &[&str]) -> Value {
    let mut c = slm(data);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let (code, out, err) = run(&mut c);
    assert_eq!(code, 0, "slm {args:?}: {out}{err}");
    parse(&out)
}

/// A project whose registered check passes.
fn project(dir: &Path) -> PathBuf {
    let p = dir.join("project");
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::write(p.join("src/app.txt"), "ready\n").unwrap();
    std::fs::write(p.join("check.sh"), "grep -q ready src/app.txt\n").unwrap();
    p
}

fn register(data: &Path, env: &[(&str, String)], proj: &Path) -> String {
    let v = cli_json(
        data,
        env,
        &[
            "check",
            "register",
            "--task",
            "build",
            "--watcher",
            "build",
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
        ],
    );
    v["job_id"].as_str().unwrap().to_string()
}

/// History of loop `build` and show of `run`, through the CLI as `env`
/// routes it; asserts they agree with each other.
struct RunView {
    summary: Value,
    show: Value,
    history_text: String,
    show_text: String,
}

fn view(client_data: &Path, env: &[(&str, String)], run_id: &str) -> RunView {
    let h = cli_json(
        client_data,
        env,
        &["loop", "history", "--name", "build", "--json"],
    );
    let summary = h["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run_id)
        .unwrap_or_else(|| panic!("run {run_id} missing from history: {h}"))
        .clone();
    let show = cli_json(client_data, env, &["loop", "show", run_id, "--json"]);
    let laps = show["laps"].as_array().unwrap();
    assert_eq!(
        summary["laps"],
        json!(laps.len()),
        "history vs show: {summary} {show}"
    );
    let last = laps.last().expect("the run has rows");
    assert_eq!(summary["final"], last["decision"]);
    assert_eq!(summary["ts"], last["ts"]);
    assert_eq!(summary["ended"], show["ended"]);
    assert_eq!(summary["state"], show["state"]);
    // Laps are numbered 1..n without holes.
    let numbers: Vec<u64> = laps.iter().map(|l| l["lap"].as_u64().unwrap()).collect();
    assert_eq!(numbers, (1..=laps.len() as u64).collect::<Vec<_>>());
    let text = |args: &[&str]| {
        let mut c = slm(client_data);
        c.args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let (code, out, err) = run(&mut c);
        assert_eq!(code, 0, "{err}");
        out
    };
    RunView {
        history_text: text(&["loop", "history", "--name", "build"]),
        show_text: text(&["loop", "show", run_id]),
        summary,
        show,
    }
}

/// Waits until `f` holds (polling), at most `secs`.
async fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Laps of `run` as `show --json` lists them.
fn laps_of(show: &Value) -> Vec<Value> {
    show["laps"].as_array().unwrap().clone()
}

fn sqlite(db: &Path, sql: &str) -> String {
    let o = Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .expect("sqlite3 runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn psql(url: &str, sql: &str) -> String {
    let o = Command::new("psql")
        .args([url, "-XAtc", sql])
        .output()
        .expect("psql runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Every lap committed before the fault is still there, unchanged.
fn assert_kept(before: &[Value], after: &[Value]) {
    assert!(
        after.len() >= before.len(),
        "rows lost: {} -> {}",
        before.len(),
        after.len()
    );
    for (b, a) in before.iter().zip(after) {
        assert_eq!(b, a, "a committed lap changed");
    }
}

/// A run cut off before its terminal row: never ended, never DONE, and the
/// text output says so.
fn assert_cut_off(v: &RunView, run_id: &str) {
    assert_eq!(v.summary["final"], "continue", "{}", v.summary);
    assert_eq!(v.summary["ended"], false, "{}", v.summary);
    let state = v.summary["state"].as_str().unwrap();
    assert!(
        state == "unfinished" || state == "interrupted",
        "{}",
        v.summary
    );
    let line = v.history_text.lines().find(|l| l.contains(run_id)).unwrap();
    assert!(line.ends_with(&format!("({state})")), "{line}");
    assert!(
        v.show_text
            .contains(&format!("(run {state}: no terminal lap)")),
        "{}",
        v.show_text
    );
}

// --------------------------------------------------------- kill -9 (SQLite)

/// `kill -9` of `slm serve` while a watcher is waiting: after a restart on
/// the same data root, every lap seen committed is there unchanged, history,
/// show and the database agree, the run is not reported as ended, the
/// databases pass `PRAGMA integrity_check`, and the server works on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_slm_serve_mid_loop_loses_no_committed_row() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let client = dir.path().join("client");
    let proj = project(dir.path());
    let job = register(&data, &[], &proj);
    cli_json(
        &data,
        &[],
        &[
            "remember",
            "The build status is the operator's registered check",
            "--json",
        ],
    );
    let port = free_port();
    let mut server = serve(&data, "serve", port, &[], &[]);
    let env = vec![
        ("SLM_LEDGER_URL", url(port)),
        ("SLM_LOOP_ENGINE_URL", url(port)),
    ];
    let watcher = start_watch(url(port), &job, 100.0, 0.25);

    // Wait for some committed laps, read back through history.
    let mut run_id = String::new();
    eventually(30, "4 committed laps", || {
        let h = cli_json(
            &client,
            &env,
            &["loop", "history", "--name", "build", "--json"],
        );
        match h["runs"].as_array().unwrap().first() {
            Some(r) if r["laps"].as_u64().unwrap() >= 4 => {
                run_id = r["run_id"].as_str().unwrap().to_string();
                true
            }
            _ => false,
        }
    })
    .await;
    // (Read while laps are still being written: show only, not compared.)
    let before = cli_json(&client, &env, &["loop", "show", &run_id, "--json"]);
    assert_eq!(before["state"], "running", "{before}");
    assert_eq!(before["ended"], false);
    let committed = laps_of(&before);

    server.sigkill();
    let (streamed, end) = tokio::time::timeout(Duration::from_secs(30), watcher)
        .await
        .unwrap()
        .unwrap();
    assert!(end.is_err(), "the watcher had no outcome to give: {end:?}");
    assert!(streamed.len() >= committed.len());

    let mut server = serve(&data, "serve", port, &[], &[]);
    let after = view(&client, &env, &run_id);
    assert_kept(&committed, &laps_of(&after.show));
    assert_cut_off(&after, &run_id);
    let db = data.join("memory.db");
    let n = laps_of(&after.show).len();
    assert_eq!(
        sqlite(
            &db,
            &format!("SELECT count(*) FROM loop_laps WHERE run_id = '{run_id}'")
        ),
        n.to_string()
    );
    assert_eq!(
        sqlite(
            &db,
            &format!("SELECT rows FROM loop_runs WHERE run_id = '{run_id}'")
        ),
        n.to_string()
    );
    // The server works on after the crash: a new watcher ends DONE on the
    // receipt, and the old run keeps its honest state.
    let watcher = start_watch(url(port), &job, 100.0, 30.0);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (code, out, err) = run(slm(&data).args(["check", "run", &job, "--json"]));
    assert_eq!(code, 0, "{out}{err}");
    let (_, end) = tokio::time::timeout(Duration::from_secs(20), watcher)
        .await
        .unwrap()
        .unwrap();
    let o = end.unwrap();
    assert_eq!(
        (o.status.as_str(), o.reason.as_str()),
        ("DONE", "gate-passed")
    );
    let done = view(&client, &env, &o.run_id);
    // A finished run keeps the documented shape: no unfinished marking.
    assert!(done.summary.get("ended").is_none(), "{}", done.summary);
    assert!(done.summary.get("state").is_none(), "{}", done.summary);
    assert!(
        !done
            .history_text
            .lines()
            .any(|l| l.contains(&o.run_id) && l.contains('('))
    );
    assert_eq!(done.summary["final"], "done");
    let again = view(&client, &env, &run_id);
    assert_cut_off(&again, &run_id);

    server.stop();
    for f in ["memory.db", "receipt.db"] {
        assert_eq!(sqlite(&data.join(f), "PRAGMA integrity_check"), "ok", "{f}");
    }
}

// ----------------------------------------------- kill -9 (4 processes, PG)

struct Layout {
    dir: tempfile::TempDir,
    db: TestDatabase,
    ports: (u16, u16, u16),
    ledger: Proc,
    receipt: Proc,
    engine: Proc,
}

impl Layout {
    fn start_ledger(dir: &Path, db: &str, port: u16) -> Proc {
        serve(
            &dir.join("ledger"),
            "ledger",
            port,
            &["--only", "ledger", "--database-url", db],
            &[],
        )
    }

    fn start_engine(dir: &Path, pl: u16, pr: u16, pe: u16) -> Proc {
        serve(
            &dir.join("engine"),
            "engine",
            pe,
            &["--only", "loop-engine"],
            &[("SLM_LEDGER_URL", url(pl)), ("SLM_RECEIPT_URL", url(pr))],
        )
    }

    async fn start() -> Self {
        let db = TestDatabase::create("slm_faults").await;
        let dir = tempfile::tempdir().unwrap();
        let (pl, pr, pe) = (free_port(), free_port(), free_port());
        let ledger = Self::start_ledger(dir.path(), &db.url, pl);
        let receipt = serve(
            &dir.path().join("receipt"),
            "receipt",
            pr,
            &["--only", "receipt", "--database-url", &db.url],
            &[],
        );
        let engine = Self::start_engine(dir.path(), pl, pr, pe);
        Self {
            dir,
            db,
            ports: (pl, pr, pe),
            ledger,
            receipt,
            engine,
        }
    }

    /// The operator CLI: every service remote.
    fn env(&self) -> Vec<(&'static str, String)> {
        let (pl, pr, pe) = self.ports;
        vec![
            ("SLM_LEDGER_URL", url(pl)),
            ("SLM_RECEIPT_URL", url(pr)),
            ("SLM_LOOP_ENGINE_URL", url(pe)),
            (
                "SLM_OPERATOR_TOKEN_FILE",
                self.dir
                    .path()
                    .join("receipt/loop-admission/operator.token")
                    .display()
                    .to_string(),
            ),
        ]
    }

    fn operator(&self) -> PathBuf {
        self.dir.path().join("operator")
    }
}

/// Waits for the newest `build` run to have `laps` committed rows; its id.
async fn newest_run_with(client: &Path, env: &[(&str, String)], laps: u64, not: &str) -> String {
    let mut run_id = String::new();
    eventually(30, "committed laps", || {
        let h = cli_json(
            client,
            env,
            &["loop", "history", "--name", "build", "--json"],
        );
        match h["runs"].as_array().unwrap().first() {
            Some(r) if r["run_id"] != not && r["laps"].as_u64().unwrap() >= laps => {
                run_id = r["run_id"].as_str().unwrap().to_string();
                true
            }
            _ => false,
        }
    })
    .await;
    run_id
}

/// Four processes on PostgreSQL. `kill -9` of the loop engine mid-run: after
/// its restart, the committed laps are intact and history, show and the
/// database agree on an unfinished run. `kill -9` of the ledger mid-run: the
/// engine goes on failing open — the demo ends DONE reporting every lost
/// write; a watcher, whose gate must read the ledger, ends ERROR (never DONE)
/// reporting its lost writes — and after the ledger restarts nothing
/// committed is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_one_service_process_on_postgres() {
    let mut l = Layout::start().await;
    let env = l.env();
    let op = l.operator();
    let proj = project(l.dir.path());
    let job = register(&op, &env, &proj);
    cli_json(
        &op,
        &env,
        &[
            "remember",
            "The build status is the operator's registered check",
            "--json",
        ],
    );
    let (pl, pr, pe) = l.ports;

    // --- the loop engine dies mid-run.
    let watcher = start_watch(url(pe), &job, 100.0, 0.25);
    let run_id = newest_run_with(&op, &env, 4, "").await;
    let committed = laps_of(&cli_json(&op, &env, &["loop", "show", &run_id, "--json"]));
    l.engine.sigkill();
    let (_, end) = tokio::time::timeout(Duration::from_secs(30), watcher)
        .await
        .unwrap()
        .unwrap();
    assert!(end.is_err(), "{end:?}");
    // The ledger, alive, holds at least what was seen.
    let rows = |run: &str| {
        psql(
            &l.db.url,
            &format!("SELECT count(*) FROM loop_laps WHERE run_id = '{run}'"),
        )
        .parse::<usize>()
        .unwrap()
    };
    assert!(rows(&run_id) >= committed.len());
    l.engine = Layout::start_engine(l.dir.path(), pl, pr, pe);
    let after = view(&op, &env, &run_id);
    assert_kept(&committed, &laps_of(&after.show));
    assert_cut_off(&after, &run_id);
    assert_eq!(rows(&run_id), laps_of(&after.show).len());
    assert_eq!(
        psql(
            &l.db.url,
            &format!("SELECT rows FROM loop_runs WHERE run_id = '{run_id}'")
        ),
        laps_of(&after.show).len().to_string()
    );

    // --- the ledger dies mid-run.
    let watcher = start_watch(url(pe), &job, 100.0, 0.25);
    let second = newest_run_with(&op, &env, 3, &run_id).await;
    let committed2 = laps_of(&cli_json(&op, &env, &["loop", "show", &second, "--json"]));
    l.ledger.sigkill();
    let (streamed, end) = tokio::time::timeout(Duration::from_secs(60), watcher)
        .await
        .expect("the watcher ends once its gate cannot read the ledger")
        .unwrap();
    let o = end.expect("the engine, alive, reports an outcome");
    assert_eq!(o.status, "ERROR", "{o:?}");
    assert!(o.reason.contains("recall"), "{o:?}");
    assert!(!o.write_errors.is_empty(), "{o:?}");
    assert_eq!(streamed.len() as u32, o.laps);
    // Demo with the ledger down: DONE, every write reported (fail-open).
    let mut c = slm(&op);
    c.args(["loop", "demo", "--json"]);
    for (k, v) in &env {
        c.env(k, v);
    }
    let (code, out, err) = run(&mut c);
    assert_eq!(code, 0, "{out}{err}");
    let demo = parse(&out);
    assert_eq!(demo["status"], "DONE");
    assert_eq!(demo["write_errors"].as_array().unwrap().len(), 3, "{demo}");
    // Text mode warns about them.
    let mut c = slm(&op);
    c.args(["loop", "demo"]);
    for (k, v) in &env {
        c.env(k, v);
    }
    let (code, out, _) = run(&mut c);
    assert_eq!(code, 0);
    assert!(
        out.contains("WARNING: 3 ledger write error(s): lap 1: "),
        "{out}"
    );

    l.ledger = Layout::start_ledger(l.dir.path(), &l.db.url, pl);
    let after = view(&op, &env, &second);
    assert_kept(&committed2, &laps_of(&after.show));
    // Every lap the watcher ran is stored or reported as lost (a batch
    // committed just before the kill whose answer was lost is both).
    let stored = laps_of(&after.show).len();
    assert!(stored <= streamed.len());
    assert!(
        stored + o.write_errors.len() >= streamed.len(),
        "stored {stored}, streamed {}, {:?}",
        streamed.len(),
        o.write_errors
    );
    assert_cut_off(&after, &second);
    // The demo run never reached the ledger.
    let h = cli_json(&op, &env, &["loop", "history", "--json"]);
    assert!(
        h["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["run_id"] != demo["run_id"]),
        "{h}"
    );
    drop((l.receipt, l.engine, l.ledger));
}

// ------------------------------------------- PostgreSQL restart (private)

/// A private PostgreSQL cluster, run as the `postgres` user, stopped on drop.
struct PrivateCluster {
    _dir: tempfile::TempDir,
    data: PathBuf,
    port: u16,
    bin: PathBuf,
}

fn as_postgres(bin: &Path, tool: &str, args: &[&str]) -> (i32, String, String) {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--"])
        .arg(bin.join(tool))
        .args(args)
        .current_dir("/");
    run(&mut c)
}

impl PrivateCluster {
    fn start() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL binaries must be installed under /usr/lib/postgresql")
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .find(|p| p.join("initdb").exists())
            .expect("initdb must be installed under /usr/lib/postgresql/*/bin");
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "the private-cluster test runs initdb/pg_ctl as the postgres user and needs root"
        );
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("pgdata");
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(chown.success());
        let (code, out, err) = as_postgres(
            &bin,
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
        );
        assert_eq!(code, 0, "initdb: {out}{err}");
        let c = Self {
            port: free_port(),
            data,
            _dir: dir,
            bin,
        };
        c.ctl(&["start", "-w"]);
        c
    }

    fn ctl(&self, args: &[&str]) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.data.display()
        );
        let log = self.data.join("server.log");
        let mut all = vec![
            "-D",
            self.data.to_str().unwrap(),
            "-l",
            log.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        if args[0] != "stop" {
            all.extend_from_slice(&["-o", &opts]);
        }
        let (code, out, err) = as_postgres(&self.bin, "pg_ctl", &all);
        assert_eq!(
            code,
            0,
            "pg_ctl {args:?}: {out}{err}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = as_postgres(
            &self.bin,
            "pg_ctl",
            &["-D", self.data.to_str().unwrap(), "stop", "-m", "immediate"],
        );
    }
}

/// `slm serve` on a private PostgreSQL cluster; a watcher waits (long poll,
/// so only events wake it); the cluster restarts (`pg_ctl restart -m fast`);
/// then the check runs. The watcher must still end DONE on the receipt, and
/// promptly (the LISTEN feeds reconnected), with no lap lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_under_a_waiting_watcher() {
    let pg = PrivateCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let proj = project(dir.path());
    let db_env = vec![("SLM_DATABASE_URL", pg.url())];
    let port = free_port();
    let mut server = serve(&data, "serve", port, &["--database-url", &pg.url()], &[]);
    let job = register(&data, &db_env, &proj);
    cli_json(
        &data,
        &db_env,
        &[
            "remember",
            "The build status is the operator's registered check",
            "--json",
        ],
    );
    let watcher = start_watch(url(port), &job, 100.0, 30.0);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!watcher.is_finished());

    let t = Instant::now();
    pg.ctl(&["restart", "-w", "-m", "fast"]);
    eprintln!(
        "private PostgreSQL restarted in {} ms",
        t.elapsed().as_millis()
    );
    // Give the pools and listeners a moment, as an operator would not.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !watcher.is_finished(),
        "the restart alone must not end the watcher: {:?}",
        watcher.await
    );
    let (code, out, err) = run(slm(&data)
        .args(["check", "run", &job, "--json"])
        .env("SLM_DATABASE_URL", pg.url()));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(parse(&out)["verdict"], "PASS");
    let receipt_at = Instant::now();
    let (laps, end) = tokio::time::timeout(Duration::from_secs(25), watcher)
        .await
        .expect("the watcher ends well before its 30 s poll")
        .unwrap();
    let o = end.unwrap();
    eprintln!(
        "watcher {} {} ms after the receipt, laps {}",
        o.status,
        receipt_at.elapsed().as_millis(),
        o.laps
    );
    assert_eq!(
        (o.status.as_str(), o.reason.as_str()),
        ("DONE", "gate-passed"),
        "{o:?}"
    );
    assert!(o.write_errors.is_empty(), "{o:?}");
    let env = vec![
        ("SLM_LEDGER_URL", url(port)),
        ("SLM_LOOP_ENGINE_URL", url(port)),
    ];
    let v = view(&dir.path().join("client"), &env, &o.run_id);
    assert_eq!(laps_of(&v.show).len(), laps.len());
    assert!(v.summary.get("state").is_none(), "{}", v.summary);
    server.stop();
}

// ---------------------------------------------------------------- disk full

/// The data root on a 4 MiB tmpfs (a private mount namespace): once the disk
/// is full, `slm remember` and `slm check run` fail with a message naming the
/// full disk, a demo still ends but reports every lost write; after space is
/// freed the databases pass `PRAGMA integrity_check` and everything committed
/// before is intact.
/// The error names the cause: SQLite's "database or disk is full" or the
/// operating system's "No space left on device".
fn says_disk_full(text: &str) -> bool {
    text.contains("disk is full") || text.contains("No space left on device")
}

#[test]
fn disk_full_on_the_data_root() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the disk-full test mounts a tmpfs in a private mount namespace and needs root"
    );
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let proj = project(dir.path());
    let script = r#"
set -u
mount -t tmpfs -o size=4m tmpfs "$MNT" || exit 90
export SLM_DATA_DIR="$MNT/slm"
step() { name=$1; shift; "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; echo $? >"$OUT/$name.code"; }
step remember1 "$SLM" remember "kept memory one" --json
step remember2 "$SLM" remember "kept memory two" --json
step demo1 "$SLM" loop demo --json
step register "$SLM" check register --task build --watcher build --producer operator-checker --cwd "$PROJ" --check check.sh --artifact 'src/*.txt' --json -- sh check.sh
JOB=$(sed -n 's/.*"job_id": *"\([0-9a-f]*\)".*/\1/p' "$OUT/register.out" | head -1)
echo "$JOB" >"$OUT/job"
sqlite3 "$SLM_DATA_DIR/memory.db" 'PRAGMA wal_checkpoint(TRUNCATE)' >/dev/null
sqlite3 "$SLM_DATA_DIR/receipt.db" 'PRAGMA wal_checkpoint(TRUNCATE)' >/dev/null
dd if=/dev/zero of="$MNT/filler" bs=4k >/dev/null 2>&1
df -k "$MNT" >"$OUT/df"
BIG=$(head -c 60000 /dev/zero | tr '\0' 'x')
step full_remember "$SLM" remember "full disk memory $BIG"
step full_remember_json "$SLM" remember "full disk memory json $BIG" --json
step full_demo "$SLM" loop demo --json
step full_demo_text "$SLM" loop demo
step full_check "$SLM" check run "$JOB"
rm -f "$MNT/filler"
step after_remember "$SLM" remember "after space freed" --json
sqlite3 "$SLM_DATA_DIR/memory.db" 'PRAGMA integrity_check' >"$OUT/integrity_memory" 2>&1
sqlite3 "$SLM_DATA_DIR/receipt.db" 'PRAGMA integrity_check' >"$OUT/integrity_receipt" 2>&1
step recall "$SLM" recall "kept memory" --json
step history "$SLM" loop history --json
step check_after "$SLM" check run "$JOB" --json
exit 0
"#;
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c", script])
        .env("MNT", &mnt)
        .env("OUT", &out)
        .env("PROJ", &proj)
        .env("SLM", env!("CARGO_BIN_EXE_slm"));
    for k in ENV_CLEARED {
        c.env_remove(k);
    }
    let (code, o, e) = run(&mut c);
    assert_eq!(code, 0, "{o}{e}");
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap_or_default();
    let step = |name: &str| -> (i32, String, String) {
        (
            read(&format!("{name}.code")).trim().parse().unwrap_or(-1),
            read(&format!("{name}.out")),
            read(&format!("{name}.err")),
        )
    };
    for s in ["remember1", "remember2", "demo1", "register"] {
        let (code, o, e) = step(s);
        assert_eq!(code, 0, "{s}: {o}{e}");
    }
    let demo1 = parse(&step("demo1").1);
    assert_eq!(demo1["status"], "DONE");
    eprintln!("{}", read("df"));

    // Full: clear errors, non-zero exits.
    let full = |s: &str| {
        let (code, o, e) = step(s);
        eprintln!("{s}: exit {code}\n{o}{e}");
        (code, o, e)
    };
    let (code, _, err) = full("full_remember");
    assert_ne!(code, 0);
    assert!(says_disk_full(&err), "{err}");
    let (code, o, e) = full("full_remember_json");
    assert_ne!(code, 0);
    assert!(says_disk_full(&format!("{o}{e}")), "{o}{e}");
    let (code, o, e) = full("full_demo");
    // The demo fails open: DONE, each lost lap reported.
    if code == 0 {
        let d = parse(&o);
        assert_eq!(d["status"], "DONE");
        let errors = d["write_errors"].as_array().unwrap();
        assert_eq!(errors.len(), 3, "{d}");
        assert!(says_disk_full(errors[0].as_str().unwrap()), "{d}");
    } else {
        assert!(says_disk_full(&format!("{o}{e}")), "{o}{e}");
    }
    let (code, o, e) = full("full_demo_text");
    if code == 0 {
        assert!(o.contains("WARNING: 3 ledger write error(s)"), "{o}");
        assert!(says_disk_full(&o), "{o}");
    } else {
        assert!(says_disk_full(&format!("{o}{e}")), "{o}{e}");
    }
    let (code, o, e) = full("full_check");
    assert_ne!(code, 0, "{o}");
    assert!(says_disk_full(&format!("{o}{e}")), "{o}{e}");

    // Space freed: intact and usable.
    assert_eq!(read("integrity_memory").trim(), "ok");
    assert_eq!(read("integrity_receipt").trim(), "ok");
    let (code, o, e) = step("after_remember");
    assert_eq!(code, 0, "{o}{e}");
    let recall = parse(&step("recall").1);
    let text = recall.to_string();
    assert!(
        text.contains("kept memory one") && text.contains("kept memory two"),
        "{text}"
    );
    assert!(!text.contains("full disk memory"), "{text}");
    let history = parse(&step("history").1);
    assert!(
        history["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["run_id"] == demo1["run_id"] && r["laps"] == 3 && r.get("ended").is_none()),
        "{history}"
    );
    let (code, o, e) = step("check_after");
    assert_eq!(code, 0, "{o}{e}");
    assert_eq!(parse(&o)["verdict"], "PASS");
}

/// The disk fills under a running `slm serve` (its databases already open):
/// a remote `remember` fails naming the full disk, a demo still ends DONE
/// and reports each lost lap write (fail-open), and after space is freed the
/// server goes on, nothing committed is lost — including what it
/// acknowledged after the fault — and the databases are intact.
#[test]
fn disk_full_under_a_running_server() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the disk-full test mounts a tmpfs in a private mount namespace and needs root"
    );
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(out.join("client")).unwrap();
    let script = r#"
set -u
mount -t tmpfs -o size=6m tmpfs "$MNT" || exit 90
DATA="$MNT/slm"
SLM_DATA_DIR="$DATA" "$SLM" serve --grpc "127.0.0.1:$PORT" 2>"$OUT/serve.log" &
SERVE=$!
i=0
until grep -q "gRPC on" "$OUT/serve.log" 2>/dev/null; do
  i=$((i+1)); [ $i -gt 300 ] && { kill $SERVE; exit 91; }
  sleep 0.1
done
export SLM_DATA_DIR="$OUT/client"
export SLM_LEDGER_URL="http://127.0.0.1:$PORT" SLM_LOOP_ENGINE_URL="http://127.0.0.1:$PORT"
step() { name=$1; shift; "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; echo $? >"$OUT/$name.code"; }
step remember1 "$SLM" remember "kept memory one" --json
step demo1 "$SLM" loop demo --json
sqlite3 "$DATA/memory.db" 'PRAGMA wal_checkpoint(TRUNCATE)' >"$OUT/checkpoint" 2>&1
dd if=/dev/zero of="$MNT/filler" bs=4k >/dev/null 2>&1
df -k "$MNT" >"$OUT/df"
step full_demo "$SLM" loop demo --json
BIG=$(head -c 100000 /dev/zero | tr '\0' 'x')
step full_remember "$SLM" remember "full disk memory $BIG" --json
rm -f "$MNT/filler"
step after_remember "$SLM" remember "after space freed" --json
step after_demo "$SLM" loop demo --json
step recall "$SLM" recall "kept memory" --json
step history "$SLM" loop history --json
kill -TERM $SERVE
wait $SERVE
echo $? >"$OUT/serve.code"
sqlite3 "$DATA/memory.db" 'PRAGMA integrity_check' >"$OUT/integrity_memory" 2>&1
sqlite3 "$DATA/memory.db" "SELECT count(*) FROM loop_laps" >"$OUT/lap_rows" 2>&1
sqlite3 "$DATA/memory.db" "SELECT count(*) FROM memories WHERE content = 'after space freed'" >"$OUT/after_rows" 2>&1
[ -n "${KEEP:-}" ] && cp -a "$DATA" "$KEEP/"
exit 0
"#;
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c", script])
        .env("MNT", &mnt)
        .env("OUT", &out)
        .env("PORT", free_port().to_string())
        .env("KEEP", std::env::var("SLM_FAULTS_KEEP").unwrap_or_default())
        .env("SLM", env!("CARGO_BIN_EXE_slm"));
    for k in ENV_CLEARED {
        c.env_remove(k);
    }
    let (code, o, e) = run(&mut c);
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap_or_default();
    assert_eq!(code, 0, "{o}{e}{}", read("serve.log"));
    let step = |name: &str| -> (i32, String, String) {
        let s = (
            read(&format!("{name}.code")).trim().parse().unwrap_or(-1),
            read(&format!("{name}.out")),
            read(&format!("{name}.err")),
        );
        eprintln!("{name}: exit {}\n{}{}", s.0, s.1, s.2);
        s
    };
    eprintln!("{}", read("df"));
    for s in ["remember1", "demo1"] {
        assert_eq!(step(s).0, 0, "{s}");
    }
    let demo1 = parse(&step("demo1").1);

    let (code, o, e) = step("full_demo");
    assert_eq!(code, 0, "the demo fails open: {o}{e}");
    let full_demo = parse(&o);
    assert_eq!(full_demo["status"], "DONE");
    let errors = full_demo["write_errors"].as_array().unwrap();
    assert!(!errors.is_empty(), "{full_demo}");
    for err in errors {
        assert!(says_disk_full(err.as_str().unwrap()), "{full_demo}");
    }
    let (code, o, e) = step("full_remember");
    assert_ne!(code, 0, "{o}");
    assert!(says_disk_full(&format!("{o}{e}")), "{o}{e}");

    // Space freed: the same server goes on.
    assert_eq!(step("after_remember").0, 0);
    let (code, o, _) = step("after_demo");
    assert_eq!(code, 0);
    assert_eq!(parse(&o)["write_errors"], json!([]));
    let recall = step("recall").1;
    assert!(recall.contains("kept memory one"), "{recall}");
    assert!(!recall.contains("full disk memory"), "{recall}");
    let history = parse(&step("history").1);
    let runs = history["runs"].as_array().unwrap();
    let find = |id: &Value| runs.iter().find(|r| &r["run_id"] == id).cloned();
    let r1 = find(&demo1["run_id"]).expect("the run before the fault");
    assert_eq!(r1["laps"], 3);
    assert!(r1.get("ended").is_none(), "{r1}");
    // The run during the fault: what was stored plus what was reported is
    // every row, and it is never called ended without its terminal row.
    let stored = find(&full_demo["run_id"]).map_or(0, |r| {
        assert_eq!(r.get("ended").is_none(), r["final"] == "done", "{r}");
        r["laps"].as_u64().unwrap() as usize
    });
    assert!(stored + errors.len() >= 3, "{stored} + {errors:?}");
    assert_eq!(read("serve.code").trim(), "0", "{}", read("serve.log"));
    assert_eq!(read("integrity_memory").trim(), "ok");
    // What the server acknowledged after the fault is in the file once it
    // stopped (it used to be lost: a connection left inside the transaction
    // whose COMMIT failed turned later commits into savepoints).
    assert_eq!(read("after_rows").trim(), "1", "acknowledged write lost");
    let lap_rows: usize = read("lap_rows").trim().parse().unwrap();
    let listed: u64 = runs.iter().map(|r| r["laps"].as_u64().unwrap()).sum();
    assert_eq!(lap_rows as u64, listed, "loop_laps vs history");
}
