//! The Bounded Loops pane with a bridge client: a stand-in Bridge service
//! answers the current `bridge.proto`, so the rendering of every state is
//! checked without the separate product (never "live"; a failed probe is
//! "unknown", not "not installed"; observed runs escaped).

use std::ffi::OsString;

use axum::body::Body;
use http::{Request, StatusCode};
use serde_json::Value;
use slm_dashboard::{DashboardBackends, DashboardOptions, router_with_options};
use slm_ledger::{LedgerService, Store as LedgerStore};
use slm_loop_engine::LoopEngineService;
use slm_proto::v1 as pb;
use slm_proto::v1::bridge_client::BridgeClient;
use slm_proto::v1::bridge_server::{Bridge, BridgeServer};
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_runtime::config::sqlite_url;
use slm_runtime::transport::in_process;
use tonic::{Request as GrpcRequest, Response, Status};
use tower::ServiceExt;

#[derive(Clone)]
struct FakeBridge {
    status: Result<pb::BridgeStatusResponse, tonic::Code>,
    observations: Vec<pb::Observation>,
    demonstrations: u64,
}

#[tonic::async_trait]
impl Bridge for FakeBridge {
    async fn status(
        &self,
        _: GrpcRequest<pb::BridgeStatusRequest>,
    ) -> Result<Response<pb::BridgeStatusResponse>, Status> {
        self.status
            .clone()
            .map(Response::new)
            .map_err(|c| Status::new(c, "probe failed"))
    }
    async fn observe_evidence(
        &self,
        _: GrpcRequest<pb::ObserveRequest>,
    ) -> Result<Response<pb::ObserveResponse>, Status> {
        panic!("the dashboard must never observe evidence")
    }
    async fn observe_execution_learning(
        &self,
        _: GrpcRequest<pb::ObserveRequest>,
    ) -> Result<Response<pb::ObserveResponse>, Status> {
        panic!("the dashboard must never observe evidence")
    }
    async fn erase_profile(
        &self,
        _: GrpcRequest<pb::ProfileErasure>,
    ) -> Result<Response<pb::ProfileErasureResponse>, Status> {
        panic!("the dashboard must never erase evidence")
    }
    async fn reopen_profile(
        &self,
        _: GrpcRequest<pb::ProfileErasure>,
    ) -> Result<Response<pb::ProfileErasureResponse>, Status> {
        panic!("the dashboard must never reopen a profile")
    }
    async fn list_observations(
        &self,
        _: GrpcRequest<pb::ListObservationsRequest>,
    ) -> Result<Response<pb::ListObservationsResponse>, Status> {
        Ok(Response::new(pb::ListObservationsResponse {
            total: self.observations.len() as u64,
            demonstration_count: self.demonstrations,
            observations: self.observations.clone(),
            ..Default::default()
        }))
    }
}

async fn app(fake: FakeBridge, path: &std::path::Path) -> (axum::Router, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let store = LedgerStore::open(&sqlite_url(&data.path().join("memory.db")))
        .await
        .unwrap();
    let ledger = LedgerClient::new(in_process(LedgerService::new(store).into_server()));
    let loop_engine = LoopEngineClient::new(in_process(
        LoopEngineService::new(ledger.clone(), Some(data.path())).into_server(),
    ));
    let backends = DashboardBackends {
        ledger,
        loop_engine,
        receipt: None,
        bridge: Some(BridgeClient::new(in_process(BridgeServer::new(fake)))),
    };
    let r = router_with_options(
        backends,
        DashboardOptions {
            search_path: Some(OsString::from(path)),
            ..Default::default()
        },
    );
    (r, data)
}

async fn get(app: &axum::Router, uri: &str) -> String {
    let res = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let b = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    String::from_utf8(b.to_vec()).unwrap()
}

fn observation(run_ref: &str, outcome: &str, state: &str, demo: bool) -> pb::Observation {
    pb::Observation {
        run_ref: run_ref.into(),
        run_id: "r".into(),
        outcome: outcome.into(),
        terminal_at: "2026-01-01T00:00:00+00:00".into(),
        contract: "bounded-loops.dev/slm-bridge/v1".into(),
        eligible_for_learning: false,
        run_state: state.into(),
        demonstration: demo,
        observed_at: "2026-01-01T00:00:01+00:00".into(),
        receipt_sequence: 7,
        ..Default::default()
    }
}

#[tokio::test]
async fn installed_bridge_shows_version_contracts_and_escaped_runs() {
    let empty = tempfile::tempdir().unwrap();
    let fake = FakeBridge {
        status: Ok(pb::BridgeStatusResponse {
            state: "installed".into(),
            version: "1.2.3".into(),
            contracts: vec!["bounded-loops.dev/slm-bridge/v1".into()],
            observations: 2,
            ..Default::default()
        }),
        observations: vec![
            observation(
                "<script>window.__pwned=1</script>",
                "SUCCEEDED",
                "SUCCEEDED",
                true,
            ),
            observation("run-b", "FAILED", "TIMED_OUT", false),
        ],
        demonstrations: 1,
    };
    let (app, _d) = app(fake, empty.path()).await;
    let v: Value =
        serde_json::from_str(&get(&app, "/api/integrations/bounded-loops").await).unwrap();
    assert_eq!(v["state"], "installed");
    assert_eq!(v["installed"], true);
    assert_eq!(v["version"], "1.2.3");
    assert_eq!(v["source"], "bridge-service");
    assert_eq!(v["contract_verified_live"], false);
    assert_eq!(v["observations"], 2);
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    let html = get(&app, "/integrations/bounded-loops").await;
    assert!(html.contains(">installed<"));
    assert!(html.contains("1.2.3"));
    assert!(html.contains("Bounded Loop observations: <strong>2</strong>"));
    assert!(html.contains("1 of 2 observed run(s) is a demonstration."));
    assert!(html.contains("&lt;script&gt;window.__pwned=1&lt;/script&gt;"));
    assert!(!html.contains("<script>window"));
    assert!(html.contains(">demo</span>"));
    assert!(html.contains("(TIMED_OUT)"));
    assert!(html.contains("seq 7"));
    assert!(html.contains("eligible_for_learning = false"));
    assert!(html.contains("local_hash_chain_only"));
}

#[tokio::test]
async fn a_failed_probe_is_unknown_not_not_installed() {
    let empty = tempfile::tempdir().unwrap();
    for status in [
        Ok(pb::BridgeStatusResponse {
            state: "unknown".into(),
            reason: "probe_error:timeout".into(),
            probe_failed: true,
            ..Default::default()
        }),
        Ok(pb::BridgeStatusResponse {
            state: "installed".into(),
            probe_failed: true,
            ..Default::default()
        }),
    ] {
        let fake = FakeBridge {
            status,
            observations: vec![],
            demonstrations: 0,
        };
        let (app, _d) = app(fake, empty.path()).await;
        let v: Value =
            serde_json::from_str(&get(&app, "/api/integrations/bounded-loops").await).unwrap();
        assert_eq!(v["state"], "unknown");
        assert!(v["installed"].is_null());
        assert_eq!(v["probe_failed"], true);
        let html = get(&app, "/integrations/bounded-loops").await;
        assert!(html.contains(">unknown<"));
        assert!(html.contains("Nothing has been observed yet"));
    }
}

#[tokio::test]
async fn an_unreachable_bridge_falls_back_to_the_path_lookup() {
    // Absent from PATH: "not installed" even though the service failed.
    let empty = tempfile::tempdir().unwrap();
    let fake = FakeBridge {
        status: Err(tonic::Code::Unavailable),
        observations: vec![],
        demonstrations: 0,
    };
    let (a, _d) = app(fake.clone(), empty.path()).await;
    let v: Value = serde_json::from_str(&get(&a, "/api/integrations/bounded-loops").await).unwrap();
    assert_eq!(v["state"], "not installed");
    assert_eq!(v["installed"], false);
    // On PATH: unknown, labelled as a probe failure.
    let bin = tempfile::tempdir().unwrap();
    let exe = bin.path().join("bounded-loops-mcp");
    std::fs::write(&exe, "#!/bin/sh\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (a, _d) = app(fake, bin.path()).await;
    let v: Value = serde_json::from_str(&get(&a, "/api/integrations/bounded-loops").await).unwrap();
    assert_eq!(v["state"], "unknown");
    assert!(v["installed"].is_null());
    assert_eq!(v["probe_failed"], true);
    assert_eq!(v["reason"], "probe_error:Unavailable");
}
