//! Malformed producer output (spec BRIDGE-07..09): non-JSON, wrong types,
//! 10,000 listed runs, JSON nested 100k levels deep, a 50 MB reply and
//! replies that never end are refused with the spec's exact texts, nothing
//! is stored, and this process's memory stays bounded while it happens.
//!
//! The same for the v2 execution-learning observation (BRIDGE-19, 20):
//! against a fake that passes the v2 identity and capability checks, every
//! malformed listing, evidence reply and v2 payload is refused with its
//! exact text, no execution-learning row or event is written, and memory
//! stays bounded; the well-formed recorded replies are accepted.
//!
//! The producer is `tests/fake_producer.py` (named `bounded-loops-mcp` on a
//! PATH the test controls); `mode.json` in the workspace selects the
//! malformed output (`listing` / `evidence_mode`; for v2 `v2` with
//! `listing` / `v2_evidence_mode` / `v2_payload`). It is installed like the
//! real producer: in the `bin` of an environment whose interpreter is
//! `bin/python3` and which holds `lib/python3/site-packages/bounded_loops`,
//! so the v2 producer identity (BRIDGE-18) can be computed.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slm_bridge::domain::{self, refusal};
use slm_bridge::{Bridge, Store};
use slm_runtime::testing::TestDatabase;

/// Peak-RSS growth allowed over the whole barrage (measured: 12–17 MB). The
/// largest reply is 50 MB: a bridge that buffered it whole, or an endless
/// one, would exceed this.
const RSS_BOUND_KB: u64 = 64 * 1024;

/// `VmHWM` belongs to the whole test process and `clear_refs` resets it for
/// every thread: the tests that measure it take turns.
static RSS_TURN: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(Default::default);

struct Env {
    bridge: Bridge,
    ws: PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    _pg: Option<TestDatabase>,
}

async fn env(backend: &str) -> Env {
    let data = tempfile::tempdir().unwrap();
    let (url, pg) = match backend {
        "sqlite" => (
            slm_runtime::config::sqlite_url(&data.path().join("learning.db")),
            None,
        ),
        _ => {
            let pg = TestDatabase::create("slm_bridge_bad").await;
            (pg.url.clone(), Some(pg))
        }
    };
    let store = Store::open(&url).await.unwrap();
    store.verify_m041().await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let bin = install_fake(&root.path().join("venv"));
    let ws = root.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let path = format!("{}:{SYSTEM_PATH}", bin.display());
    Env {
        bridge: Bridge::new(store).with_search_path(path),
        ws,
        _dirs: (data, root),
        _pg: pg,
    }
}

const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Installs the fake as `<venv>/bin/bounded-loops-mcp` the way a Python
/// environment installs the real one: `#!<venv>/bin/python3` (a link to the
/// system python3, with a `pyvenv.cfg`) and a non-empty
/// `lib/python3/site-packages/bounded_loops`. Returns `<venv>/bin`.
fn install_fake(venv: &Path) -> PathBuf {
    let bin = venv.join("bin");
    let package = venv.join("lib/python3/site-packages/bounded_loops");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(
        package.join("__init__.py"),
        "# the fake producer's package\n",
    )
    .unwrap();
    let python = std::env::split_paths(SYSTEM_PATH)
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 on /usr/local/bin:/usr/bin:/bin");
    let python = std::fs::canonicalize(python).unwrap();
    std::os::unix::fs::symlink(&python, bin.join("python3")).unwrap();
    std::fs::write(
        venv.join("pyvenv.cfg"),
        format!(
            "home = {}\ninclude-system-site-packages = false\n",
            python.parent().unwrap().display()
        ),
    )
    .unwrap();
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fake_producer.py"
    ))
    .unwrap();
    let body = script.split_once('\n').expect("a shebang line").1;
    let exe = bin.join("bounded-loops-mcp");
    std::fs::write(&exe, format!("#!{}\n{body}", bin.join("python3").display())).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

impl Env {
    fn mode(&self, mut m: Value) {
        m["fixture"] = json!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/bl_graph_evidence.by-run_ref.json"
        ));
        std::fs::write(self.ws.join("mode.json"), m.to_string()).unwrap();
        let _ = std::fs::remove_file(self.ws.join("calls.log"));
        let _ = std::fs::remove_file(self.ws.join("sent.json"));
    }
    /// The altered v2 evidence document the fake last sent (`v2_payload`).
    fn sent(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.ws.join("sent.json")).ok()?;
        Some(serde_json::from_str(&text).unwrap())
    }
    fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(self.ws.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
    async fn observe(&self) -> Value {
        self.bridge
            .observe_evidence("default", &self.ws.display().to_string())
            .await
            .to_json()
    }
    async fn observe_v2(&self, profile: &str) -> Value {
        self.bridge
            .observe_execution_learning(profile, &self.ws.display().to_string())
            .await
            .to_json()
    }
    /// (v2 receipts, v2 learning events, v1 receipts) of a profile.
    async fn learned(&self, profile: &str) -> (i64, i64, i64) {
        let store = self.bridge.store();
        let l = store.learning_counts(profile).await.unwrap();
        let v1 = store.evidence_counts(profile).await.unwrap();
        (l.receipts_total, l.learning_events_total, v1.receipts_total)
    }
    async fn stored(&self) -> i64 {
        self.bridge
            .store()
            .evidence_counts("default")
            .await
            .unwrap()
            .receipts_total
    }
}

fn refused(text: &str) -> Value {
    json!({"success": false, "durable": false, "created": 0, "error": text})
}

/// `VmHWM` (peak resident set) of this process, in kB.
fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

/// Every malformed mode, the refusal it must give, and how long it may
/// take (the ones that never answer end at the 5 s deadline).
fn cases() -> Vec<(Value, &'static str)> {
    let l = |how: &str| json!({"listing": how});
    let e = |how: &str| json!({"runs": 3, "evidence_mode": how});
    vec![
        // Listing: not JSON, not an object, wrong types.
        (l("nonjson"), refusal::INVALID_JSON),
        (l("json_array"), refusal::INVALID_PAYLOAD),
        (l("json_string"), refusal::INVALID_PAYLOAD),
        (l("status_int"), refusal::LISTING_UNAVAILABLE),
        (l("contract_list"), refusal::LISTING_UNAVAILABLE),
        (l("runs_string"), refusal::LISTING_MALFORMED),
        (l("runs_null"), refusal::LISTING_MALFORMED),
        (l("runs_object"), refusal::LISTING_MALFORMED),
        (l("run_not_object"), refusal::LISTING_MALFORMED),
        (l("run_ref_int"), refusal::LISTING_MALFORMED),
        (l("run_ref_missing"), refusal::LISTING_MALFORMED),
        (l("wrong_types_10k"), refusal::LISTING_MALFORMED),
        (l("two_items"), refusal::INVALID_PAYLOAD),
        (l("no_items"), refusal::INVALID_PAYLOAD),
        // Nested 100k levels inside the text item: serde_json's recursion
        // limit refuses it as invalid JSON, without recursing 100k frames.
        (l("deep_text"), refusal::INVALID_JSON),
        // A 50 MB line and a line that never ends: cut at the line cap.
        (l("huge_50mb"), refusal::INVALID_PAYLOAD),
        (l("endless_line"), refusal::INVALID_PAYLOAD),
        // Transport-level garbage is a transport failure (BRIDGE-07): a
        // result whose `content` is not a list fails to decode at once; an
        // undecodable envelope, replies to no request, endless junk lines
        // and a reply that stalls halfway never yield an answer, and the
        // 5 s deadline refuses them.
        (l("deep_envelope"), refusal::TIMED_OUT),
        (l("content_not_list"), refusal::TIMED_OUT),
        (l("endless_lines"), refusal::TIMED_OUT),
        (l("endless_silence"), refusal::TIMED_OUT),
        (l("wrong_id"), refusal::TIMED_OUT),
        // Evidence replies.
        (e("nonjson"), refusal::INVALID_JSON),
        (e("json_array"), refusal::INVALID_PAYLOAD),
        (e("evidence_status_int"), refusal::EVIDENCE_MALFORMED),
        (e("evidence_list"), refusal::EVIDENCE_MALFORMED),
        (e("evidence_null"), refusal::EVIDENCE_MALFORMED),
        (e("evidence_string"), refusal::EVIDENCE_MALFORMED),
        (e("deep_text"), refusal::INVALID_JSON),
        (e("huge_50mb"), refusal::INVALID_PAYLOAD),
        (e("endless_line"), refusal::INVALID_PAYLOAD),
        (e("endless_silence"), refusal::TIMED_OUT),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_output_is_refused_with_bounded_memory() {
    let _turn = RSS_TURN.lock().await;
    let e = env("sqlite").await;
    // Warm up (first spawn, store, runtime) before measuring.
    e.mode(json!({"runs": 1}));
    assert_eq!(e.observe().await["success"], json!(true));
    e.bridge.store().erase_profile("default").await.unwrap();
    e.bridge.store().reopen_profile("default").await.unwrap();
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = peak_rss_kb();
    let started = Instant::now();
    let mut failures = Vec::new();
    for (mode, want) in cases() {
        e.mode(mode.clone());
        let t = Instant::now();
        let got = e.observe().await;
        let took = t.elapsed();
        eprintln!("{mode} -> {} in {took:?}", got["error"]);
        if got != refused(want) {
            failures.push(format!("{mode}: want {want:?}, got {got}"));
        }
        // Nothing answers later than the observation deadline.
        assert!(took < Duration::from_millis(6500), "{mode}: {took:?}");
        assert_eq!(e.stored().await, 0, "{mode}: something was stored");
    }
    let grew = peak_rss_kb().saturating_sub(before);
    eprintln!(
        "{} malformed modes in {:?}; peak RSS grew {grew} kB",
        cases().len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        grew < RSS_BOUND_KB,
        "peak RSS grew {grew} kB over malformed output"
    );
    // The bridge still observes a well-formed producer afterwards.
    e.mode(json!({"runs": 2}));
    assert_eq!(e.observe().await["created"], json!(2));
}

/// A listing of 10,000 runs: only the first 100 are fetched (BRIDGE-09
/// step 3), the rest never reach the store, and memory stays bounded.
async fn ten_thousand_runs(backend: &str) {
    let _turn = RSS_TURN.lock().await;
    let e = env(backend).await;
    e.mode(json!({"runs": 10_000}));
    let before = peak_rss_kb();
    let t = Instant::now();
    let r = e.observe().await;
    eprintln!("10k listed runs ({backend}) observed in {:?}", t.elapsed());
    assert_eq!(
        r,
        json!({"success": true, "durable": true, "observed": 100, "created": 100,
               "control_plane": "observation_only"})
    );
    let fetches = e
        .calls()
        .iter()
        .filter(|c| c["name"] == "bl_graph_evidence")
        .count();
    assert_eq!(fetches, 100);
    assert_eq!(e.stored().await, 100);
    let grew = peak_rss_kb().saturating_sub(before);
    assert!(grew < RSS_BOUND_KB, "peak RSS grew {grew} kB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_runs_sqlite() {
    ten_thousand_runs("sqlite").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_runs_postgres() {
    ten_thousand_runs("postgres").await
}

/// The gRPC face of the same refusals: a structured `ObserveResponse`,
/// never a `Status`, and the service keeps answering.
#[tokio::test]
async fn grpc_observe_of_malformed_output_is_a_refusal() {
    use slm_proto::v1 as pb;
    use slm_proto::v1::bridge_client::BridgeClient;
    let e = env("sqlite").await;
    let mut c = BridgeClient::new(slm_runtime::transport::in_process(
        slm_bridge::BridgeService::new(e.bridge.clone()).into_server(),
    ));
    for (mode, want) in [
        (json!({"listing": "nonjson"}), refusal::INVALID_JSON),
        (
            json!({"listing": "wrong_types_10k"}),
            refusal::LISTING_MALFORMED,
        ),
        (json!({"listing": "huge_50mb"}), refusal::INVALID_PAYLOAD),
    ] {
        e.mode(mode);
        let r = c
            .observe_evidence(pb::ObserveRequest {
                profile_id: String::new(),
                workspace: e.ws.display().to_string(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!r.success && !r.durable && r.created == 0, "{r:?}");
        assert_eq!(r.error, want);
    }
    let s = c
        .list_observations(pb::ListObservationsRequest {
            profile_id: "default".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((s.total, s.availability.as_str()), (0, "available"));
}

// ------------------------------------------------------------------ v2 ----

/// The tool result of a successful v2 observation.
fn learned_ok(observed: u32, created: u32) -> Value {
    json!({"success": true, "durable": true, "observed": observed, "created": created,
           "control_plane": "execution_reliability_only"})
}

/// Every malformed v2 mode, the observation's refusal, and for a payload
/// refused by the seal (`V2_INVALID`) the BRIDGE-20 reason that the
/// altered document gets from `domain::validate_v2`.
fn v2_cases() -> Vec<(Value, &'static str, Option<&'static str>)> {
    use refusal::*;
    let l = |how: &str| json!({"v2": true, "listing": how});
    let e = |how: &str| json!({"v2": true, "v2_evidence_mode": how});
    let p = |how: &str| json!({"v2": true, "v2_payload": how});
    // BRIDGE-20 texts, as `domain::validate_v2` words them.
    let keys = Some("v2 receipt does not match the bounded contract");
    let size = Some("v2 receipt exceeds the bounded payload size");
    let eligible = Some("receipt is not eligible for execution learning");
    let learnable = Some("only terminal succeeded or executed-gate failure is learnable");
    let authority = Some("receipt authority is malformed");
    let chain = Some("receipt chain metadata is malformed");
    let head = Some("receipt chain head is invalid");
    let bounded = Some("receipt lacks bounded deterministic learning authority");
    let nodes = Some("receipt nodes are malformed");
    let node_schema = Some("receipt node schema is malformed");
    let node_values = Some("receipt node values are malformed");
    let route = Some("route or usage is malformed");
    vec![
        // Listing: not JSON, not an object, wrong types (BRIDGE-08, 19).
        (l("nonjson"), INVALID_JSON, None),
        (l("json_array"), INVALID_PAYLOAD, None),
        (l("json_string"), INVALID_PAYLOAD, None),
        (l("status_int"), LISTING_UNAVAILABLE, None),
        (l("contract_list"), LISTING_UNAVAILABLE, None),
        // v2: `runs` not a list is "unavailable", not "malformed".
        (l("runs_string"), LISTING_UNAVAILABLE, None),
        (l("runs_null"), LISTING_UNAVAILABLE, None),
        (l("runs_object"), LISTING_UNAVAILABLE, None),
        (l("run_not_object"), LISTING_MALFORMED, None),
        (l("run_ref_int"), LISTING_MALFORMED, None),
        (l("run_ref_missing"), LISTING_MALFORMED, None),
        // 10,000 integers where a list of runs is expected.
        (l("wrong_types_10k"), LISTING_MALFORMED, None),
        (l("two_items"), INVALID_PAYLOAD, None),
        (l("no_items"), INVALID_PAYLOAD, None),
        (l("deep_text"), INVALID_JSON, None),
        (l("huge_50mb"), INVALID_PAYLOAD, None),
        (l("endless_line"), INVALID_PAYLOAD, None),
        (l("deep_envelope"), V2_TIMED_OUT, None),
        (l("content_not_list"), V2_TIMED_OUT, None),
        (l("endless_lines"), V2_TIMED_OUT, None),
        (l("endless_silence"), V2_TIMED_OUT, None),
        (l("wrong_id"), V2_TIMED_OUT, None),
        // Execution evidence replies (every fetch malformed).
        (e("nonjson"), INVALID_JSON, None),
        (e("json_array"), INVALID_PAYLOAD, None),
        (e("json_string"), INVALID_PAYLOAD, None),
        (e("rejected"), REJECTED, None),
        (e("evidence_status_int"), V2_EVIDENCE_MALFORMED, None),
        (e("evidence_list"), V2_EVIDENCE_MALFORMED, None),
        (e("evidence_null"), V2_EVIDENCE_MALFORMED, None),
        (e("evidence_string"), V2_EVIDENCE_MALFORMED, None),
        (e("two_items"), INVALID_PAYLOAD, None),
        (e("no_items"), INVALID_PAYLOAD, None),
        (e("deep_text"), INVALID_JSON, None),
        (e("huge_50mb"), INVALID_PAYLOAD, None),
        (e("endless_line"), INVALID_PAYLOAD, None),
        (e("endless_lines"), V2_TIMED_OUT, None),
        (e("endless_silence"), V2_TIMED_OUT, None),
        // The recorded ok evidence, altered (BRIDGE-19 checks, then the seal).
        (p("contract_v1"), V2_UNSUPPORTED_CONTRACT, None),
        (p("contract_missing"), V2_UNSUPPORTED_CONTRACT, None),
        (p("contract_int"), V2_UNSUPPORTED_CONTRACT, None),
        (p("run_id_other"), V2_MISMATCH, None),
        (p("run_state_list"), V2_MISMATCH, None),
        (p("terminal_at_int"), V2_MISMATCH, None),
        (p("eligible_string"), V2_INVALID, eligible),
        (p("eligible_int"), V2_INVALID, eligible),
        (p("eligible_null"), V2_INVALID, eligible),
        (p("eligible_false"), V2_INVALID, eligible),
        (p("eligible_missing"), V2_INVALID, keys),
        (p("demonstration_true"), V2_INVALID, eligible),
        (p("demonstration_string"), V2_INVALID, eligible),
        (p("outcome_int"), V2_INVALID, learnable),
        (
            p("workspace_id_int"),
            V2_INVALID,
            Some("v2 receipt has an invalid workspace_id"),
        ),
        (
            p("graph_digest_short"),
            V2_INVALID,
            Some("v2 receipt has an invalid graph_digest"),
        ),
        (p("receipt_missing"), V2_INVALID, keys),
        (p("receipt_string"), V2_INVALID, authority),
        (p("receipt_list"), V2_INVALID, authority),
        (p("receipt_null"), V2_INVALID, authority),
        (p("receipt_extra_key"), V2_INVALID, chain),
        (p("sequence_bool"), V2_INVALID, head),
        (p("sequence_string"), V2_INVALID, head),
        (p("sequence_float"), V2_INVALID, head),
        (p("sequence_huge"), V2_INVALID, head),
        (p("sequence_nan"), INVALID_JSON, None),
        (p("head_digest_int"), V2_INVALID, head),
        (p("authority_missing"), V2_INVALID, keys),
        (p("authority_string"), V2_INVALID, authority),
        (p("authority_list"), V2_INVALID, authority),
        (p("authority_null"), V2_INVALID, authority),
        (p("authority_scope_other"), V2_INVALID, bounded),
        (p("authority_extra_key"), V2_INVALID, bounded),
        (p("authority_trust_bool"), V2_INVALID, bounded),
        (p("nodes_string"), V2_INVALID, nodes),
        (p("nodes_object"), V2_INVALID, nodes),
        (p("nodes_empty"), V2_INVALID, nodes),
        // 10,000 entries where a list is expected: over 32 KiB first; with
        // well-formed nodes the reply text is over 2 MiB (BRIDGE-08).
        (p("nodes_10k"), V2_INVALID, size),
        (p("nodes_10k_full"), INVALID_PAYLOAD, None),
        (p("node_digests_10k"), V2_INVALID, size),
        (p("node_not_object"), V2_INVALID, node_schema),
        (p("node_attempts_bool"), V2_INVALID, node_values),
        (p("node_gate_string"), V2_INVALID, node_values),
        (p("route_list"), V2_INVALID, route),
        (p("route_value_int"), V2_INVALID, route),
        (p("usage_string"), V2_INVALID, route),
        (p("usage_missing"), V2_INVALID, keys),
        (p("extra_key"), V2_INVALID, keys),
        // `nodes` nested 100k levels deep: refused while decoding.
        (p("nodes_deep"), INVALID_JSON, None),
    ]
}

/// v2 barrage: each malformed mode gets its exact refusal within the
/// deadline, nothing reaches either store, and peak RSS stays bounded.
async fn v2_malformed_output(backend: &str) {
    let _turn = RSS_TURN.lock().await;
    let e = env(backend).await;
    // Warm up (first spawn, store, runtime) under another profile; this is
    // also the control: the recorded replies themselves are accepted.
    e.mode(json!({"v2": true}));
    assert_eq!(e.observe_v2("warmup").await, learned_ok(4, 4));
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = peak_rss_kb();
    let started = Instant::now();
    let mut failures = Vec::new();
    for (mode, want, reason) in v2_cases() {
        e.mode(mode.clone());
        let t = Instant::now();
        let got = e.observe_v2("default").await;
        let took = t.elapsed();
        eprintln!("v2 {mode} -> {} in {took:?}", got["error"]);
        if got != refused(want) {
            failures.push(format!("{mode}: want {want:?}, got {got}"));
        }
        assert!(took < Duration::from_millis(6500), "{mode}: {took:?}");
        assert_eq!(
            e.learned("default").await,
            (0, 0, 0),
            "{mode}: something was stored"
        );
        // The seal refused the document for the reason the mode is about.
        let sent = e.sent();
        if let Some(reason) = reason {
            let Some(Value::Object(mut payload)) = sent else {
                panic!("{mode}: the fake recorded no altered evidence");
            };
            payload.insert("profile_id".into(), json!("default"));
            let verdict = domain::validate_v2(&payload);
            if verdict != Err(reason.to_string()) {
                failures.push(format!("{mode}: want reason {reason:?}, got {verdict:?}"));
            }
        } else if mode.get("v2_payload").is_some() {
            assert!(sent.is_some(), "{mode}: the altered evidence was not sent");
        }
    }
    let grew = peak_rss_kb().saturating_sub(before);
    eprintln!(
        "{} malformed v2 modes ({backend}) in {:?}; peak RSS grew {grew} kB",
        v2_cases().len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        grew < RSS_BOUND_KB,
        "peak RSS grew {grew} kB over malformed v2 output"
    );
    assert_eq!(e.learned("warmup").await, (4, 4, 0));
    // The bridge still observes a well-formed producer afterwards.
    e.mode(json!({"v2": true}));
    assert_eq!(e.observe_v2("default").await, learned_ok(4, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_malformed_output_is_refused_with_bounded_memory_sqlite() {
    v2_malformed_output("sqlite").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_malformed_output_is_refused_with_bounded_memory_postgres() {
    v2_malformed_output("postgres").await
}

/// The positive control: the fake, answering with the real producer's
/// recorded v2 replies, passes the identity and capability checks and its 4
/// ok documents are learned (2 SUCCEEDED, 2 FAILED); the altering path of
/// the fake with nothing altered is accepted too, so the refusals above
/// come from the alterations.
async fn v2_well_formed_is_learned(backend: &str) {
    let e = env(backend).await;
    e.mode(json!({"v2": true}));
    assert_eq!(e.observe_v2("default").await, learned_ok(4, 4));
    let calls = e.calls();
    let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 2 + 15, "{names:?}");
    assert_eq!(names[..2], ["bl_capabilities", "bl_graph_terminal_runs"]);
    assert!(
        names[2..]
            .iter()
            .all(|n| *n == "bl_graph_execution_evidence")
    );
    assert_eq!(calls[1]["args"], json!({"limit": 100}));
    let l = e.bridge.store().learning_counts("default").await.unwrap();
    assert_eq!(
        (
            l.receipts_total,
            l.learning_events_total,
            l.positive_events,
            l.negative_events
        ),
        (4, 4, 2, 2)
    );
    assert_eq!(e.learned("default").await.2, 0, "no v1 rows from v2");
    // Idempotent.
    assert_eq!(e.observe_v2("default").await, learned_ok(4, 0));
    // Through the fake's altering path, unaltered.
    e.mode(json!({"v2": true, "v2_payload": "as_recorded"}));
    assert_eq!(e.observe_v2("other").await, learned_ok(4, 4));
    assert!(e.sent().is_some());
    // A producer cannot choose the profile: its `profile_id` is replaced.
    e.mode(json!({"v2": true, "v2_payload": "profile_id_other"}));
    assert_eq!(e.observe_v2("fourth").await, learned_ok(4, 4));
    assert_eq!(e.sent().unwrap()["profile_id"], json!("intruder"));
    assert_eq!(e.learned("fourth").await, (4, 4, 0));
    assert_eq!(e.learned("intruder").await, (0, 0, 0));
    // Without v2 in the capabilities the same fake is refused up front.
    e.mode(json!({"v2": true, "contracts": [{"id": domain::V1_CONTRACT,
        "tool": domain::V1_TOOL, "operation": domain::V1_OPERATION}]}));
    assert_eq!(e.observe_v2("third").await, refused(refusal::NO_V2));
    assert_eq!(e.learned("third").await, (0, 0, 0));
}

#[tokio::test]
async fn v2_well_formed_is_learned_sqlite() {
    v2_well_formed_is_learned("sqlite").await
}

#[tokio::test]
async fn v2_well_formed_is_learned_postgres() {
    v2_well_formed_is_learned("postgres").await
}

/// A v2 listing of 10,000 learnable runs: only the first 100 are fetched
/// and learned, and memory stays bounded.
async fn v2_ten_thousand_runs(backend: &str) {
    let _turn = RSS_TURN.lock().await;
    let e = env(backend).await;
    e.mode(json!({"v2": true, "v2_runs": 10_000}));
    let before = peak_rss_kb();
    let t = Instant::now();
    let r = e.observe_v2("default").await;
    eprintln!(
        "10k listed v2 runs ({backend}) observed in {:?}",
        t.elapsed()
    );
    assert_eq!(r, learned_ok(100, 100));
    let fetches = e
        .calls()
        .iter()
        .filter(|c| c["name"] == "bl_graph_execution_evidence")
        .count();
    assert_eq!(fetches, 100);
    assert_eq!(e.learned("default").await, (100, 100, 0));
    let grew = peak_rss_kb().saturating_sub(before);
    assert!(grew < RSS_BOUND_KB, "peak RSS grew {grew} kB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_ten_thousand_runs_sqlite() {
    v2_ten_thousand_runs("sqlite").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_ten_thousand_runs_postgres() {
    v2_ten_thousand_runs("postgres").await
}
