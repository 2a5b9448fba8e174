//! Shared test wiring: in-process backends built like the bundle builds
//! them, and an rmcp client talking to a gateway over an in-memory duplex.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tempfile::TempDir;

use slm_gateway::{Backends, Gateway};
use slm_ledger::{LedgerService, Store};
use slm_loop_engine::LoopEngineService;
use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_runtime::transport::in_process;

pub struct Embedded {
    pub dir: TempDir,
    pub backends: Backends,
}

/// A ledger on a temporary SQLite file and a loop engine over it, both in
/// this process.
pub async fn embedded() -> Embedded {
    let dir = tempfile::tempdir().unwrap();
    let url = slm_runtime::config::sqlite_url(&dir.path().join("memory.db"));
    let store = Store::open(&url).await.unwrap();
    let ledger = LedgerClient::new(in_process(LedgerService::new(store).into_server()));
    let engine = LoopEngineService::new(ledger.clone(), Some(dir.path())).into_server();
    let loop_engine = LoopEngineClient::new(in_process(engine));
    let learning = slm_runtime::config::sqlite_url(&dir.path().join("learning.db"));
    let bridge = slm_bridge::BridgeService::new(slm_bridge::Bridge::new(
        slm_bridge::Store::open(&learning).await.unwrap(),
    ));
    let bridge = slm_proto::v1::bridge_client::BridgeClient::new(in_process(bridge.into_server()));
    Embedded {
        dir,
        backends: Backends {
            ledger,
            loop_engine,
            bridge,
        },
    }
}

/// A client that records progress notifications and names itself.
#[derive(Clone)]
pub struct TestClient {
    pub name: String,
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl TestClient {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            progress: Arc::default(),
        }
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new(self.name.clone(), "0.0.1"),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

pub type Client = RunningService<RoleClient, TestClient>;

/// Serves `gateway` on one end of an in-memory duplex and connects a client
/// (legacy `initialize` handshake) to the other.
pub async fn connect(gateway: Gateway) -> Client {
    connect_as(gateway, TestClient::new("gateway-test")).await
}

pub async fn connect_as(gateway: Gateway, client: TestClient) -> Client {
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = gateway.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    client.serve(client_io).await.expect("client initialise")
}

/// Calls a tool; returns the JSON object of its text content and isError.
pub async fn call(client: &Client, tool: &str, args: Value) -> (Value, bool) {
    let result = try_call(client, tool, args).await.expect("tools/call");
    decode(&result)
}

pub async fn try_call(
    client: &Client,
    tool: &str,
    args: Value,
) -> Result<CallToolResult, rmcp::ServiceError> {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = match args {
        Value::Object(m) => Some(m),
        Value::Null => None,
        other => panic!("arguments must be an object, not {other}"),
    };
    client.call_tool(params).await
}

pub fn decode(result: &CallToolResult) -> (Value, bool) {
    let text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .expect("text content");
    let value: Value = serde_json::from_str(&text).expect("JSON text content");
    if let Some(structured) = &result.structured_content {
        assert_eq!(structured, &value, "structuredContent matches the text");
    }
    (value, result.is_error.unwrap_or(false))
}

/// Runs the keyless demo through `LoopEngine.RunLoop`; returns the outcome.
pub async fn run_demo(engine: &LoopEngineClient<slm_runtime::Transport>) -> pb::RunOutcome {
    let mut stream = engine
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
    while let Some(event) = stream.message().await.unwrap() {
        if let Some(pb::run_event::Event::Outcome(o)) = event.event {
            return o;
        }
    }
    panic!("demo ended without an outcome")
}
