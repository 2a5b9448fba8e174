//! The dashboard against real in-process services (SQLite stores in a temp
//! dir): API shapes, limit clamping, escaping, read-only routes, the checks
//! page and the Bounded Loops pane without a bridge.

use std::ffi::OsString;

use axum::Router;
use axum::body::Body;
use http::{Method, Request, StatusCode};
use serde_json::Value;
use slm_dashboard::{CSP, DashboardBackends, DashboardOptions, router_with_options};
use slm_ledger::{LedgerService, Store as LedgerStore};
use slm_loop_engine::LoopEngineService;
use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_receipt::checks::{Checks, Registration};
use slm_receipt::grpc::ReceiptService;
use slm_receipt::store::Store as ReceiptStore;
use slm_runtime::config::sqlite_url;
use slm_runtime::transport::in_process;
use tokio_stream::StreamExt;
use tower::ServiceExt;

const HOSTILE_NAME: &str = "<script>window.__pwned=1</script>";
const HOSTILE_DETAIL: &str = "<img src=x onerror=\"window.__pwned=1\"> & 'quoted'";

struct World {
    data: tempfile::TempDir,
    /// An empty directory used as PATH: `bounded-loops-mcp` is absent.
    empty_path: tempfile::TempDir,
    backends: DashboardBackends,
}

async fn world() -> World {
    let data = tempfile::tempdir().unwrap();
    let ledger_store = LedgerStore::open(&sqlite_url(&data.path().join("memory.db")))
        .await
        .unwrap();
    let ledger = LedgerClient::new(in_process(LedgerService::new(ledger_store).into_server()));
    let receipts = ReceiptStore::open(&sqlite_url(&data.path().join("receipt.db")))
        .await
        .unwrap();
    let receipt = ReceiptClient::new(in_process(
        ReceiptService::new(Checks::new(receipts, data.path()), "t".repeat(64)).into_server(),
    ));
    let loop_engine = LoopEngineClient::new(in_process(
        LoopEngineService::new(ledger.clone(), Some(data.path()))
            .with_receipt(receipt.clone())
            .into_server(),
    ));
    World {
        data,
        empty_path: tempfile::tempdir().unwrap(),
        backends: DashboardBackends {
            ledger,
            loop_engine,
            receipt: Some(receipt),
            bridge: None,
        },
    }
}

impl World {
    fn app(&self) -> Router {
        self.app_with(self.backends.clone())
    }

    fn app_with(&self, b: DashboardBackends) -> Router {
        router_with_options(
            b,
            DashboardOptions {
                search_path: Some(OsString::from(self.empty_path.path())),
                ..Default::default()
            },
        )
    }

    async fn demo(&self) -> (Vec<pb::LapEntry>, pb::RunOutcome) {
        let mut s = self
            .backends
            .loop_engine
            .clone()
            .run_loop(pb::RunLoopRequest {
                profile_id: String::new(),
                kind: Some(pb::run_loop_request::Kind::Demo(pb::DemoSpec {
                    iterations: 0,
                })),
            })
            .await
            .unwrap()
            .into_inner();
        let mut laps = Vec::new();
        while let Some(ev) = s.next().await {
            match ev.unwrap().event {
                Some(pb::run_event::Event::Lap(l)) => laps.push(l),
                Some(pb::run_event::Event::Outcome(o)) => return (laps, o),
                None => {}
            }
        }
        panic!("no outcome")
    }

    async fn lap(&self, run_id: &str, name: &str, lap: u32, decision: &str, detail: &str) {
        self.backends
            .ledger
            .clone()
            .append_lap(pb::AppendLapRequest {
                profile_id: String::new(),
                entry: Some(pb::LapEntry {
                    run_id: run_id.into(),
                    name: name.into(),
                    lap,
                    ts: slm_runtime::time::now_iso(),
                    decision: decision.into(),
                    passed: decision == "done",
                    detail: detail.into(),
                    agent_claimed_done: true,
                    runner_log: String::new(),
                    budget: Some(pb::Budget {
                        tokens: 8 * i64::from(lap),
                        wallclock_s: 0.5,
                    }),
                }),
                agent_id: String::new(),
                gate_row: false,
            })
            .await
            .unwrap();
    }
}

async fn call(app: &Router, method: Method, uri: &str) -> (StatusCode, http::HeaderMap, String) {
    let res = app
        .clone()
        .oneshot(
            Request::builder()
                .method(method)
                .uri(uri)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = axum::body::to_bytes(res.into_body(), 10 << 20)
        .await
        .unwrap();
    (status, headers, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn get_json(app: &Router, uri: &str) -> Value {
    let (status, headers, body) = call(app, Method::GET, uri).await;
    assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    assert!(
        headers[http::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    serde_json::from_str(&body).unwrap()
}

async fn get_html(app: &Router, uri: &str) -> String {
    let (status, headers, body) = call(app, Method::GET, uri).await;
    assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    assert!(
        headers[http::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert_eq!(headers[http::header::CONTENT_SECURITY_POLICY], CSP);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_api_and_pages_show_demo_runs_and_every_lap() {
    let w = world().await;
    let (laps, outcome) = w.demo().await;
    assert_eq!(outcome.status, "DONE");
    let app = w.app();

    let runs = get_json(&app, "/api/runs").await;
    assert_eq!(runs["limit"], 20);
    let run = &runs["runs"][0];
    assert_eq!(run["run_id"], outcome.run_id.as_str());
    assert_eq!(run["name"], "convergence-demo");
    assert_eq!(run["status"], "DONE");
    assert_eq!(run["final"], "done");
    assert_eq!(run["laps"], laps.len());
    assert_eq!(run["reason"], laps.last().unwrap().detail.as_str());
    for key in ["started_ts", "last_ts"] {
        assert!(!run[key].is_null(), "{key}");
    }

    // The reason is the engine's own History reason (one source of truth).
    let h = w
        .backends
        .loop_engine
        .clone()
        .history(pb::HistoryRequest {
            name: "convergence-demo".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(run["reason"], h.runs[0].reason.as_str());
    assert_eq!(run["laps"], h.runs[0].laps);

    let detail = get_json(&app, &format!("/api/runs/{}", outcome.run_id)).await;
    assert_eq!(detail["status"], "DONE");
    assert_eq!(detail["terminal"], true);
    assert_eq!(detail["name"], "convergence-demo");
    let shown = detail["laps"].as_array().unwrap();
    assert_eq!(shown.len(), laps.len());
    for (s, l) in shown.iter().zip(&laps) {
        assert_eq!(s["lap"], l.lap);
        assert_eq!(s["decision"], l.decision.as_str());
        assert_eq!(s["gate_passed"], l.passed);
        assert_eq!(s["detail"], l.detail.as_str());
        assert_eq!(s["agent_claimed_done"], l.agent_claimed_done);
        assert_eq!(s["agent_claim"], "claimed, not trusted");
        assert_eq!(s["tokens"], l.budget.unwrap().tokens);
        assert!(s["wallclock_s"].is_number());
    }

    let home = get_html(&app, "/").await;
    assert!(home.contains(&format!("href=\"/runs/{}\"", outcome.run_id)));
    assert!(home.contains("convergence-demo"));
    assert!(home.contains(">DONE<"));

    let page = get_html(&app, &format!("/runs/{}", outcome.run_id)).await;
    assert_eq!(
        page.matches("<em>claimed, not trusted</em>").count(),
        laps.len() + 1, // every lap, plus the explanation above the table
    );
    for l in &laps {
        assert!(page.contains(&l.detail));
    }
    assert!(page.contains("data-terminal=\"true\""));

    let (status, _, _) = call(&app, Method::GET, "/runs/no-such-run").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, body) = call(&app, Method::GET, "/api/runs/no-such-run").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_clamp_to_20_and_100() {
    let w = world().await;
    for i in 0..105 {
        w.lap(&format!("run-{i:03}"), "many", 1, "halt", "max-iterations")
            .await;
    }
    let app = w.app();
    for (q, want) in [
        ("", 20),
        ("?limit=0", 20),
        ("?limit=-3", 20),
        ("?limit=abc", 20),
        ("?limit=7", 7),
        ("?limit=100", 100),
        ("?limit=500", 100),
    ] {
        let v = get_json(&app, &format!("/api/runs{q}")).await;
        assert_eq!(v["limit"], want, "{q}");
        assert_eq!(v["runs"].as_array().unwrap().len(), want, "{q}");
    }
    let v = get_json(&app, "/api/runs?limit=1").await;
    assert_eq!(v["runs"][0]["run_id"], "run-104", "newest first");
    assert_eq!(v["runs"][0]["status"], "HALT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_and_details_are_escaped() {
    let w = world().await;
    w.lap("evil-run", HOSTILE_NAME, 1, "continue", HOSTILE_DETAIL)
        .await;
    w.lap("evil-run", HOSTILE_NAME, 2, "halt", HOSTILE_DETAIL)
        .await;
    w.lap("a\"><script>x</script>", "quoted", 1, "done", "ok")
        .await;
    let app = w.app();
    for uri in ["/", "/runs/evil-run"] {
        let html = get_html(&app, uri).await;
        assert!(!html.contains(HOSTILE_NAME), "{uri}");
        assert!(!html.contains("<img"), "{uri}");
        assert!(!html.contains("<script>"), "{uri}");
        assert!(
            html.contains("&lt;script&gt;window.__pwned=1&lt;/script&gt;"),
            "{uri}"
        );
        assert!(
            html.contains(
                "&lt;img src=x onerror=&quot;window.__pwned=1&quot;&gt; &amp; &#39;quoted&#39;"
            ),
            "{uri}"
        );
        // The only script is the same-origin asset.
        assert_eq!(html.matches("<script").count(), 1, "{uri}");
    }
    // Run ids are escaped in text and attributes, and percent-encoded in links.
    let home = get_html(&app, "/").await;
    assert!(home.contains("href=\"/runs/a%22%3E%3Cscript%3Ex%3C%2Fscript%3E\""));
    assert!(home.contains("data-run-id=\"a&quot;&gt;&lt;script&gt;x&lt;/script&gt;\""));
    // JSON carries the raw text; the page script renders it with textContent.
    let v = get_json(&app, "/api/runs/evil-run").await;
    assert_eq!(v["name"], HOSTILE_NAME);
    assert_eq!(v["laps"][1]["detail"], HOSTILE_DETAIL);
    assert_eq!(v["status"], "HALT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_progress_is_running_and_live() {
    let w = world().await;
    w.lap("live-run", "slow", 1, "continue", "lap 1").await;
    let app = w.app();
    let v = get_json(&app, "/api/runs/live-run").await;
    assert_eq!(
        (v["status"].as_str(), v["terminal"].as_bool()),
        (Some("RUNNING"), Some(false))
    );
    let page = get_html(&app, "/runs/live-run").await;
    assert!(page.contains("data-terminal=\"false\""));
    assert!(page.contains("id=\"live\" class=\"live\">"));
    let home = get_html(&app, "/").await;
    assert!(home.contains("data-live=\"true\""));
    w.lap("live-run", "slow", 2, "done", "gate passed").await;
    let v = get_json(&app, "/api/runs/live-run").await;
    assert_eq!(v["status"], "DONE");
    assert_eq!(v["laps"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_read_only() {
    let w = world().await;
    w.lap("r1", "n", 1, "done", "ok").await;
    let app = w.app();
    for uri in [
        "/",
        "/runs/r1",
        "/checks",
        "/integrations/bounded-loops",
        "/assets/app.css",
        "/assets/app.js",
        "/api/runs",
        "/api/runs/r1",
        "/api/checks",
        "/api/integrations/bounded-loops",
    ] {
        let (status, _, _) = call(&app, Method::GET, uri).await;
        assert_eq!(status, StatusCode::OK, "GET {uri}");
        for m in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            let (status, h, _) = call(&app, m.clone(), uri).await;
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{m} {uri}");
            assert_eq!(h[http::header::CONTENT_SECURITY_POLICY], CSP, "{m} {uri}");
        }
    }
    let (status, _, _) = call(&app, Method::POST, "/api/kill").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Assets are embedded and typed.
    let (_, h, js) = call(&app, Method::GET, "/assets/app.js").await;
    assert!(
        h[http::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(js.contains("textContent"));
    assert!(!js.contains("innerHTML"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_show_jobs_and_latest_receipts_without_output() {
    let w = world().await;
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("check.sh"),
        "echo SECRET-OUTPUT; exit 0\n",
    )
    .unwrap();
    std::fs::write(project.path().join("app.txt"), "ready\n").unwrap();
    let store = ReceiptStore::open(&sqlite_url(&w.data.path().join("receipt.db")))
        .await
        .unwrap();
    let op = Checks::new(store, w.data.path());
    let job = op
        .register(Registration {
            profile_id: "default".into(),
            task_id: "build".into(),
            watcher_name: "build".into(),
            producer: "operator-checker".into(),
            argv: vec!["sh".into(), "check.sh".into()],
            cwd: project.path().display().to_string(),
            artifact_paths: vec!["app.txt".into()],
            check_paths: vec!["check.sh".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let ran = op.run(&job.job_id, 10.0, |_| {}).await.unwrap();
    let app = w.app();
    let v = get_json(&app, "/api/checks").await;
    assert_eq!(v["available"], true);
    let j = &v["jobs"][0];
    assert_eq!(j["job_id"], job.job_id.as_str());
    assert_eq!(j["watcher"], "build");
    assert_eq!(j["producer"], "operator-checker");
    assert_eq!(j["expired"], false);
    assert_eq!(j["latest_verdict"], ran.receipt.verdict.as_str());
    assert!(!j["containment"].as_str().unwrap().is_empty());
    // What the receipt recorded, "none" included: never blank for a new run.
    assert!(!j["sandbox"].as_str().unwrap().is_empty());
    assert!(j["expires_at"].as_str().unwrap().len() > 10);
    let page = get_html(&app, "/checks").await;
    assert!(page.contains(&job.job_id));
    assert!(page.contains("operator-checker"));
    assert!(!page.contains("SECRET-OUTPUT"));
    assert!(!v.to_string().contains("SECRET-OUTPUT"));

    let mut b = w.backends.clone();
    b.receipt = None;
    let app = w.app_with(b);
    let v = get_json(&app, "/api/checks").await;
    assert_eq!(v["available"], false);
    assert!(
        get_html(&app, "/checks")
            .await
            .contains("No receipt service is connected")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pane_without_a_bridge_says_not_installed() {
    let w = world().await;
    let app = w.app();
    let v = get_json(&app, "/api/integrations/bounded-loops").await;
    assert_eq!(v["state"], "not installed");
    assert_eq!(v["installed"], false);
    assert_eq!(v["reason"], "bounded_loops_mcp_not_in_path");
    assert_eq!(v["eligible_for_learning"], false);
    assert_eq!(v["contract_verified_live"], false);
    assert_eq!(v["contract"], "bounded-loops.dev/slm-bridge/v1");
    assert_eq!(v["observations"], 0);

    let html = get_html(&app, "/integrations/bounded-loops").await;
    assert!(html.contains(">not installed<"));
    assert!(!html.contains("class=\"error\""));
    assert!(!html.to_lowercase().contains(">live<"));
    // Four parts, in order.
    let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("{s}"));
    let parts = [
        at("id=\"bridge-status\""),
        at("id=\"how-it-works\""),
        at("id=\"run-it\""),
        at("id=\"adapters\""),
    ];
    assert!(parts.windows(2).all(|p| p[0] < p[1]));
    assert!(html.contains("Bounded Loop observations"));
    assert!(html.contains("eligible_for_learning = false"));
    // The nine adapters, plus the non-adapter chip.
    assert_eq!(html.matches("class=\"chip adapter\"").count(), 9);
    for a in [
        "CrewAI",
        "LangChain",
        "LangGraph",
        "Semantic Kernel",
        "LlamaIndex",
        "Microsoft Agent Framework",
        "AutoGen",
        "Google ADK",
        "OpenAI Agents",
        "any MCP-compatible agent",
    ] {
        assert!(html.contains(&format!(">{a}</li>")), "{a}");
    }
    // The five statuses with the seed's meanings.
    for s in ["DONE", "HALT", "PAUSE", "KILLED", "ERROR"] {
        assert!(html.contains(&format!(">{s}</span>")), "{s}");
    }
    assert!(html.contains("Any safety bound"));
    assert!(html.contains("max-iterations, token-budget, wallclock, no-progress"));
    assert!(html.contains("Recall alone never completes a loop"));
    assert!(html.contains("independent execution receipt"));
    // Run it: CLI and the MCP call with a receipt contract.
    assert!(html.contains("slm loop demo"));
    assert!(html.contains("slm loop show &lt;run_id&gt;"));
    assert!(
        html.contains("gate_contract={&quot;job_id&quot;: &quot;&lt;registered job id&gt;&quot;}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executable_on_path_without_a_bridge_is_unknown_never_live() {
    let w = world().await;
    let bin = tempfile::tempdir().unwrap();
    let exe = bin.path().join("bounded-loops-mcp");
    std::fs::write(&exe, "#!/bin/sh\nexit 0\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let app = router_with_options(
        w.backends.clone(),
        DashboardOptions {
            search_path: Some(OsString::from(bin.path())),
            ..Default::default()
        },
    );
    let v = get_json(&app, "/api/integrations/bounded-loops").await;
    assert_eq!(v["state"], "unknown");
    assert!(v["installed"].is_null());
    assert_eq!(v["found_on_path"], true);
    assert_eq!(v["contract_verified_live"], false);
    let html = get_html(&app, "/integrations/bounded-loops").await;
    assert!(html.contains(">unknown<"));
    assert!(html.contains("Nothing has been observed yet"));
}

/// A page on another site cannot read the dashboard through DNS rebinding:
/// only loopback (or explicitly allowed) Host names are served.
#[tokio::test]
async fn foreign_hosts_are_refused() {
    let w = world().await;
    let app = w.app();
    for (host, want) in [
        ("evil.example", StatusCode::FORBIDDEN),
        ("evil.example:8080", StatusCode::FORBIDDEN),
        ("127.0.0.1:8080", StatusCode::OK),
        ("localhost", StatusCode::OK),
        ("[::1]:8080", StatusCode::OK),
    ] {
        let res = app
            .clone()
            .oneshot(
                Request::builder()
                    .uri("/api/runs")
                    .header(http::header::HOST, host)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(res.status(), want, "{host}");
    }
}
