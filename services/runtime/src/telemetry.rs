//! Logging to stderr, filtered by `SLM_LOG` (same syntax as `RUST_LOG`).

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls are no-ops.
pub fn init(default_filter: &str) {
    let filter =
        EnvFilter::try_from_env("SLM_LOG").unwrap_or_else(|_| EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
