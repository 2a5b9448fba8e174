//! `slm_loop_run` against a scripted loop engine: what the gateway sends
//! (the clamped `WatchSpec`, the running agent), what it returns (the
//! WATCH-15 shape), progress notifications, cancellation, and the HTTP
//! route's agent id.

mod common;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use futures::Stream;
use http::Request;
use rmcp::model::{CallToolRequestParams, ClientRequest};
use rmcp::service::PeerRequestOptions;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Response, Status};
use tower::ServiceExt;

use common::{TestClient, call, connect_as, embedded};
use slm_gateway::{Backends, Gateway, ToolProfile, http_router};
use slm_proto::v1 as pb;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_proto::v1::loop_engine_server::{LoopEngine, LoopEngineServer};
use slm_runtime::transport::in_process;

type RunStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;
type EventSender = mpsc::Sender<Result<pb::RunEvent, Status>>;

/// Streams two `continue` rows and a `halt` row, then a HALT outcome with
/// one ledger write error. A watcher named `hang` streams one row and then
/// waits forever; `fail` answers FAILED_PRECONDITION.
#[derive(Clone, Default)]
struct ScriptedEngine {
    specs: Arc<Mutex<Vec<pb::WatchSpec>>>,
    kills: Arc<Mutex<Vec<String>>>,
    held: Arc<Mutex<Vec<EventSender>>>,
}

fn lap(run_id: &str, n: u32, decision: &str, detail: &str) -> Result<pb::RunEvent, Status> {
    Ok(pb::RunEvent {
        event: Some(pb::run_event::Event::Lap(pb::LapEntry {
            run_id: run_id.into(),
            name: "build".into(),
            lap: n,
            decision: decision.into(),
            detail: detail.into(),
            runner_log: "not shown".into(),
            budget: Some(pb::Budget {
                tokens: 0,
                wallclock_s: 0.5,
            }),
            ..Default::default()
        })),
    })
}

#[tonic::async_trait]
impl LoopEngine for ScriptedEngine {
    type RunLoopStream = RunStream;

    async fn run_loop(
        &self,
        req: tonic::Request<pb::RunLoopRequest>,
    ) -> Result<Response<RunStream>, Status> {
        let r = req.into_inner();
        assert_eq!(r.profile_id, "", "the watcher runs in the active profile");
        let Some(pb::run_loop_request::Kind::Watch(spec)) = r.kind else {
            return Err(Status::invalid_argument("watch only"));
        };
        self.specs.lock().unwrap().push(spec.clone());
        if spec.name == "fail" {
            return Err(Status::failed_precondition(
                "the receipt service is unreachable",
            ));
        }
        let (tx, rx) = mpsc::channel(16);
        let run_id = format!("{}-0001", spec.name);
        if spec.name == "hang" {
            tx.send(lap(&run_id, 1, "continue", "waiting"))
                .await
                .unwrap();
            self.held.lock().unwrap().push(tx);
        } else {
            let detail = "recall 'build status': hits=1 top=0.900 floor=False judged_insufficient=False answerability=unjudged:disabled independent_receipt=False receipt_reason=no execution receipt";
            tx.send(lap(&run_id, 1, "continue", detail)).await.unwrap();
            tx.send(lap(&run_id, 2, "continue", detail)).await.unwrap();
            tx.send(lap(&run_id, 3, "halt", "max-iterations"))
                .await
                .unwrap();
            tx.send(Ok(pb::RunEvent {
                event: Some(pb::run_event::Event::Outcome(pb::RunOutcome {
                    status: "HALT".into(),
                    reason: "no execution receipt".into(),
                    laps: 2,
                    run_id,
                    write_errors: vec!["lap 3: database is locked".into()],
                    receipt_reason: "no execution receipt".into(),
                    bound_reason: "max-iterations".into(),
                })),
            }))
            .await
            .unwrap();
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn history(
        &self,
        _req: tonic::Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        Err(Status::unimplemented("scripted"))
    }

    async fn show(
        &self,
        _req: tonic::Request<pb::ShowRequest>,
    ) -> Result<Response<pb::ShowResponse>, Status> {
        Err(Status::unimplemented("scripted"))
    }

    async fn kill(
        &self,
        req: tonic::Request<pb::KillRequest>,
    ) -> Result<Response<pb::KillResponse>, Status> {
        let r = req.into_inner();
        self.kills.lock().unwrap().push(r.run_id.clone());
        Ok(Response::new(pb::KillResponse {
            engaged: true,
            run_ids: vec![r.run_id],
        }))
    }
}

async fn scripted() -> (common::Embedded, ScriptedEngine, Backends) {
    let env = embedded().await;
    let engine = ScriptedEngine::default();
    let backends = Backends {
        ledger: env.backends.ledger.clone(),
        loop_engine: LoopEngineClient::new(in_process(LoopEngineServer::new(engine.clone()))),
        bridge: env.backends.bridge.clone(),
    };
    (env, engine, backends)
}

#[tokio::test]
async fn result_shape_progress_and_spec() {
    let (_env, engine, backends) = scripted().await;
    let test_client = TestClient::new("claude-code");
    let progress = test_client.progress.clone();
    let client = connect_as(Gateway::new(backends, ToolProfile::Code, None), test_client).await;
    let (v, is_error) = call(
        &client,
        "slm_loop_run",
        json!({"name": " build ", "gate_query": " build status ", "max_iterations": 3.7,
               "max_wallclock_s": -1, "poll_interval_s": "500", "max_tokens": -2,
               "no_progress_window": "2", "gate_min_score": "0.25", "require_support": 1,
               "gate_contract": {"job_id": "0123456789abcdef0123456789abcdef"}}),
    )
    .await;
    assert!(!is_error);
    assert_eq!(
        v,
        json!({
            "ok": true, "status": "HALT", "reason": "no execution receipt",
            "bound_reason": "max-iterations", "receipt_reason": "no execution receipt",
            "passed": false, "laps": 2, "run_id": "build-0001",
            "ledger": [
                {"lap": 1, "decision": "continue", "passed": false, "detail": "recall 'build status': hits=1 top=0.900 floor=False judged_insufficient=False answerability=unjudged:disabled independent_receipt=False receipt_reason=no execution receipt"},
                {"lap": 2, "decision": "continue", "passed": false, "detail": "recall 'build status': hits=1 top=0.900 floor=False judged_insufficient=False answerability=unjudged:disabled independent_receipt=False receipt_reason=no execution receipt"},
                {"lap": 3, "decision": "halt", "passed": false, "detail": "max-iterations"}
            ],
            "note": "Independent execution receipts decide completion; memory claims cannot pass.",
            "ledger_write_errors": 1,
            "write_errors": ["lap 3: database is locked"]
        })
    );
    let spec = engine.specs.lock().unwrap()[0].clone();
    assert_eq!(
        spec,
        pb::WatchSpec {
            name: "build".into(),
            gate_query: "build status".into(),
            gate_min_score: 0.25,
            max_iterations: 3,
            // Negative: no wall-clock bound, like 0.
            max_wallclock_s: 0.0,
            // Capped by 120 when there is no wall-clock bound.
            poll_interval_s: 120.0,
            max_tokens: 0,
            no_progress_window: 2,
            require_support: true,
            contract_json: r#"{"job_id":"0123456789abcdef0123456789abcdef"}"#.into(),
            // No route, no explicit id, no SLM_AGENT_ID: the client's name.
            agent_id: "claude-code".into(),
        }
    );
    // One progress notification per streamed row (the client may hand them
    // to its handler after the response).
    for _ in 0..100 {
        if progress.lock().unwrap().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let progress = progress.lock().unwrap().clone();
    assert_eq!(progress.len(), 3, "{progress:?}");
    for (i, p) in progress.iter().enumerate() {
        assert_eq!(p.progress, (i + 1) as f64);
        assert!(p.total.unwrap() >= 3.0);
    }
    assert_eq!(
        progress[2].message.as_deref(),
        Some("lap 3: halt max-iterations")
    );
    assert!(
        progress[0]
            .message
            .as_deref()
            .unwrap()
            .starts_with("lap 1: continue recall 'build status'")
    );
}

#[tokio::test]
async fn contract_forwarding_and_identity() {
    let (_env, engine, backends) = scripted().await;
    let client = connect_as(
        Gateway::new(
            backends.clone(),
            ToolProfile::Full,
            Some(" operator-bot ".into()),
        ),
        TestClient::new("claude-code"),
    )
    .await;
    for contract in [
        json!(null),
        json!("not an object"),
        json!({"job_id": "x", "extra": true}),
        json!([1, 2]),
    ] {
        let mut args =
            json!({"name": "build", "gate_query": "q", "gate_contract": contract.clone()});
        let (v, _) = call(&client, "slm_loop_run", args.clone()).await;
        assert_eq!(v["ok"], json!(true));
        let spec = engine.specs.lock().unwrap().pop().unwrap();
        let want = if contract.is_null() {
            String::new()
        } else {
            contract.to_string()
        };
        assert_eq!(spec.contract_json, want);
        // An explicit agent id wins over the client's name.
        assert_eq!(spec.agent_id, "operator-bot");
        args.as_object_mut().unwrap().remove("gate_contract");
        call(&client, "slm_loop_run", args).await;
        assert_eq!(
            engine.specs.lock().unwrap().pop().unwrap().contract_json,
            ""
        );
    }

    // A nameless client is "mcp_client".
    let client = connect_as(
        Gateway::new(backends, ToolProfile::Full, None),
        TestClient::new(" "),
    )
    .await;
    call(
        &client,
        "slm_loop_run",
        json!({"name": "build", "gate_query": "q"}),
    )
    .await;
    let spec = engine.specs.lock().unwrap().pop().unwrap();
    if std::env::var("SLM_AGENT_ID").is_err() {
        assert_eq!(spec.agent_id, "mcp_client");
    }
}

#[tokio::test]
async fn engine_errors_are_tool_results() {
    let (_env, _engine, backends) = scripted().await;
    let client = connect_as(
        Gateway::new(backends, ToolProfile::Full, None),
        TestClient::new("t"),
    )
    .await;
    let (v, is_error) = call(
        &client,
        "slm_loop_run",
        json!({"name": "fail", "gate_query": "q"}),
    )
    .await;
    assert!(is_error);
    assert_eq!(
        v,
        json!({"ok": false, "error": "the receipt service is unreachable"})
    );
    // History through an engine that fails is a tool result too.
    let (v, _) = call(&client, "slm_loop_history", json!({"name": "x"})).await;
    assert_eq!(v, json!({"ok": false, "error": "scripted"}));
}

#[tokio::test]
async fn a_cancelled_call_stops_its_run() {
    let (_env, engine, backends) = scripted().await;
    let client = connect_as(
        Gateway::new(backends, ToolProfile::Full, None),
        TestClient::new("t"),
    )
    .await;
    let mut params = CallToolRequestParams::new("slm_loop_run");
    params.arguments = json!({"name": "hang", "gate_query": "q"})
        .as_object()
        .cloned();
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(rmcp::model::Request::new(params)),
            PeerRequestOptions::with_timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    let err = handle.await_response().await.unwrap_err();
    assert!(err.to_string().contains("timeout"), "{err}");
    for _ in 0..100 {
        if !engine.kills.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(*engine.kills.lock().unwrap(), vec!["hang-0001".to_string()]);
}

// ---- streamable HTTP, in memory ---------------------------------------

/// POSTs one JSON-RPC message; returns the status, session id and the
/// JSON messages of the (SSE or JSON) body.
async fn post(
    router: &axum::Router,
    path: &str,
    session: Option<&str>,
    body: Value,
) -> (u16, Option<String>, Vec<Value>) {
    let mut req = Request::post(path)
        .header("host", "127.0.0.1:8080")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        req = req
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    let resp = router
        .clone()
        .oneshot(req.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let mut messages = Vec::new();
    if text.trim_start().starts_with('{') {
        messages.push(serde_json::from_str(&text).unwrap());
    } else {
        for line in text.lines() {
            if let Some(data) = line.strip_prefix("data:") {
                let data = data.trim();
                if !data.is_empty() {
                    messages.push(serde_json::from_str(data).unwrap());
                }
            }
        }
    }
    (status, session, messages)
}

async fn http_session(router: &axum::Router, path: &str) -> String {
    let (status, session, messages) = post(
        router,
        path,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "http-client", "version": "1"}}}),
    )
    .await;
    assert_eq!(status, 200, "{messages:?}");
    assert_eq!(
        messages.last().unwrap()["result"]["serverInfo"]["name"],
        json!("slm-gateway")
    );
    let session = session.expect("session id");
    let (status, _, _) = post(
        router,
        path,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202);
    session
}

#[tokio::test]
async fn http_route_names_the_running_agent() {
    let (_env, engine, backends) = scripted().await;
    let router = http_router(backends, ToolProfile::Code);

    for (path, agent) in [
        ("/mcp/agent%20007!%2Fx", "agent007x"),
        ("/mcp/worker-2.a_b", "worker-2.a_b"),
        ("/mcp", "http-client"),
        // Nothing left after sanitising: falls through to the client name.
        ("/mcp/%C3%BC", "http-client"),
    ] {
        let session = http_session(&router, path).await;
        let (status, _, messages) = post(
            &router,
            path,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "slm_loop_run", "arguments": {"name": "build", "gate_query": "q"},
                "_meta": {"progressToken": "p1"}}}),
        )
        .await;
        assert_eq!(status, 200);
        let progress: Vec<&Value> = messages
            .iter()
            .filter(|m| m["method"] == json!("notifications/progress"))
            .collect();
        assert_eq!(progress.len(), 3, "{messages:?}");
        assert_eq!(progress[0]["params"]["progressToken"], json!("p1"));
        let result = &messages.last().unwrap()["result"];
        assert_eq!(
            result["structuredContent"]["status"],
            json!("HALT"),
            "{messages:?}"
        );
        assert_eq!(
            engine.specs.lock().unwrap().pop().unwrap().agent_id,
            agent,
            "{path}"
        );
    }

    // tools/list over HTTP, and a bad argument as a tool result.
    let session = http_session(&router, "/mcp").await;
    let (_, _, messages) = post(
        &router,
        "/mcp",
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    )
    .await;
    assert_eq!(
        messages.last().unwrap()["result"]["tools"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    let (_, _, messages) = post(
        &router,
        "/mcp",
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "slm_loop_history", "arguments": {"name": "", "bogus": [1]}}}),
    )
    .await;
    let result = &messages.last().unwrap()["result"];
    assert_eq!(result["isError"], json!(true));
    assert_eq!(
        result["structuredContent"],
        json!({"ok": false, "error": "unexpected argument 'bogus' (this tool takes: name, limit, profile_id)"})
    );
}

#[tokio::test]
async fn http_refuses_foreign_hosts() {
    let (_env, _engine, backends) = scripted().await;
    let router = http_router(backends, ToolProfile::Code);
    let req = Request::post("/mcp")
        .header("host", "evil.example:80")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Body::from(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "x", "version": "1"}}})
            .to_string(),
        ))
        .unwrap();
    let resp = router.oneshot(req).await.unwrap();
    assert!(resp.status().is_client_error(), "{}", resp.status());
}

/// Reads an HTTP/1.1 response head from `stream`.
async fn response_head(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).await.unwrap(),
            1,
            "connection closed"
        );
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// A client holding its event stream open does not keep `serve_http` from
/// shutting down.
#[tokio::test]
async fn serve_http_shuts_down_with_open_streams() {
    use tokio::io::AsyncWriteExt;
    let (_env, _engine, backends) = scripted().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(slm_gateway::serve_http(
        listener,
        backends,
        ToolProfile::Code,
        async move {
            let _ = stopped.await;
        },
    ));

    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "x", "version": "1"}}})
    .to_string();
    let mut init = tokio::net::TcpStream::connect(addr).await.unwrap();
    init.write_all(
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let head = response_head(&mut init).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let session = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("mcp-session-id:")
                .then(|| l.split_once(':').unwrap().1.trim().to_string())
        })
        .expect("session id");

    let mut events = tokio::net::TcpStream::connect(addr).await.unwrap();
    events
        .write_all(
            format!(
                "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\
                 Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let head = response_head(&mut events).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    stop.send(()).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(5), server).await;
    assert!(done.is_ok(), "serve_http still waiting on the open stream");
    done.unwrap().unwrap().unwrap();
    drop((init, events));
}
