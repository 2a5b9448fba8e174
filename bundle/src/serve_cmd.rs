//! `slm serve`: every service in one process on the data root.

use std::fs::File;

use anyhow::{Context, bail};

use slm_gateway::{Backends, CancellationToken, Gateway, ToolProfile};

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

/// The tool profile: `--profile`, else SLM_MCP_PROFILE / SLM_MCP_ALL_TOOLS.
fn tool_profile(flag: Option<String>) -> anyhow::Result<ToolProfile> {
    match flag {
        Some(p) => p
            .parse()
            .map_err(|e: slm_gateway::ParseToolProfileError| anyhow::anyhow!("{}", e.0)),
        None => ToolProfile::from_env().map_err(|e| anyhow::anyhow!("{}", e.0)),
    }
}

fn backends(s: &Services) -> Backends {
    Backends {
        ledger: s.ledger.clone(),
        loop_engine: s.loop_engine.clone(),
    }
}

/// `slm mcp`: MCP over stdio; stdout carries only protocol messages.
pub async fn mcp(profile: Option<String>) -> anyhow::Result<i32> {
    let profile = tool_profile(profile)?;
    let s = Services::connect().await?;
    slm_gateway::serve_stdio(Gateway::new(backends(&s), profile, None)).await?;
    s.close().await;
    Ok(0)
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
    let stop = CancellationToken::new();
    let http = match args.http {
        Some(http_addr) => {
            let profile = tool_profile(None)?;
            let l = tokio::net::TcpListener::bind(http_addr)
                .await
                .with_context(|| format!("binding {http_addr}"))?;
            eprintln!(
                "slm serve: MCP on http://{}/mcp (tools: {})",
                l.local_addr()?,
                profile.as_str()
            );
            let stop = stop.clone();
            Some(tokio::spawn(slm_gateway::serve_http(
                l,
                backends(&s),
                profile,
                async move { stop.cancelled().await },
            )))
        }
        None => None,
    };
    let signal_stop = stop.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        signal_stop.cancel();
    });
    let grpc_stop = stop.clone();
    let served = router
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            async move { grpc_stop.cancelled().await },
        )
        .await;
    stop.cancel();
    if let Some(h) = http {
        h.await
            .context("MCP server task")?
            .context("MCP server failed")?;
    }
    served.context("gRPC server failed")?;
    eprintln!("slm serve: stopped");
    s.close().await;
    drop(lock);
    Ok(0)
}
