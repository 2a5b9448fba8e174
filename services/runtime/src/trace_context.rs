//! W3C trace context across gRPC hops, so one MCP call that goes through
//! the loop engine, the receipt service and the ledger is one trace.
//!
//! - [`ClientLayer`] (on every [`Transport`](crate::Transport)): opens a
//!   `grpc.client` span and writes its context into the request's
//!   `traceparent` / `tracestate` metadata.
//! - [`ServerLayer`] (on `slm serve`'s tonic server, and in front of
//!   in-process servers): reads that metadata, opens a `grpc.server` span
//!   whose parent it is, and runs the handler inside it.
//!
//! Both are plain `tracing` spans at INFO level under the target
//! `slm::grpc`: with OpenTelemetry off (no `OTEL_EXPORTER_OTLP_ENDPOINT`)
//! no subscriber is interested in them, so they cost a disabled-span check
//! and nothing is written to the metadata.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tower::{Layer, Service};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// Writes the context of `span` into `headers` (W3C `traceparent`), when
/// the span belongs to a sampled or recorded OpenTelemetry trace.
pub fn inject(span: &tracing::Span, headers: &mut HeaderMap) {
    if span.is_disabled() {
        return;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return;
    }
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
}

/// Makes the trace context in `headers` (if any) the parent of `span`.
pub fn extract_into(headers: &HeaderMap, span: &tracing::Span) {
    if span.is_disabled() || !headers.contains_key("traceparent") {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// The gRPC method of a request path, `/slm.v1.Ledger/Recall`.
fn method(path: &str) -> &str {
    path.strip_prefix('/').unwrap_or(path)
}

/// Client side: a span per call, its context injected into the request.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientLayer;

impl<S> Layer<S> for ClientLayer {
    type Service = TraceClient<S>;
    fn layer(&self, inner: S) -> Self::Service {
        TraceClient { inner }
    }
}

#[derive(Debug, Clone)]
pub struct TraceClient<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for TraceClient<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let span = tracing::info_span!(
            target: "slm::grpc",
            "grpc.client",
            otel.name = method(req.uri().path()),
            otel.kind = "client",
            rpc.system = "grpc",
        );
        inject(&span, req.headers_mut());
        let fut = span.in_scope(|| self.inner.call(req));
        Box::pin(fut.instrument(span))
    }
}

/// Server side: a span per request, child of the caller's trace context.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerLayer;

impl<S> Layer<S> for ServerLayer {
    type Service = TraceServer<S>;
    fn layer(&self, inner: S) -> Self::Service {
        TraceServer { inner }
    }
}

#[derive(Debug, Clone)]
pub struct TraceServer<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for TraceServer<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let span = tracing::info_span!(
            target: "slm::grpc",
            "grpc.server",
            otel.name = method(req.uri().path()),
            otel.kind = "server",
            rpc.system = "grpc",
        );
        extract_into(req.headers(), &span);
        let fut = span.in_scope(|| self.inner.call(req));
        Box::pin(fut.instrument(span))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::{SpanKind, TraceId, TracerProvider as _};
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use tonic::body::Body;
    use tower::ServiceExt;
    use tracing_subscriber::prelude::*;

    use super::*;

    /// Keeps exported spans in memory (no collector, and no `testing`
    /// feature of the SDK that would split test and normal builds).
    #[derive(Debug, Clone, Default)]
    struct Capture(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Capture {
        fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
            self.0.lock().unwrap().extend(batch);
            std::future::ready(Ok(()))
        }
    }

    /// A handler that opens a span of its own and records its trace id.
    #[derive(Clone, Default)]
    struct Handler(Arc<Mutex<Vec<TraceId>>>);

    impl Service<http::Request<Body>> for Handler {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;
        fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _req: http::Request<Body>) -> Self::Future {
            let seen = self.0.clone();
            Box::pin(async move {
                let span = tracing::info_span!("handler");
                let id = span.context().span().span_context().trace_id();
                seen.lock().unwrap().push(id);
                drop(span);
                Ok(tonic::Status::ok("").into_http())
            })
        }
    }

    impl tonic::server::NamedService for Handler {
        const NAME: &'static str = "test.Svc";
    }

    fn request() -> http::Request<Body> {
        http::Request::builder()
            .method("POST")
            .uri("http://localhost/test.Svc/Do")
            .header("content-type", "application/grpc")
            .body(Body::empty())
            .unwrap()
    }

    fn tracing_with_capture() -> (
        Capture,
        SdkTracerProvider,
        tracing::subscriber::DefaultGuard,
    ) {
        let capture = Capture::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(capture.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let guard = tracing::subscriber::set_default(subscriber);
        (capture, provider, guard)
    }

    /// Calls `transport` inside a `caller` span; returns the caller's trace id.
    async fn call_as_caller(transport: crate::Transport) -> TraceId {
        let caller = tracing::info_span!("caller");
        let id = caller.context().span().span_context().trace_id();
        let response = transport
            .oneshot(request())
            .instrument(caller)
            .await
            .unwrap();
        assert_eq!(response.headers()["grpc-status"], "0");
        id
    }

    /// The exported client and server spans of the call: the server span is
    /// the client span's child, both in the caller's trace.
    fn assert_one_trace(capture: &Capture, caller: TraceId) {
        let spans = capture.0.lock().unwrap().clone();
        let find = |kind: SpanKind| {
            spans
                .iter()
                .find(|s| s.span_kind == kind && s.name == "test.Svc/Do")
                .unwrap_or_else(|| panic!("no {kind:?} span in {spans:#?}"))
        };
        let client = find(SpanKind::Client);
        let server = find(SpanKind::Server);
        let handler = spans.iter().find(|s| s.name == "handler").unwrap();
        assert_eq!(client.span_context.trace_id(), caller);
        assert_eq!(server.span_context.trace_id(), caller);
        assert_eq!(server.parent_span_id, client.span_context.span_id());
        assert_eq!(handler.span_context.trace_id(), caller);
        assert_eq!(handler.parent_span_id, server.span_context.span_id());
    }

    #[tokio::test]
    async fn in_process_call_continues_the_callers_trace() {
        let (capture, provider, _guard) = tracing_with_capture();
        let handler = Handler::default();
        let caller = call_as_caller(crate::transport::in_process(handler.clone())).await;
        assert_ne!(caller, TraceId::INVALID);
        assert_eq!(*handler.0.lock().unwrap(), vec![caller]);
        assert_one_trace(&capture, caller);
        provider.shutdown().unwrap();
    }

    #[tokio::test]
    async fn remote_call_carries_traceparent_to_the_server_layer() {
        let (capture, provider, _guard) = tracing_with_capture();
        let handler = Handler::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .layer(ServerLayer)
                .add_routes(tonic::service::Routes::new(handler.clone()))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async move {
                        let _ = stopped.await;
                    },
                ),
        );
        let transport = crate::transport::remote(&format!("http://{addr}")).unwrap();
        let caller = call_as_caller(transport).await;
        assert_eq!(*handler.0.lock().unwrap(), vec![caller]);
        assert_one_trace(&capture, caller);
        let _ = stop.send(());
        server.await.unwrap().unwrap();
        provider.shutdown().unwrap();
    }

    #[test]
    fn nothing_is_injected_without_opentelemetry() {
        let _guard = tracing::subscriber::set_default(tracing_subscriber::registry());
        let span = tracing::info_span!("caller");
        let mut headers = HeaderMap::new();
        inject(&span, &mut headers);
        assert!(headers.is_empty());
    }
}
