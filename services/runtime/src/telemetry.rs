//! Logging to stderr, filtered by `SLM_LOG` (same syntax as `RUST_LOG`),
//! and — only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set — traces exported over OTLP
//! (gRPC) to a collector.
//!
//! With OpenTelemetry on, the service name is `OTEL_SERVICE_NAME`, else
//! `slm-<role>` from `slm serve --only <role>`, else `slm`. Which spans are
//! exported is filtered by `SLM_OTEL_FILTER` (default `info`), separately
//! from what `SLM_LOG` prints. Spans are batched and exported by a
//! dedicated thread and a one-thread tokio runtime of their own, so `init`
//! may run before the program's runtime exists; [`shutdown`] flushes them.
//!
//! `OTEL_SDK_DISABLED=true` turns the exporter off even with an endpoint.

use std::sync::{Arc, Mutex, OnceLock};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// The provider installed by [`init`], for [`shutdown`].
static PROVIDER: Mutex<Option<SdkTracerProvider>> = Mutex::new(None);
/// The runtime the OTLP channel lives on.
static EXPORT_RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// Whether the environment asks for OTLP export.
pub fn otel_requested() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    let disabled =
        std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// `slm-<role>` for `serve --only <role>` (`--only a,b` gives `slm-a+b`).
fn service_name_from_args(args: impl IntoIterator<Item = String>) -> String {
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let only = if a == "--only" {
            args.next()
        } else {
            a.strip_prefix("--only=").map(str::to_string)
        };
        if let Some(roles) = only {
            let roles: Vec<&str> = roles
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .collect();
            if !roles.is_empty() {
                return format!("slm-{}", roles.join("+"));
            }
        }
    }
    "slm".to_string()
}

/// Installs the global subscriber once; later calls are no-ops.
pub fn init(default_filter: &str) {
    init_with_service(default_filter, None);
}

/// [`init`] with the service name to report when `OTEL_SERVICE_NAME` is
/// unset (default: derived from the command line).
pub fn init_with_service(default_filter: &str, service_name: Option<&str>) {
    let filter =
        EnvFilter::try_from_env("SLM_LOG").unwrap_or_else(|_| EnvFilter::new(default_filter));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    if !otel_requested() {
        let _ = tracing_subscriber::registry().with(fmt).try_init();
        return;
    }
    let name = service_name
        .map(str::to_string)
        .unwrap_or_else(|| service_name_from_args(std::env::args()));
    match otlp_provider(&name) {
        Ok(provider) => {
            let tracer = provider.tracer("slm");
            let otel_filter = EnvFilter::try_from_env("SLM_OTEL_FILTER")
                .unwrap_or_else(|_| EnvFilter::new("info"));
            let otel = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(otel_filter);
            if tracing_subscriber::registry()
                .with(fmt)
                .with(otel)
                .try_init()
                .is_ok()
            {
                *PROVIDER.lock().unwrap_or_else(|e| e.into_inner()) = Some(provider);
            }
        }
        Err(e) => {
            let _ = tracing_subscriber::registry().with(fmt).try_init();
            tracing::warn!("OpenTelemetry export disabled: {e}");
        }
    }
}

/// Flushes and stops trace export (a no-op without OpenTelemetry). Blocks
/// up to a few seconds: from async code call it through
/// `tokio::task::spawn_blocking`.
pub fn shutdown() {
    let provider = PROVIDER.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(p) = provider
        && let Err(e) = p.shutdown()
    {
        eprintln!("slm: OpenTelemetry shutdown: {e}");
    }
}

fn otlp_provider(service_name: &str) -> Result<SdkTracerProvider, String> {
    let rt = match EXPORT_RUNTIME.get() {
        Some(rt) => rt,
        None => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("slm-otlp")
                .enable_all()
                .build()
                .map_err(|e| format!("starting the export runtime: {e}"))?;
            EXPORT_RUNTIME.get_or_init(|| rt)
        }
    };
    // The tonic channel spawns its connection tasks where it is built.
    let exporter = {
        let _guard = rt.enter();
        opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .build()
            .map_err(|e| e.to_string())?
    };
    let exporter = OnRuntime {
        inner: Arc::new(exporter),
        handle: rt.handle().clone(),
    };
    let mut resource = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name(service_name.to_string());
    }
    Ok(SdkTracerProvider::builder()
        .with_resource(resource.build())
        .with_batch_exporter(exporter)
        .build())
}

/// Runs a span exporter's futures on a tokio runtime: the batch processor
/// exports from its own plain thread, where tonic's timers would panic.
#[derive(Debug)]
struct OnRuntime<E> {
    inner: Arc<E>,
    handle: tokio::runtime::Handle,
}

impl<E: SpanExporter + 'static> SpanExporter for OnRuntime<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let inner = self.inner.clone();
        let task = self.handle.spawn(async move { inner.export(batch).await });
        async move {
            task.await.unwrap_or_else(|e| {
                Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                    e.to_string(),
                ))
            })
        }
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn service_name_follows_only() {
        assert_eq!(
            service_name_from_args(args("slm serve --only receipt --grpc 0.0.0.0:1")),
            "slm-receipt"
        );
        assert_eq!(
            service_name_from_args(args("slm serve --only=ledger,loop-engine")),
            "slm-ledger+loop-engine"
        );
        assert_eq!(service_name_from_args(args("slm serve")), "slm");
    }
}
