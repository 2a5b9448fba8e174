//! The MCP server: lists the profile's tools and turns each call into gRPC
//! calls on the loop engine and the ledger. Every failure becomes a tool
//! result the model can read (`{"ok": false, "error": ...}`), never a
//! JSON-RPC error and never a panic.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, InitializeResult,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use tonic::{Code, Status};

use slm_proto::v1 as pb;
use slm_proto::v1::bridge_client::BridgeClient;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_runtime::Transport;

use crate::args::Args;
use crate::profile::ToolProfile;
use crate::tools::{self, *};

/// Fixed `note` of every `slm_loop_run` result (spec WATCH-15).
pub const RUN_NOTE: &str =
    "Independent execution receipts decide completion; memory claims cannot pass.";
/// Identity used when nothing better names the running agent (WATCH-06).
pub const DEFAULT_AGENT_ID: &str = "mcp_client";
/// Answer of the observe tools until the Bounded Loops bridge exists.
const MAX_AGENT_ID_CHARS: usize = 64;

/// The services the gateway talks to; each client works over a
/// [`Transport`], in this process or remote.
#[derive(Clone)]
pub struct Backends {
    pub ledger: LedgerClient<Transport>,
    pub loop_engine: LoopEngineClient<Transport>,
    /// The read-only Bounded Loops bridge (observe tools).
    pub bridge: BridgeClient<Transport>,
}

/// The agent id carried by an HTTP route `/mcp/{agent_id}`, already
/// sanitised. [`crate::http_router`] puts it in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteAgentId(pub String);

/// An MCP server over the SLM services. Holds no state of its own: cheap to
/// clone, one per connection or HTTP session.
#[derive(Clone)]
pub struct Gateway {
    backends: Backends,
    profile: ToolProfile,
    agent_id: Option<String>,
    env_agent_id: Option<String>,
}

/// `raw` reduced to `[A-Za-z0-9._-]`, at most 64 characters; None when
/// nothing is left (spec WATCH-06).
pub fn sanitize_agent_id(raw: &str) -> Option<String> {
    let id: String = raw
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(MAX_AGENT_ID_CHARS)
        .collect();
    (!id.is_empty()).then_some(id)
}

fn nonempty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.chars().take(MAX_AGENT_ID_CHARS).collect())
}

impl Gateway {
    /// `agent_id` names the running agent explicitly (e.g. a CLI flag); when
    /// None the identity is, per call: the HTTP route's agent id, else
    /// `SLM_AGENT_ID` (read now), else the MCP client's name from its
    /// `clientInfo`, else `"mcp_client"`.
    pub fn new(backends: Backends, profile: ToolProfile, agent_id: Option<String>) -> Self {
        Self {
            backends,
            profile,
            agent_id: agent_id.as_deref().and_then(nonempty),
            env_agent_id: std::env::var("SLM_AGENT_ID")
                .ok()
                .as_deref()
                .and_then(nonempty),
        }
    }

    pub fn profile(&self) -> ToolProfile {
        self.profile
    }

    /// The tool definitions this gateway lists.
    pub fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.profile
            .tool_names()
            .iter()
            .filter_map(|n| tools::definition(n))
            .collect()
    }

    /// The running agent's identity for this request (spec WATCH-06).
    pub fn running_agent(&self, ctx: &RequestContext<RoleServer>) -> String {
        let route = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<RouteAgentId>())
            .or_else(|| ctx.extensions.get::<RouteAgentId>());
        if let Some(RouteAgentId(id)) = route {
            return id.clone();
        }
        if let Some(id) = self.agent_id.as_ref().or(self.env_agent_id.as_ref()) {
            return id.clone();
        }
        ctx.client_info()
            .and_then(|info| nonempty(&info.name))
            .unwrap_or_else(|| DEFAULT_AGENT_ID.to_string())
    }

    async fn dispatch(
        &self,
        name: &str,
        args: &Map<String, Value>,
        ctx: &RequestContext<RoleServer>,
    ) -> Value {
        // One span per tool call: every gRPC call it makes joins its trace.
        let span = tracing::info_span!(target: "slm::mcp", "mcp.tool", otel.name = name);
        tracing::Instrument::instrument(self.dispatch_tool(name, args, ctx), span).await
    }

    async fn dispatch_tool(
        &self,
        name: &str,
        args: &Map<String, Value>,
        ctx: &RequestContext<RoleServer>,
    ) -> Value {
        match name {
            LOOP_RUN => self.loop_run(args, ctx).await,
            LOOP_HISTORY => self.loop_history(args).await,
            LOOP_SHOW => self.loop_show(args).await,
            REMEMBER => self.remember(args, ctx).await,
            RECALL => self.recall(args).await,
            OBSERVE_EVIDENCE => self.observe(args, false).await,
            OBSERVE_LEARNING => self.observe(args, true).await,
            other => fail(format!("unknown tool '{other}'")),
        }
    }

    // ---- observe_bounded_loop_* --------------------------------------

    /// One explicit observation through the bridge service (v1 evidence, or
    /// v2 execution learning); its refusals keep the bridge's shape.
    async fn observe(&self, args: &Map<String, Value>, v2: bool) -> Value {
        let refusal = |error: String| json!({"success": false, "durable": false, "created": 0, "error": error});
        let a = Args::new(args);
        let workspace = match a.only(OBSERVE_ARGS).and_then(|()| a.text("workspace")) {
            Err(e) => return refusal(e),
            Ok(Some(w)) if !w.trim().is_empty() => w,
            Ok(_) => return refusal("workspace is required".into()),
        };
        let req = pb::ObserveRequest {
            profile_id: String::new(),
            workspace: workspace.to_string(),
        };
        let mut bridge = self.backends.bridge.clone();
        let reply = if v2 {
            bridge.observe_execution_learning(req).await
        } else {
            bridge.observe_evidence(req).await
        };
        match reply {
            Ok(r) => {
                let r = r.into_inner();
                if r.success {
                    json!({"success": true, "durable": true, "observed": r.observed,
                           "created": r.created, "control_plane": r.control_plane})
                } else {
                    let mut v = json!({"success": false, "durable": r.durable,
                                       "created": r.created, "error": r.error});
                    if let Some(retryable) = r.retryable {
                        v["retryable"] = json!(retryable);
                    }
                    v
                }
            }
            Err(s) => refusal(s.message().to_string()),
        }
    }

    // ---- slm_loop_run -------------------------------------------------

    async fn loop_run(&self, args: &Map<String, Value>, ctx: &RequestContext<RoleServer>) -> Value {
        let mut spec = match watch_spec(args) {
            Ok(spec) => spec,
            Err(e) => return fail(e),
        };
        spec.agent_id = self.running_agent(ctx);
        let max_iterations = spec.max_iterations;
        let request = pb::RunLoopRequest {
            // Empty: the engine's active profile (WATCH-18).
            profile_id: String::new(),
            kind: Some(pb::run_loop_request::Kind::Watch(spec)),
        };
        let mut engine = self.backends.loop_engine.clone();
        let mut stream = tokio::select! {
            biased;
            _ = ctx.ct.cancelled() => return fail("the call was cancelled"),
            r = engine.run_loop(request) => match r {
                Ok(r) => r.into_inner(),
                Err(s) => return status_reply(&s),
            },
        };
        let token = ctx.meta.get_progress_token();
        let mut ledger: Vec<Value> = Vec::new();
        let mut run_id: Option<String> = None;
        loop {
            let next = tokio::select! {
                biased;
                _ = ctx.ct.cancelled() => {
                    // Stop the run rather than leave it polling for nobody.
                    if let Some(id) = run_id {
                        let _ = engine.kill(pb::KillRequest { run_id: id, clear: false }).await;
                    }
                    return fail("the call was cancelled; the run was asked to stop");
                }
                m = stream.message() => m,
            };
            match next {
                Ok(Some(pb::RunEvent {
                    event: Some(pb::run_event::Event::Lap(lap)),
                })) => {
                    if run_id.is_none() && !lap.run_id.is_empty() {
                        run_id = Some(lap.run_id.clone());
                    }
                    if let Some(token) = &token {
                        let progress = f64::from(lap.lap);
                        let total = f64::from(max_iterations.max(lap.lap));
                        let message = format!("lap {}: {} {}", lap.lap, lap.decision, lap.detail);
                        // A client that stopped listening is not a failure.
                        let _ = ctx
                            .peer
                            .notify_progress(
                                ProgressNotificationParam::new(token.clone(), progress)
                                    .with_total(total)
                                    .with_message(message),
                            )
                            .await;
                    }
                    ledger.push(json!({
                        "lap": lap.lap,
                        "decision": lap.decision,
                        "passed": lap.passed,
                        "detail": lap.detail,
                    }));
                }
                Ok(Some(pb::RunEvent {
                    event: Some(pb::run_event::Event::Outcome(o)),
                })) => {
                    return run_result(o, ledger);
                }
                Ok(Some(pb::RunEvent { event: None })) => continue,
                Ok(None) => {
                    return fail("the loop engine ended the run without an outcome");
                }
                Err(s) => return status_reply(&s),
            }
        }
    }

    // ---- slm_loop_history / slm_loop_show ------------------------------

    async fn loop_history(&self, args: &Map<String, Value>) -> Value {
        let (name, limit, profile_id) = match read_request(args, LOOP_HISTORY_ARGS, "name", 20, 200)
        {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let response = self
            .backends
            .loop_engine
            .clone()
            .history(pb::HistoryRequest {
                profile_id,
                name: name.clone(),
                limit,
                cursor: String::new(),
            })
            .await;
        match response {
            Ok(r) => {
                let r = r.into_inner();
                let runs: Vec<Value> = r
                    .runs
                    .into_iter()
                    .take(limit as usize)
                    .map(|run| {
                        let mut row = json!({
                            "run_id": run.run_id,
                            "laps": run.laps,
                            "final": run.r#final,
                            "reason": run.reason,
                            "ts": run.ts,
                        });
                        mark_unfinished(&mut row, run.ended, &run.state);
                        row
                    })
                    .collect();
                json!({"ok": true, "name": name, "count": runs.len(), "runs": runs})
            }
            Err(s) => status_reply(&s),
        }
    }

    async fn loop_show(&self, args: &Map<String, Value>) -> Value {
        let (run_id, limit, profile_id) =
            match read_request(args, LOOP_SHOW_ARGS, "run_id", 200, 1000) {
                Ok(p) => p,
                Err(e) => return fail(e),
            };
        let response = self
            .backends
            .loop_engine
            .clone()
            .show(pb::ShowRequest {
                profile_id,
                run_id: run_id.clone(),
                limit,
            })
            .await;
        match response {
            Ok(r) => {
                let r = r.into_inner();
                let (ended, state) = (r.ended || r.laps.is_empty(), r.state);
                let laps: Vec<Value> = r
                    .laps
                    .into_iter()
                    .take(limit as usize)
                    .map(|lap| {
                        json!({
                            "lap": lap.lap,
                            "ts": lap.ts,
                            "decision": lap.decision,
                            "passed": lap.passed,
                            "detail": lap.detail,
                            "agent_claimed_done": lap.agent_claimed_done,
                            "tokens": lap.budget.map_or(0, |b| b.tokens),
                        })
                    })
                    .collect();
                let mut out =
                    json!({"ok": true, "run_id": run_id, "count": laps.len(), "laps": laps});
                mark_unfinished(&mut out, ended, &state);
                out
            }
            Err(s) => status_reply(&s),
        }
    }

    // ---- remember / recall ----------------------------------------------

    async fn remember(&self, args: &Map<String, Value>, ctx: &RequestContext<RoleServer>) -> Value {
        let a = Args::new(args);
        let parsed = (|| -> Result<_, String> {
            a.only(REMEMBER_ARGS)?;
            let content = a
                .text("content")?
                .ok_or_else(|| "content is required".to_string())?
                .to_string();
            let tags = a.text_list("tags")?;
            let session_id = a.text("session_id")?.unwrap_or("").to_string();
            let importance =
                a.int("importance", 0)?
                    .clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32;
            let profile_id = profile_arg(&a)?;
            Ok(pb::RememberRequest {
                profile_id,
                content,
                tags,
                session_id,
                metadata_json: String::new(),
                importance,
                ..Default::default()
            })
        })();
        let mut request = match parsed {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        request.agent_id = self.running_agent(ctx);
        match self.backends.ledger.clone().remember(request).await {
            Ok(r) => match r.into_inner().memory {
                Some(m) => json!({"ok": true, "id": m.id, "created_at": m.created_at}),
                None => fail("the ledger stored the memory but returned no record"),
            },
            Err(s) => status_reply(&s),
        }
    }

    async fn recall(&self, args: &Map<String, Value>) -> Value {
        let a = Args::new(args);
        let parsed = (|| -> Result<_, String> {
            a.only(RECALL_ARGS)?;
            let query = a
                .text("query")?
                .ok_or_else(|| "query is required".to_string())?
                .to_string();
            let limit = a.int("limit", 10)?.clamp(1, 100) as u32;
            let tag = a.text("tag")?.unwrap_or("").to_string();
            let profile_id = profile_arg(&a)?;
            Ok(pb::RecallRequest {
                profile_id,
                query,
                limit,
                tag,
                ..Default::default()
            })
        })();
        let request = match parsed {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        match self.backends.ledger.clone().recall(request).await {
            Ok(r) => {
                let r = r.into_inner();
                let results: Vec<Value> = r
                    .results
                    .into_iter()
                    .filter_map(|hit| {
                        let m = hit.memory?;
                        Some(json!({
                            "id": m.id,
                            "content": m.content,
                            "score": hit.score,
                            "tags": m.tags,
                            "session_id": m.session_id,
                            "created_at": m.created_at,
                        }))
                    })
                    .collect();
                json!({"ok": true, "results": results, "no_confident_match": r.no_confident_match})
            }
            Err(s) => status_reply(&s),
        }
    }
}

/// `profile_id` of a read tool (spec MCP-08): absent means the active
/// profile; anything but text is refused.
fn profile_arg(a: &Args<'_>) -> Result<String, String> {
    match a.get("profile_id") {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err("profile_id must be text".to_string()),
    }
}

/// The clamped limits of a watcher run (spec WATCH-01/02).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchLimits {
    pub max_iterations: u32,
    pub max_wallclock_s: f64,
    pub poll_interval_s: f64,
    pub max_tokens: i64,
    pub no_progress_window: u32,
}

impl WatchLimits {
    /// Clamps converted values the way the reference does. A `max_wallclock_s`
    /// of 0, a negative value or NaN means "no wall-clock bound" (0).
    pub fn clamp(
        max_iterations: i128,
        max_wallclock_s: f64,
        poll_interval_s: f64,
        max_tokens: i128,
        no_progress_window: i128,
    ) -> Self {
        let wall = if max_wallclock_s > 0.0 {
            max_wallclock_s.min(120.0)
        } else {
            0.0
        };
        let cap = if wall > 0.0 { wall } else { 120.0 };
        // Python's max(0.25, min(v, cap)): NaN ends up as 0.25.
        let poll = if poll_interval_s.is_nan() {
            0.25
        } else {
            poll_interval_s.min(cap).max(0.25)
        };
        Self {
            max_iterations: max_iterations.clamp(1, 200) as u32,
            max_wallclock_s: wall,
            poll_interval_s: poll,
            max_tokens: if max_tokens > 0 {
                max_tokens.min(i128::from(i64::MAX)) as i64
            } else {
                0
            },
            no_progress_window: if no_progress_window > 0 {
                no_progress_window.min(i128::from(u32::MAX)) as u32
            } else {
                0
            },
        }
    }
}

/// Validates and converts `slm_loop_run` arguments into a `WatchSpec`
/// (agent id left empty).
pub fn watch_spec(args: &Map<String, Value>) -> Result<pb::WatchSpec, String> {
    let a = Args::new(args);
    a.only(LOOP_RUN_ARGS)?;
    let name = bounded_text(&a, "name", 128)?;
    let gate_query = bounded_text(&a, "gate_query", 2000)?;
    let contract_json = match a.get("gate_contract") {
        None | Some(Value::Null) => String::new(),
        Some(v) => v.to_string(),
    };
    let gate_min_score = a.float("gate_min_score", 0.0)?;
    let max_iterations = a.int("max_iterations", 20)?;
    let max_wallclock_s = a.float("max_wallclock_s", 15.0)?;
    let poll_interval_s = a.float("poll_interval_s", 1.0)?;
    let max_tokens = a.int("max_tokens", 0)?;
    let no_progress_window = a.int("no_progress_window", 0)?;
    let require_support = a.boolean("require_support", false)?;
    let limits = WatchLimits::clamp(
        max_iterations,
        max_wallclock_s,
        poll_interval_s,
        max_tokens,
        no_progress_window,
    );
    Ok(pb::WatchSpec {
        name,
        gate_query,
        gate_min_score,
        max_iterations: limits.max_iterations,
        max_wallclock_s: limits.max_wallclock_s,
        poll_interval_s: limits.poll_interval_s,
        max_tokens: limits.max_tokens,
        no_progress_window: limits.no_progress_window,
        require_support,
        contract_json,
        // The running agent is filled in by the caller.
        ..Default::default()
    })
}

/// A trimmed string of 1..=max characters; anything else (absent, not
/// text, empty, too long) is the spec's one message for the parameter.
fn bounded_text(a: &Args<'_>, key: &str, max: usize) -> Result<String, String> {
    let message = || format!("{key} must be 1–{max} chars");
    let raw = match a.get(key) {
        Some(Value::String(s)) => s,
        _ => return Err(message()),
    };
    let v = raw.trim();
    let n = v.chars().count();
    if n == 0 || n > max {
        return Err(message());
    }
    Ok(v.to_string())
}

/// The `slm_loop_run` success shape (spec WATCH-15).
fn run_result(o: pb::RunOutcome, ledger: Vec<Value>) -> Value {
    json!({
        "ok": true,
        "passed": o.status == "DONE",
        "status": o.status,
        "reason": o.reason,
        "bound_reason": o.bound_reason,
        "receipt_reason": o.receipt_reason,
        "laps": o.laps,
        "run_id": o.run_id,
        "ledger": ledger,
        "note": RUN_NOTE,
        "ledger_write_errors": o.write_errors.len(),
        "write_errors": o.write_errors,
    })
}

/// The arguments of the two read tools: a required text `key` (trimmed), a
/// `limit` clamped to 1..=`max`, and an optional `profile_id` (MCP-06/07/08).
pub fn read_request(
    args: &Map<String, Value>,
    allowed: &[&str],
    key: &str,
    default_limit: i128,
    max: i128,
) -> Result<(String, u32, String), String> {
    let a = Args::new(args);
    a.only(allowed)?;
    let value = a.text(key)?.unwrap_or("").trim().to_string();
    if value.is_empty() {
        return Err(format!("{key} is required"));
    }
    let limit = a.int("limit", default_limit)?.clamp(1, max) as u32;
    Ok((value, limit, profile_arg(&a)?))
}

pub(crate) fn fail(error: impl Into<String>) -> Value {
    json!({"ok": false, "error": error.into()})
}

/// A gRPC failure as a tool result. An unknown profile keeps its own shape
/// (spec MCP-08).
fn status_reply(s: &Status) -> Value {
    let message = if s.message().is_empty() {
        format!("{:?}", s.code())
    } else {
        s.message().to_string()
    };
    if s.code() == Code::NotFound && message.starts_with("There is no profile") {
        return json!({
            "ok": false,
            "success": false,
            "code": "unknown_profile",
            "retryable": false,
            "error": message,
        });
    }
    fail(message)
}

fn is_failure(v: &Value) -> bool {
    v.get("ok") == Some(&Value::Bool(false)) || v.get("success") == Some(&Value::Bool(false))
}

fn tool_result(v: Value) -> CallToolResult {
    if is_failure(&v) {
        CallToolResult::structured_error(v)
    } else {
        CallToolResult::structured(v)
    }
}

const INSTRUCTIONS: &str = "SLM: local agent memory with bounded loops. remember/recall store \
and find memories. slm_loop_run waits, under hard bounds, until an operator-registered check has \
an independent passing receipt; your own claim of being done never counts, and no tool here can \
register or run a check. slm_loop_history and slm_loop_show read recorded runs. Every tool \
answers a JSON object; on failure {\"ok\": false, \"error\": ...}.";

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("slm-gateway", env!("CARGO_PKG_VERSION")).with_title("SLM"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.as_ref();
        if !self.profile.exposes(name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool '{name}' (profile '{}')", self.profile),
                None,
            ));
        }
        let empty = JsonObject::new();
        let args = request.arguments.as_ref().unwrap_or(&empty);
        let reply = AssertUnwindSafe(self.dispatch(name, args, &context))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                tracing::error!(tool = name, "tool call panicked: {what}");
                fail(format!("internal error in {name}: {what}"))
            });
        Ok(tool_result(reply).into())
    }
}

/// A run without a terminal lap gets `"ended": false` and its `state`
/// (`running`, `unfinished`, `interrupted`); a finished run keeps the
/// documented shape. Shared by the MCP tools (`slm_loop_history`,
/// `slm_loop_show`) and the CLI's `slm loop history|show --json`.
pub fn mark_unfinished(row: &mut Value, ended: bool, state: &str) {
    if !ended {
        row["ended"] = json!(false);
        row["state"] = json!(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: Value) -> Result<pb::WatchSpec, String> {
        watch_spec(v.as_object().unwrap())
    }

    #[test]
    fn name_and_query_rules() {
        let ok = spec(json!({"name": "  build ", "gate_query": " status "})).unwrap();
        assert_eq!(ok.name, "build");
        assert_eq!(ok.gate_query, "status");
        let name_err = Err("name must be 1–128 chars".to_string());
        let query_err = Err("gate_query must be 1–2000 chars".to_string());
        assert_eq!(spec(json!({"name": "", "gate_query": "q"})), name_err);
        assert_eq!(spec(json!({"name": "   ", "gate_query": "q"})), name_err);
        assert_eq!(spec(json!({"gate_query": "q"})), name_err);
        assert_eq!(spec(json!({"name": 5, "gate_query": "q"})), name_err);
        assert_eq!(
            spec(json!({"name": "n".repeat(129), "gate_query": "q"})),
            name_err
        );
        assert!(spec(json!({"name": "é".repeat(128), "gate_query": "q"})).is_ok());
        assert_eq!(spec(json!({"name": "n", "gate_query": ""})), query_err);
        assert_eq!(
            spec(json!({"name": "n", "gate_query": "q".repeat(2001)})),
            query_err
        );
        assert!(spec(json!({"name": "n", "gate_query": "q".repeat(2000)})).is_ok());
        // Name is checked first.
        assert_eq!(spec(json!({"name": "", "gate_query": ""})), name_err);
    }

    #[test]
    fn defaults_and_clamps() {
        let s = spec(json!({"name": "n", "gate_query": "q"})).unwrap();
        assert_eq!(s.max_iterations, 20);
        assert_eq!(s.max_wallclock_s, 15.0);
        assert_eq!(s.poll_interval_s, 1.0);
        assert_eq!(s.max_tokens, 0);
        assert_eq!(s.no_progress_window, 0);
        assert_eq!(s.gate_min_score, 0.0);
        assert!(!s.require_support);
        assert_eq!(s.contract_json, "");

        let l = |it: i128, wall: f64, poll: f64| WatchLimits::clamp(it, wall, poll, 0, 0);
        assert_eq!(l(0, 15.0, 1.0).max_iterations, 1);
        assert_eq!(l(-5, 15.0, 1.0).max_iterations, 1);
        assert_eq!(l(999, 15.0, 1.0).max_iterations, 200);
        assert_eq!(l(20, 500.0, 1.0).max_wallclock_s, 120.0);
        assert_eq!(l(20, 0.0, 1.0).max_wallclock_s, 0.0);
        // Negative means unbounded, like 0.
        assert_eq!(l(20, -3.0, 1.0).max_wallclock_s, 0.0);
        assert_eq!(l(20, f64::NAN, 1.0).max_wallclock_s, 0.0);
        assert_eq!(l(20, 15.0, 0.0).poll_interval_s, 0.25);
        assert_eq!(l(20, 15.0, 60.0).poll_interval_s, 15.0);
        assert_eq!(l(20, 0.0, 600.0).poll_interval_s, 120.0);
        assert_eq!(l(20, -1.0, 600.0).poll_interval_s, 120.0);
        assert_eq!(l(20, 15.0, f64::NAN).poll_interval_s, 0.25);
        assert_eq!(l(20, 0.1, 5.0).poll_interval_s, 0.25);
        let t = WatchLimits::clamp(20, 15.0, 1.0, -4, -1);
        assert_eq!((t.max_tokens, t.no_progress_window), (0, 0));
        let t = WatchLimits::clamp(20, 15.0, 1.0, 5000, 3);
        assert_eq!((t.max_tokens, t.no_progress_window), (5000, 3));

        let s = spec(json!({
            "name": "n", "gate_query": "q", "max_iterations": 2.9, "max_wallclock_s": "-7",
            "poll_interval_s": "0.1", "max_tokens": true, "no_progress_window": "4",
            "gate_min_score": "0.5", "require_support": true,
            "gate_contract": {"job_id": "ab"}
        }))
        .unwrap();
        assert_eq!(s.max_iterations, 2);
        assert_eq!(s.max_wallclock_s, 0.0);
        assert_eq!(s.poll_interval_s, 0.25);
        assert_eq!(s.max_tokens, 1);
        assert_eq!(s.no_progress_window, 4);
        assert_eq!(s.gate_min_score, 0.5);
        assert!(s.require_support);
        assert_eq!(s.contract_json, r#"{"job_id":"ab"}"#);
    }

    #[test]
    fn conversion_errors_are_python_messages() {
        assert_eq!(
            spec(json!({"name": "n", "gate_query": "q", "max_wallclock_s": "abc"})),
            Err("could not convert string to float: 'abc'".into())
        );
        assert_eq!(
            spec(json!({"name": "n", "gate_query": "q", "max_iterations": "2.5"})),
            Err("invalid literal for int() with base 10: '2.5'".into())
        );
        assert_eq!(
            spec(json!({"name": "n", "gate_query": "q", "gate_min_score": null})),
            Err("float() argument must be a string or a real number, not 'NoneType'".into())
        );
        assert!(
            spec(json!({"name": "n", "gate_query": "q", "bogus": 1}))
                .unwrap_err()
                .starts_with("unexpected argument 'bogus'")
        );
    }

    #[test]
    fn agent_ids_are_sanitised() {
        assert_eq!(sanitize_agent_id("agent-7.b_c"), Some("agent-7.b_c".into()));
        assert_eq!(sanitize_agent_id("a b/c%d"), Some("abcd".into()));
        assert_eq!(sanitize_agent_id("ü!"), None);
        assert_eq!(sanitize_agent_id(&"x".repeat(100)).unwrap().len(), 64);
    }

    #[test]
    fn unknown_profile_has_its_own_shape() {
        let s = Status::not_found(
            "There is no profile 'x' on this computer. A tool call never creates a profile.",
        );
        assert_eq!(
            status_reply(&s),
            json!({"ok": false, "success": false, "code": "unknown_profile", "retryable": false,
                   "error": "There is no profile 'x' on this computer. A tool call never creates a profile."})
        );
        assert_eq!(
            status_reply(&Status::unimplemented("not yet")),
            json!({"ok": false, "error": "not yet"})
        );
    }

    #[test]
    fn outcome_shape() {
        let v = run_result(
            pb::RunOutcome {
                status: "HALT".into(),
                reason: "no execution receipt".into(),
                laps: 2,
                run_id: "build-1".into(),
                write_errors: vec!["lap 2: disk full".into()],
                receipt_reason: "no execution receipt".into(),
                bound_reason: "max-iterations".into(),
            },
            vec![json!({"lap": 1, "decision": "continue", "passed": false, "detail": "d"})],
        );
        assert_eq!(
            v,
            json!({
                "ok": true, "status": "HALT", "reason": "no execution receipt",
                "bound_reason": "max-iterations", "receipt_reason": "no execution receipt",
                "passed": false, "laps": 2, "run_id": "build-1",
                "ledger": [{"lap": 1, "decision": "continue", "passed": false, "detail": "d"}],
                "note": RUN_NOTE, "ledger_write_errors": 1, "write_errors": ["lap 2: disk full"]
            })
        );
    }
}
