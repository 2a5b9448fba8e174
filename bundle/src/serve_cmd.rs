//! `slm serve`: every service in one process on the data root.

use std::fs::File;

use anyhow::{Context, bail};

use slm_gateway::{Backends, CancellationToken, Gateway, ToolProfile};

use slm_proto::v1::bridge_server::BridgeServer;
use slm_proto::v1::ledger_server::LedgerServer;
use slm_proto::v1::loop_engine_server::LoopEngineServer;
use slm_proto::v1::receipt_server::ReceiptServer;

use crate::cli::ServeArgs;
use crate::services::{Placement, Role, Services};

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

/// Exports the spans still buffered (OpenTelemetry only; a no-op without
/// `OTEL_EXPORTER_OTLP_ENDPOINT`). The SDK's shutdown blocks.
async fn flush_telemetry() {
    let _ = tokio::task::spawn_blocking(slm_runtime::telemetry::shutdown).await;
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
        bridge: s.bridge.clone(),
    }
}

/// `slm mcp`: MCP over stdio; stdout carries only protocol messages.
pub async fn mcp(profile: Option<String>) -> anyhow::Result<i32> {
    let profile = tool_profile(profile)?;
    let s = Services::connect().await?;
    slm_gateway::serve_stdio(Gateway::new(backends(&s), profile, None)).await?;
    s.close().await;
    flush_telemetry().await;
    Ok(0)
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<i32> {
    let only = match &args.only {
        Some(list) => Some(
            list.split(',')
                .map(str::parse::<Role>)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| anyhow::anyhow!(e))?,
        ),
        None => None,
    };
    let gateway_here = only.as_ref().is_none_or(|o| o.contains(&Role::Gateway));
    if args.http.is_some() && !gateway_here {
        bail!("--http serves the gateway: add gateway to --only");
    }
    let placement = Placement {
        only,
        database_url: args.database_url.clone(),
    };
    let s = Services::connect_with(&placement).await?;
    // One server at a time per SQLite data root; PostgreSQL needs no lock.
    let lock = File::create(s.lock_path())?;
    if s.uses_sqlite() && lock.try_lock().is_err() {
        bail!(
            "another slm serve already runs on {}",
            s.root.path().display()
        );
    }
    let (health, health_service) = tonic_health::server::health_reporter();
    let mut routes = tonic::service::RoutesBuilder::default();
    if let Some(svc) = s.local_ledger.clone() {
        health
            .set_serving::<LedgerServer<slm_ledger::LedgerService>>()
            .await;
        routes.add_service(svc);
    }
    if let Some(svc) = s.local_loop_engine.clone() {
        health
            .set_serving::<LoopEngineServer<slm_loop_engine::LoopEngineService>>()
            .await;
        routes.add_service(svc);
    }
    if let Some(svc) = s.local_receipt.clone() {
        health
            .set_serving::<ReceiptServer<slm_receipt::grpc::ReceiptService>>()
            .await;
        routes.add_service(svc);
    }
    if let Some(svc) = s.local_bridge.clone() {
        health
            .set_serving::<BridgeServer<slm_bridge::BridgeService>>()
            .await;
        routes.add_service(svc);
    }
    routes.add_service(health_service);
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(slm_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .context("building gRPC reflection")?;
    routes.add_service(reflection);
    let router = tonic::transport::Server::builder()
        .layer(slm_runtime::trace_context::ServerLayer)
        .add_routes(routes.routes());
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
            let at = l.local_addr()?;
            eprintln!(
                "slm serve: MCP on http://{at}/mcp (tools: {})",
                profile.as_str()
            );
            eprintln!("slm serve: dashboard on http://{at}/");
            let dashboard = slm_dashboard::router(slm_dashboard::DashboardBackends {
                ledger: s.ledger.clone(),
                loop_engine: s.loop_engine.clone(),
                receipt: Some(s.receipt.clone()),
                bridge: Some(s.bridge.clone()),
            });
            let stop = stop.clone();
            Some(tokio::spawn(slm_gateway::serve_http_with(
                l,
                backends(&s),
                profile,
                dashboard,
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
    flush_telemetry().await;
    Ok(0)
}
