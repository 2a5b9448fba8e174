//! The SLM web dashboard: an axum [`Router`] serving read-only HTML pages and
//! a JSON API under `/api/…`, both backed by the services over gRPC.
//!
//! Pages: `/`, `/runs/{run_id}`, `/checks`, `/integrations/bounded-loops`.
//! API: `/api/runs?limit=N`, `/api/runs/{run_id}`, `/api/checks`,
//! `/api/integrations/bounded-loops`. Assets are embedded in the binary.
//! Every route answers GET (and HEAD) only: there is no mutation endpoint.

pub mod bridge;
pub mod escape;
pub mod model;
pub mod pages;

use std::ffi::OsString;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use serde::Deserialize;
use slm_proto::v1::bridge_client::BridgeClient;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_runtime::Transport;

use crate::model::{ServiceError, clamp_limit};

/// The gRPC clients the dashboard reads from. `receipt` and `bridge` are
/// optional: without them the checks page says no receipt service is
/// connected and the Bounded Loops pane falls back to a PATH lookup.
#[derive(Clone)]
pub struct DashboardBackends {
    pub ledger: LedgerClient<Transport>,
    pub loop_engine: LoopEngineClient<Transport>,
    pub receipt: Option<ReceiptClient<Transport>>,
    pub bridge: Option<BridgeClient<Transport>>,
}

/// Options beyond the backends.
#[derive(Clone, Debug, Default)]
pub struct DashboardOptions {
    /// The PATH searched for `bounded-loops-mcp`; `None` reads the process's
    /// `PATH` at each request.
    pub search_path: Option<OsString>,
    /// Host names (without port) accepted besides loopback ones; from
    /// `SLM_HTTP_ALLOWED_HOSTS` (comma-separated) by default.
    pub allowed_hosts: Vec<String>,
}

/// Loopback host names, always accepted.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The host part of a `Host` header value (`name:port`, `[v6]:port`).
fn host_name(value: &str) -> &str {
    if value.starts_with('[') {
        return value.split_inclusive(']').next().unwrap_or(value);
    }
    value.split(':').next().unwrap_or(value)
}

/// Refuses requests whose `Host` is not a loopback name or an allowed one, so
/// a web page elsewhere cannot read the dashboard through DNS rebinding.
async fn check_host(
    State(state): Shared,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(host) = req.headers().get(header::HOST) {
        let name = host_name(host.to_str().unwrap_or("")).to_ascii_lowercase();
        let allowed = LOOPBACK_HOSTS.contains(&name.as_str())
            || state
                .options
                .allowed_hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(&name));
        if !allowed {
            return (StatusCode::FORBIDDEN, "host not allowed").into_response();
        }
    }
    next.run(req).await
}

/// The Content-Security-Policy of every response: same-origin script, style
/// and fetches only; no inline script, no framing, no forms.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const APP_CSS: &str = include_str!("../assets/app.css");
const APP_JS: &str = include_str!("../assets/app.js");

struct AppState {
    backends: DashboardBackends,
    options: DashboardOptions,
}

type Shared = State<Arc<AppState>>;

/// The dashboard router, searching the process's `PATH` for the bridge.
pub fn router(backends: DashboardBackends) -> Router {
    let allowed_hosts = std::env::var("SLM_HTTP_ALLOWED_HOSTS")
        .map(|v| {
            v.split(',')
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .collect()
        })
        .unwrap_or_default();
    router_with_options(
        backends,
        DashboardOptions {
            allowed_hosts,
            ..DashboardOptions::default()
        },
    )
}

/// [`router`] with explicit options.
pub fn router_with_options(backends: DashboardBackends, options: DashboardOptions) -> Router {
    let state = Arc::new(AppState { backends, options });
    Router::new()
        .route("/", get(home_page))
        .route("/runs/{run_id}", get(run_page))
        .route("/checks", get(checks_page))
        .route("/integrations/bounded-loops", get(bounded_loops_page))
        .route("/assets/app.css", get(css))
        .route("/assets/app.js", get(js))
        .route("/api/runs", get(api_runs))
        .route("/api/runs/{run_id}", get(api_run))
        .route("/api/checks", get(api_checks))
        .route("/api/integrations/bounded-loops", get(api_bounded_loops))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            check_host,
        ))
        .with_state(state)
        .layer(axum::middleware::map_response(security_headers))
}

async fn security_headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    res
}

#[derive(Deserialize)]
struct LimitQuery {
    limit: Option<String>,
}

impl LimitQuery {
    /// Missing, zero, negative or unreadable → 20; above 100 → 100.
    fn limit(&self) -> u32 {
        let n = self
            .limit
            .as_deref()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .filter(|n| *n > 0)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        clamp_limit(n)
    }
}

fn error_status(e: &ServiceError) -> StatusCode {
    if e.not_found {
        StatusCode::NOT_FOUND
    } else if e.bad_request {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::BAD_GATEWAY
    }
}

fn api_error(e: ServiceError) -> Response {
    let code = error_status(&e);
    (code, Json(serde_json::json!({ "error": e }))).into_response()
}

fn page_error(title: &str, e: ServiceError) -> Response {
    let code = error_status(&e);
    if e.not_found {
        return (code, Html(pages::not_found_page())).into_response();
    }
    (code, Html(pages::error_page(title, &e))).into_response()
}

fn path_var(s: &AppState) -> Option<OsString> {
    s.options
        .search_path
        .clone()
        .or_else(|| std::env::var_os("PATH"))
}

async fn css() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], APP_CSS)
}

async fn js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
}

async fn api_runs(State(s): Shared, Query(q): Query<LimitQuery>) -> Response {
    let limit = q.limit();
    match s.backends.recent_runs(limit).await {
        Ok(p) => Json(p).into_response(),
        Err(e) => api_error(e),
    }
}

async fn api_run(State(s): Shared, Path(run_id): Path<String>) -> Response {
    match s.backends.run(&run_id).await {
        Ok(d) => Json(d).into_response(),
        Err(e) => api_error(e),
    }
}

async fn api_checks(State(s): Shared, Query(q): Query<LimitQuery>) -> Response {
    let limit = q.limit();
    match s.backends.checks(limit).await {
        Ok(c) => Json(c).into_response(),
        Err(e) => api_error(e),
    }
}

async fn api_bounded_loops(State(s): Shared) -> Response {
    let p = path_var(&s);
    Json(bridge::status(s.backends.bridge.as_ref(), p.as_ref()).await).into_response()
}

async fn home_page(State(s): Shared) -> Response {
    match s.backends.recent_runs(model::DEFAULT_LIMIT).await {
        Ok(p) => Html(pages::home(&p)).into_response(),
        Err(e) => page_error("Loop runs", e),
    }
}

async fn run_page(State(s): Shared, Path(run_id): Path<String>) -> Response {
    match s.backends.run(&run_id).await {
        Ok(d) => Html(pages::run(&d)).into_response(),
        Err(e) => page_error("Run", e),
    }
}

async fn checks_page(State(s): Shared) -> Response {
    match s.backends.checks(model::MAX_LIMIT).await {
        Ok(c) => Html(pages::checks(&c)).into_response(),
        Err(e) => page_error("Checks", e),
    }
}

async fn bounded_loops_page(State(s): Shared) -> Response {
    let p = path_var(&s);
    let pane = bridge::status(s.backends.bridge.as_ref(), p.as_ref()).await;
    Html(pages::bounded_loops(&pane)).into_response()
}

#[cfg(test)]
mod host_tests {
    use super::host_name;

    #[test]
    fn host_names_drop_the_port() {
        assert_eq!(host_name("127.0.0.1:8080"), "127.0.0.1");
        assert_eq!(host_name("localhost"), "localhost");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("evil.example:80"), "evil.example");
    }
}
