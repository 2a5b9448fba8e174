//! The SLM MCP gateway: the loop engine and the ledger as MCP tools, over
//! stdio or streamable HTTP. It holds no state of its own; every tool call is
//! one or more gRPC calls through the generated clients, so the backends can
//! run in this process or elsewhere.
//!
//! Tools (exact names): `slm_loop_run` (the watcher), `slm_loop_history`,
//! `slm_loop_show`, `remember`, `recall`, `observe_bounded_loop_evidence`,
//! and, under the `whole` profile only,
//! `observe_bounded_loop_execution_learning`. No tool registers or runs a
//! check or writes a receipt.
//!
//! Arguments are taken as a raw JSON object and checked by hand, so a bad
//! argument is a readable `{"ok": false, "error": ...}` tool result (with
//! `isError: true`), never a JSON-RPC error:
//!
//! * An absent argument takes its default; a present one is used as given,
//!   `null` included (only `gate_contract` defaults to `null`).
//! * Numbers follow Python's `float()` / `int()` like the reference: JSON
//!   numbers, booleans (`true` = 1) and numeric strings (whitespace, `_`
//!   separators, `inf`/`nan` for floats) are accepted; an integer parameter
//!   given a fractional number truncates toward zero, but a fractional
//!   *string* is refused as `int("2.5")` is. A value that cannot be
//!   converted answers Python's own message, e.g.
//!   `could not convert string to float: 'abc'`.
//! * Text parameters must be JSON strings (`"<name> must be text"`), except
//!   that `slm_loop_run`'s `name` / `gate_query` always answer their spec
//!   message (`name must be 1–128 chars`).
//! * Unknown argument names are refused, naming the accepted ones.
//!
//! Results are JSON objects, sent both as text content and as
//! `structuredContent` (no `outputSchema` is published).
//!
//! ```no_run
//! # async fn demo(backends: slm_gateway::Backends) -> anyhow::Result<()> {
//! use slm_gateway::{Gateway, ToolProfile, serve_stdio};
//! let profile = ToolProfile::from_env()?;
//! serve_stdio(Gateway::new(backends, profile, None)).await
//! # }
//! ```

#[doc(hidden)]
pub mod args;
mod gateway;
mod http;
mod profile;
pub mod tools;

pub use gateway::{
    Backends, DEFAULT_AGENT_ID, Gateway, RUN_NOTE, RouteAgentId, WatchLimits, mark_unfinished,
    sanitize_agent_id,
};
#[doc(hidden)]
pub use gateway::{read_request, watch_spec};
pub use http::{MCP_PATH, http_router, http_router_with_config, serve_http, serve_http_with};
pub use profile::{ParseToolProfileError, ToolProfile};
pub use rmcp::transport::StreamableHttpServerConfig;
pub use tokio_util::sync::CancellationToken;

use rmcp::ServiceExt;

/// Serves MCP on standard input and output until the client closes stdin.
/// Standard output then carries only MCP messages: logs must go to stderr.
pub async fn serve_stdio(gateway: Gateway) -> anyhow::Result<()> {
    let running = gateway
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| anyhow::anyhow!("MCP initialisation over stdio failed: {e}"))?;
    running.waiting().await?;
    Ok(())
}
