//! Streamable HTTP: the MCP endpoint at `/mcp`, and `/mcp/{agent_id}` whose
//! route segment names the running agent (spec WATCH-06).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::any;
use http::{Method, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::Service;

use crate::gateway::{Backends, Gateway, RouteAgentId, sanitize_agent_id};
use crate::profile::ToolProfile;

/// The MCP endpoint path.
pub const MCP_PATH: &str = "/mcp";

/// An axum router serving MCP over streamable HTTP at `/mcp` and
/// `/mcp/{agent_id}`, with rmcp's defaults: sessions kept in memory, and
/// only loopback `Host` headers accepted (DNS-rebinding protection). Use
/// [`http_router_with_config`] to allow other host names (e.g. a compose
/// service name) and to pass a [`CancellationToken`] that closes open
/// sessions at shutdown (see [`serve_http`]): axum's graceful shutdown
/// otherwise waits for clients' open event streams.
pub fn http_router(backends: Backends, profile: ToolProfile) -> Router {
    http_router_with_config(backends, profile, StreamableHttpServerConfig::default())
}

/// [`http_router`] with an explicit rmcp server configuration.
pub fn http_router_with_config(
    backends: Backends,
    profile: ToolProfile,
    config: StreamableHttpServerConfig,
) -> Router {
    let service = StreamableHttpService::new(
        move || Ok(Gateway::new(backends.clone(), profile, None)),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let routed = service.clone();
    Router::new()
        .route_service(MCP_PATH, service)
        .route(
            "/mcp/{agent_id}",
            any(move |Path(agent_id): Path<String>, mut request: Request| {
                let mut service = routed.clone();
                async move {
                    if let Some(id) = sanitize_agent_id(&agent_id) {
                        request.extensions_mut().insert(RouteAgentId(id));
                    }
                    service.call(request).await
                }
            }),
        )
        .layer(middleware::from_fn(session_delete_no_content))
}

/// rmcp answers a session `DELETE` with 202 Accepted; the session is gone
/// by then, and clients (the Python SDK among them) expect 200 or 204.
async fn session_delete_no_content(request: Request, next: Next) -> Response {
    let delete = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// Serves [`http_router`] on `listener` until `shutdown` resolves. Open MCP
/// sessions and their event streams are closed at shutdown (through the
/// config's cancellation token); without that, a client holding its GET
/// stream open would keep a graceful shutdown waiting forever.
pub async fn serve_http(
    listener: TcpListener,
    backends: Backends,
    profile: ToolProfile,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_http_with(listener, backends, profile, axum::Router::new(), shutdown).await
}

/// [`serve_http`] plus `extra` routes (the dashboard) on the same listener.
pub async fn serve_http_with(
    listener: TcpListener,
    backends: Backends,
    profile: ToolProfile,
    extra: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let ct = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default().with_cancellation_token(ct.clone());
    // Extra Host names (compose service names) besides rmcp's loopback ones.
    let extra_hosts: Vec<String> = std::env::var("SLM_HTTP_ALLOWED_HOSTS")
        .unwrap_or_default()
        .split(',')
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .collect();
    if !extra_hosts.is_empty() {
        let mut hosts = config.allowed_hosts.clone();
        hosts.extend(extra_hosts);
        config = config.with_allowed_hosts(hosts);
    }
    let app = http_router_with_config(backends, profile, config).merge(extra);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            ct.cancel();
        })
        .await
}
