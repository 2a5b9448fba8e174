//! `slm serve`: every service in one process on the data root.

use std::fs::File;

use anyhow::{Context, bail};

use crate::cli::ServeArgs;
use crate::services::Services;

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler installs");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<i32> {
    let s = Services::connect().await?;
    let lock = File::create(s.lock_path())?;
    if lock.try_lock().is_err() {
        bail!(
            "another slm serve already runs on {}",
            s.root.path().display()
        );
    }
    let mut routes = tonic::service::RoutesBuilder::default();
    if let Some(svc) = s.local_ledger.clone() {
        routes.add_service(svc);
    }
    if let Some(svc) = s.local_loop_engine.clone() {
        routes.add_service(svc);
    }
    if let Some(svc) = s.local_receipt.clone() {
        routes.add_service(svc);
    }
    let router = tonic::transport::Server::builder().add_routes(routes.routes());
    let listener = tokio::net::TcpListener::bind(args.grpc)
        .await
        .with_context(|| format!("binding {}", args.grpc))?;
    let addr = listener.local_addr()?;
    eprintln!(
        "slm serve: gRPC on http://{addr} (data root {})",
        s.root.path().display()
    );
    router
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            shutdown_signal(),
        )
        .await
        .context("gRPC server failed")?;
    eprintln!("slm serve: stopped");
    s.close().await;
    drop(lock);
    Ok(0)
}
