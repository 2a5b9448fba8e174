//! A throwaway MCP server over the data root, for trying the gateway before
//! `slm mcp` / `slm serve --http` exist in the bundle:
//!
//! ```text
//! SLM_DATA_DIR=/tmp/slm cargo run -p slm-gateway --example mcp_stdio -- [--profile P]
//! SLM_DATA_DIR=/tmp/slm cargo run -p slm-gateway --example mcp_stdio -- --http 127.0.0.1:8765
//! ```
//!
//! The ledger and the loop engine run in this process on the data root's
//! `memory.db`, like the bundle runs them (no receipt service here, so a
//! watcher can only end HALT). Standard output carries only MCP messages.

use std::net::SocketAddr;

use anyhow::{Context, bail};
use slm_gateway::{Backends, Gateway, MCP_PATH, ToolProfile, serve_http, serve_stdio};
use slm_ledger::{LedgerService, Store};
use slm_loop_engine::LoopEngineService;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_runtime::DataRoot;
use slm_runtime::transport::in_process;

struct Options {
    profile: ToolProfile,
    http: Option<SocketAddr>,
}

fn options() -> anyhow::Result<Options> {
    let mut profile = None;
    let mut http = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .with_context(|| format!("{key} needs a value"))
        };
        match key.as_str() {
            "--profile" => profile = Some(value()?.parse::<ToolProfile>()?),
            "--http" => http = Some(value()?.parse().context("--http ADDR")?),
            "-h" | "--help" => {
                eprintln!("usage: mcp_stdio [--profile code|full|power|whole] [--http ADDR]");
                std::process::exit(0);
            }
            other => bail!("unexpected argument {other:?}"),
        }
    }
    let profile = match profile {
        Some(p) => p,
        None => ToolProfile::from_env()?,
    };
    Ok(Options { profile, http })
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler installs");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = options()?;
    let root = DataRoot::from_env()?;
    root.ensure()?;
    let store = Store::open(&root.database_url("ledger", "memory.db"))
        .await
        .with_context(|| format!("opening the ledger in {}", root.path().display()))?;
    let ledger = LedgerClient::new(in_process(LedgerService::new(store.clone()).into_server()));
    let engine = LoopEngineService::new(ledger.clone(), Some(root.path())).into_server();
    let backends = Backends {
        ledger,
        loop_engine: LoopEngineClient::new(in_process(engine)),
    };
    match opts.http {
        None => serve_stdio(Gateway::new(backends, opts.profile, None)).await?,
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            eprintln!(
                "mcp_stdio: MCP on http://{}{MCP_PATH} (profile {})",
                listener.local_addr()?,
                opts.profile
            );
            serve_http(listener, backends, opts.profile, shutdown_signal()).await?;
        }
    }
    store.close().await;
    Ok(())
}
