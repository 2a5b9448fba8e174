//! Malformed producer output (spec BRIDGE-07..09): non-JSON, wrong types,
//! 10,000 listed runs, JSON nested 100k levels deep, a 50 MB reply and
//! replies that never end are refused with the spec's exact texts, nothing
//! is stored, and this process's memory stays bounded while it happens.
//!
//! The producer is `tests/fake_producer.py` (named `bounded-loops-mcp` on a
//! PATH the test controls); `mode.json` in the workspace selects the
//! malformed output (`listing` / `evidence_mode`).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slm_bridge::domain::refusal;
use slm_bridge::{Bridge, Store};
use slm_runtime::testing::TestDatabase;

/// Peak-RSS growth allowed over the whole barrage. The largest reply is
/// 50 MB; a bridge that buffered it (or an endless one) would pass this.
const RSS_BOUND_KB: u64 = 200 * 1024;

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
    let bin = root.path().join("bin");
    let ws = root.path().join("ws");
    std::fs::create_dir(&bin).unwrap();
    std::fs::create_dir(&ws).unwrap();
    let exe = bin.join("bounded-loops-mcp");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_producer.py"),
        &exe,
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    Env {
        bridge: Bridge::new(store).with_search_path(path),
        ws,
        _dirs: (data, root),
        _pg: pg,
    }
}

impl Env {
    fn mode(&self, mut m: Value) {
        m["fixture"] = json!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/bl_graph_evidence.by-run_ref.json"
        ));
        std::fs::write(self.ws.join("mode.json"), m.to_string()).unwrap();
        let _ = std::fs::remove_file(self.ws.join("calls.log"));
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
        // Transport-level garbage (an undecodable envelope, replies to no
        // request, endless junk lines, a reply that stalls halfway) never
        // yields an answer: the 5 s deadline refuses it (BRIDGE-07).
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
