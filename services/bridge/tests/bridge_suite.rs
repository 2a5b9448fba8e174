//! The bridge end to end against a fake producer (a Python script named
//! `bounded-loops-mcp` on a PATH the test controls), on SQLite and on a real
//! PostgreSQL (`SLM_TEST_POSTGRES_URL`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slm_bridge::domain::refusal;
use slm_bridge::{Bridge, Store};
use slm_runtime::testing::TestDatabase;

struct Env {
    bridge: Bridge,
    bin: PathBuf,
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
            let pg = TestDatabase::create("slm_bridge").await;
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
        bin,
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
    fn ws(&self) -> String {
        self.ws.display().to_string()
    }
    async fn observe(&self) -> Value {
        self.bridge
            .observe_evidence("default", &self.ws())
            .await
            .to_json()
    }
}

fn refused(text: &str) -> Value {
    json!({"success": false, "durable": false, "created": 0, "error": text})
}

async fn observes_fetches_by_run_ref_and_is_idempotent(backend: &str) {
    let e = env(backend).await;
    e.mode(json!({"runs": 101, "unavailable": ["run-3"]}));
    let t = Instant::now();
    let r = e.observe().await;
    eprintln!("101 listed runs observed in {:?}", t.elapsed());
    assert_eq!(
        r,
        json!({"success": true, "durable": true, "observed": 99, "created": 99, "control_plane": "observation_only"})
    );
    let calls = e.calls();
    let fetches: Vec<&Value> = calls
        .iter()
        .filter(|c| c["name"] == "bl_graph_evidence")
        .collect();
    assert_eq!(fetches.len(), 100, "101 listed runs give 100 fetches");
    for f in &fetches {
        let args = f["args"].as_object().unwrap();
        assert_eq!(
            args.keys().collect::<Vec<_>>(),
            vec!["run_ref"],
            "only run_ref, never run_id"
        );
    }
    assert_eq!(calls[1]["args"], json!({"limit": 100}));
    // Only whitelisted fields reached the store.
    let rows = e.bridge.store().list_v1("default", 500).await.unwrap();
    assert_eq!(rows.len(), 99);
    let counts = e.bridge.store().evidence_counts("default").await.unwrap();
    assert_eq!(counts.receipts_total, 99);
    assert_eq!(counts.demonstrations_total, 99);
    assert_eq!(counts.eligible_for_learning_total, 0);
    // Identical re-import creates nothing.
    let r = e.observe().await;
    assert_eq!(r["created"], 0);
    assert_eq!(r["success"], true);
    // A different receipt head for the same run address is a conflict.
    e.mode(json!({"runs": 2, "head": "c".repeat(64)}));
    let r = e.observe().await;
    assert_eq!(
        r,
        json!({"success": false, "durable": false, "created": 0, "retryable": false,
        "error": refusal::DIFFERENT_HEAD})
    );
}

async fn refusals_before_any_write(backend: &str) {
    let e = env(backend).await;
    e.mode(json!({"runs": 3, "huge": "run-1"}));
    assert_eq!(e.observe().await, refused(refusal::INVALID_PAYLOAD));
    e.mode(json!({"runs": 3, "giant": "run-0"}));
    assert_eq!(e.observe().await, refused(refusal::INVALID_PAYLOAD));
    e.mode(json!({"runs": 3, "rejected": "run-2"}));
    assert_eq!(e.observe().await, refused(refusal::REJECTED));
    e.mode(json!({"contracts": [{"id": "bounded-loops.dev/slm-bridge/v1", "tool": "bl_graph_evidence", "operation": "x"}]}));
    assert_eq!(e.observe().await, refused(refusal::NO_V1));
    assert_eq!(
        e.bridge
            .store()
            .evidence_counts("default")
            .await
            .unwrap()
            .receipts_total,
        0
    );
    // Workspace rules.
    e.mode(json!({}));
    for ws in ["relative/ws", "/no/such/dir"] {
        assert_eq!(
            e.bridge.observe_evidence("default", ws).await.to_json(),
            refused(refusal::NOT_APPROVED)
        );
    }
    let link = e.ws.parent().unwrap().join("link");
    std::os::unix::fs::symlink(&e.ws, &link).unwrap();
    assert_eq!(
        e.bridge
            .observe_evidence("default", link.to_str().unwrap())
            .await
            .to_json(),
        refused(refusal::NOT_APPROVED)
    );
    // Trust: group-writable executable, then a group-writable parent.
    let exe = e.bin.join("bounded-loops-mcp");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o775)).unwrap();
    assert_eq!(e.observe().await, refused(refusal::UNTRUSTED_FILE));
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&e.bin, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(e.observe().await, refused(refusal::UNTRUSTED_FILE));
    std::fs::set_permissions(&e.bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&exe, Some(4321), None).unwrap();
        assert_eq!(e.observe().await, refused(refusal::UNTRUSTED_OWNER));
        std::os::unix::fs::chown(&exe, Some(0), None).unwrap();
    }
    // A symlink whose target has another name.
    std::fs::rename(&exe, e.bin.join("other")).unwrap();
    std::os::unix::fs::symlink(e.bin.join("other"), &exe).unwrap();
    assert_eq!(e.observe().await, refused(refusal::UNSAFE_EXECUTABLE));
    // Not installed, whatever the workspace is.
    std::fs::remove_file(&exe).unwrap();
    assert_eq!(
        e.bridge
            .observe_evidence("default", "not even absolute")
            .await
            .to_json(),
        refused(refusal::NOT_INSTALLED)
    );
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.split_whitespace().nth(2).is_none_or(|st| st != "Z"),
        Err(_) => false,
    }
}

async fn a_hung_producer_times_out_and_dies(backend: &str) {
    let e = env(backend).await;
    e.mode(json!({"hang": true}));
    let t = Instant::now();
    let r = e.observe().await;
    let took = t.elapsed();
    eprintln!("hung producer refused after {took:?}");
    assert_eq!(r, refused(refusal::TIMED_OUT));
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_millis(6500),
        "{took:?}"
    );
    let pids = std::fs::read_to_string(e.ws.join("pids")).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for pid in pids.split_whitespace().map(|p| p.parse::<i32>().unwrap()) {
        assert!(!alive(pid), "process {pid} survived");
    }
}

async fn erasure_tombstones_the_profile(backend: &str) {
    let e = env(backend).await;
    e.mode(json!({"runs": 2}));
    assert_eq!(e.observe().await["created"], 2);
    e.bridge.store().erase_profile("default").await.unwrap();
    assert_eq!(
        e.bridge
            .store()
            .evidence_counts("default")
            .await
            .unwrap()
            .receipts_total,
        0
    );
    let r = e.observe().await;
    assert_eq!(r["error"], refusal::PROFILE_CLOSED);
    assert_eq!(r["created"], 0);
    // Another profile is unaffected.
    let r = e.bridge.observe_evidence("other", &e.ws()).await.to_json();
    assert_eq!(r["created"], 2);
    e.bridge.store().reopen_profile("default").await.unwrap();
    assert_eq!(e.observe().await["created"], 2);
}

macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name("sqlite").await })*
        }
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name("postgres").await })*
        }
    };
}

both_backends!(
    observes_fetches_by_run_ref_and_is_idempotent,
    refusals_before_any_write,
    a_hung_producer_times_out_and_dies,
    erasure_tombstones_the_profile,
);

#[allow(dead_code)]
fn unused(_: &Path) {}

#[tokio::test]
async fn grpc_status_and_list() {
    use slm_proto::v1 as pb;
    use slm_proto::v1::bridge_client::BridgeClient;
    let e = env("sqlite").await;
    e.mode(json!({"runs": 2}));
    let mut c = BridgeClient::new(slm_runtime::transport::in_process(
        slm_bridge::BridgeService::new(e.bridge.clone()).into_server(),
    ));
    let r = c
        .observe_evidence(pb::ObserveRequest {
            profile_id: String::new(),
            workspace: e.ws(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        r.success && r.created == 2 && r.retryable.is_none(),
        "{r:?}"
    );
    let l = c
        .list_observations(pb::ListObservationsRequest {
            profile_id: "default".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (l.total, l.observations.len(), l.availability.as_str()),
        (2, 2, "available")
    );
    // The fake has no `bl` next to it, and its initialize-only fallback
    // fails outside a workspace: a failed probe is "unknown", never
    // "not installed" (GAP-30).
    let s = c
        .status(pb::BridgeStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (s.state.as_str(), s.probe_failed, s.observations),
        ("unknown", true, 2)
    );
    assert!(s.reason.starts_with("probe_error:"), "{s:?}");
    // Not installed is a normal state.
    std::fs::remove_file(e.bin.join("bounded-loops-mcp")).unwrap();
    let s = c
        .status(pb::BridgeStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (s.state.as_str(), s.reason.as_str()),
        ("not installed", "bounded_loops_mcp_not_in_path")
    );
}
