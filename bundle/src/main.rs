//! `slm`: the bounded-loops system as one local binary.

mod admin_cmd;
mod bench_cmd;
mod check_cmd;
mod cli;
mod loop_cmd;
mod memory_cmd;
mod operator;
mod serve_cmd;
mod services;

use clap::Parser;
use serde_json::json;

use cli::{Cli, Command};
use services::Services;

/// A gRPC refusal as one readable line.
pub fn rpc(e: tonic::Status) -> anyhow::Error {
    if e.message().is_empty() {
        anyhow::anyhow!("service call failed: {:?}", e.code())
    } else {
        anyhow::anyhow!("{}", e.message())
    }
}

pub fn print_json(v: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("JSON values serialise")
    );
}

async fn run(cli: Cli) -> anyhow::Result<i32> {
    let profile = cli.profile;
    match cli.command {
        Command::Serve(args) => serve_cmd::serve(args).await,
        Command::Mcp { profile } => serve_cmd::mcp(profile).await,
        Command::Restore { src, json } => admin_cmd::restore(&src, json),
        Command::Bench {
            quick,
            json,
            only,
            postgres,
        } => {
            bench_cmd::bench(
                slm_bench::Options {
                    quick,
                    only,
                    postgres,
                },
                json,
            )
            .await
        }
        command => {
            let mut s = Services::connect().await?;
            let code = match command {
                Command::Remember(a) => memory_cmd::remember(&mut s, &profile, a).await,
                Command::Recall(a) => memory_cmd::recall(&mut s, &profile, a).await,
                Command::Loop(c) => loop_cmd::run(&mut s, &profile, c).await,
                Command::Check(c) => check_cmd::run(&mut s, &profile, c).await,
                Command::Profile(c) => admin_cmd::profile(&mut s, c).await,
                Command::Backup { dest, json } => admin_cmd::backup(&mut s, &dest, json).await,
                Command::Serve(_)
                | Command::Mcp { .. }
                | Command::Restore { .. }
                | Command::Bench { .. } => {
                    unreachable!("handled above")
                }
            };
            s.close().await;
            code
        }
    }
}

fn main() {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_) | Command::Mcp { .. }) {
        // A one-shot command piped into `head` should end quietly, as Unix
        // tools do, instead of failing on a closed stdout. (`slm serve`
        // keeps Rust's default so a closed peer is an error, not a signal.)
        // SAFETY: restoring the default disposition before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let json = cli.command.json();
    slm_runtime::telemetry::init("warn");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("slm: error: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            let msg = format!("{e:#}");
            if json {
                println!("{}", json!({"ok": false, "error": msg}));
            } else {
                eprintln!("slm: error: {msg}");
            }
            1
        }
    };
    drop(runtime);
    // Flush spans of one-shot commands (a no-op without OpenTelemetry).
    slm_runtime::telemetry::shutdown();
    std::process::exit(code);
}
