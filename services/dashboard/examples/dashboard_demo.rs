//! A demo dashboard on a throwaway data root, for the browser test:
//! in-process ledger, receipt and loop engine services (SQLite in a temp
//! dir), a few `LoopEngine.RunLoop` demo runs, one registered check with a
//! receipt, a loop with hostile text, and a slow run that gains a lap every
//! second (to watch the run page update live).
//!
//! Usage: `cargo run -p slm-dashboard --example dashboard_demo -- [PORT]`
//! (0 or absent: any free port). Prints `listening on http://ADDR` when ready.

use std::time::Duration;

use slm_dashboard::{DashboardBackends, DashboardOptions, router_with_options};
use slm_ledger::{LedgerService, Store as LedgerStore};
use slm_loop_engine::LoopEngineService;
use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_receipt::checks::{Checks, Registration};
use slm_receipt::grpc::ReceiptService;
use slm_receipt::store::Store as ReceiptStore;
use slm_runtime::Transport;
use slm_runtime::config::sqlite_url;
use slm_runtime::transport::in_process;
use tokio_stream::StreamExt;

/// Loop name and detail that would run script if rendered unescaped.
pub const HOSTILE_NAME: &str = "<script>window.__pwned=1</script>";
pub const HOSTILE_DETAIL: &str =
    "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>";
pub const SLOW_RUN: &str = "slow-run-0001";
const SLOW_LAPS: u32 = 12;

async fn demo(engine: &mut LoopEngineClient<Transport>, iterations: i64) -> pb::RunOutcome {
    let mut s = engine
        .run_loop(pb::RunLoopRequest {
            profile_id: String::new(),
            kind: Some(pb::run_loop_request::Kind::Demo(pb::DemoSpec {
                iterations,
            })),
        })
        .await
        .expect("demo starts")
        .into_inner();
    while let Some(ev) = s.next().await {
        if let Some(pb::run_event::Event::Outcome(o)) = ev.expect("demo event").event {
            return o;
        }
    }
    panic!("demo ended without an outcome")
}

#[allow(clippy::too_many_arguments)]
async fn lap(
    ledger: &mut LedgerClient<Transport>,
    run_id: &str,
    name: &str,
    lap: u32,
    decision: &str,
    passed: bool,
    detail: &str,
    claimed: bool,
) {
    ledger
        .append_lap(pb::AppendLapRequest {
            profile_id: String::new(),
            entry: Some(pb::LapEntry {
                run_id: run_id.into(),
                name: name.into(),
                lap,
                ts: slm_runtime::time::now_iso(),
                decision: decision.into(),
                passed,
                detail: detail.into(),
                agent_claimed_done: claimed,
                runner_log: String::new(),
                budget: Some(pb::Budget {
                    tokens: 8 * i64::from(lap),
                    wallclock_s: f64::from(lap),
                }),
            }),
            agent_id: "demo-agent".into(),
            gate_row: false,
        })
        .await
        .expect("lap appended");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let port: u16 = std::env::args().nth(1).map_or(Ok(0), |p| p.parse())?;
    let data = tempfile::tempdir()?;
    let ledger_store = LedgerStore::open(&sqlite_url(&data.path().join("memory.db"))).await?;
    let mut ledger = LedgerClient::new(in_process(LedgerService::new(ledger_store).into_server()));
    let receipts = ReceiptStore::open(&sqlite_url(&data.path().join("receipt.db"))).await?;
    let checks = Checks::new(receipts, data.path());
    let receipt = ReceiptClient::new(in_process(
        ReceiptService::new(checks.clone(), "d".repeat(64)).into_server(),
    ));
    let mut engine = LoopEngineClient::new(in_process(
        LoopEngineService::new(ledger.clone(), Some(data.path()))
            .with_receipt(receipt.clone())
            .into_server(),
    ));

    // Demo runs: two converge (DONE), one hits its lap cap (HALT).
    for iterations in [10, 2, 10] {
        let o = demo(&mut engine, iterations).await;
        eprintln!("demo run {} {} ({} laps)", o.run_id, o.status, o.laps);
    }

    // A loop whose name and detail are hostile markup.
    lap(
        &mut ledger,
        "evil-run-0001",
        HOSTILE_NAME,
        1,
        "continue",
        false,
        HOSTILE_DETAIL,
        true,
    )
    .await;
    lap(
        &mut ledger,
        "evil-run-0001",
        HOSTILE_NAME,
        2,
        "halt",
        false,
        HOSTILE_DETAIL,
        true,
    )
    .await;

    // One operator-registered check with a receipt.
    let project = tempfile::tempdir()?;
    std::fs::write(project.path().join("check.sh"), "grep -q ready app.txt\n")?;
    std::fs::write(project.path().join("app.txt"), "ready\n")?;
    let job = checks
        .register(Registration {
            profile_id: "default".into(),
            task_id: "build".into(),
            watcher_name: "build".into(),
            producer: "operator-checker".into(),
            argv: vec!["sh".into(), "check.sh".into()],
            cwd: project.path().display().to_string(),
            artifact_paths: vec!["app.txt".into()],
            check_paths: vec!["check.sh".into()],
            ..Default::default()
        })
        .await?;
    match checks.run(&job.job_id, 10.0, |_| {}).await {
        Ok(r) => eprintln!("check {} {}", job.job_id, r.receipt.verdict),
        Err(e) => eprintln!("check {} did not run: {e}", job.job_id),
    }

    // A slow run in progress: one lap a second, the agent claiming done from
    // lap 3 on (logged, never trusted), the gate passing on the last lap.
    lap(
        &mut ledger,
        SLOW_RUN,
        "slow-build",
        1,
        "continue",
        false,
        "gate: tests failing (lap 1)",
        false,
    )
    .await;
    let mut slow = ledger.clone();
    tokio::spawn(async move {
        for n in 2..=SLOW_LAPS {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let last = n == SLOW_LAPS;
            let (decision, detail) = if last {
                ("done", format!("gate: tests pass (lap {n})"))
            } else {
                ("continue", format!("gate: tests failing (lap {n})"))
            };
            lap(
                &mut slow,
                SLOW_RUN,
                "slow-build",
                n,
                decision,
                last,
                &detail,
                n >= 3,
            )
            .await;
        }
    });

    let backends = DashboardBackends {
        ledger,
        loop_engine: engine,
        receipt: Some(receipt),
        bridge: None,
    };
    // SLM_DASHBOARD_DEMO_PATH: the PATH searched for `bounded-loops-mcp`.
    let options = DashboardOptions {
        search_path: std::env::var_os("SLM_DASHBOARD_DEMO_PATH"),
        ..Default::default()
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router_with_options(backends, options))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    drop(project);
    drop(data);
    Ok(())
}
