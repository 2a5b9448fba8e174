//! How soon a waiting `slm_loop_run` watcher reports DONE after the
//! operator's receipt is stored. The operator runs the check through its own
//! database connection, as another process would, so the watcher can learn
//! of it only through the SQLite change feed (inotify) and the receipt event
//! stream — not through an in-process shortcut. The watcher's poll interval
//! is 30 s, so any figure far below that is the event path.
//!
//! Prints `{"watch.done_after_receipt_ms": {"median","p99","n"}}`.
//! `cargo bench -p slm-loop-engine --bench watch [-- --quick]`

use std::time::{Duration, Instant};

use serde_json::json;
use slm_ledger::{LedgerService, Store as LedgerStore};
use slm_loop_engine::LoopEngineService;
use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_receipt::checks::{Checks, Registration};
use slm_receipt::grpc::ReceiptService;
use slm_receipt::store::Store as ReceiptStore;
use slm_runtime::config::sqlite_url;
use slm_runtime::transport::in_process;
use tokio_stream::StreamExt;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n = if quick { 8 } else { 30 };
    let data = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("src")).unwrap();
    std::fs::write(project.path().join("src/a.txt"), "ok\n").unwrap();
    std::fs::write(project.path().join("check.sh"), "exit 0\n").unwrap();

    let ledger_store = LedgerStore::open(&sqlite_url(&data.path().join("memory.db")))
        .await
        .unwrap();
    let mut ledger = LedgerClient::new(in_process(LedgerService::new(ledger_store).into_server()));
    let receipts = ReceiptStore::open(&sqlite_url(&data.path().join("receipt.db")))
        .await
        .unwrap();
    let receipt = ReceiptClient::new(in_process(
        ReceiptService::new(Checks::new(receipts, data.path()), "t".repeat(64)).into_server(),
    ));
    let engine = LoopEngineClient::new(in_process(
        LoopEngineService::new(ledger.clone(), Some(data.path()))
            .with_receipt(receipt)
            .into_server(),
    ));
    // The operator: a separate connection to the same receipt database.
    let operator = Checks::new(
        ReceiptStore::open(&sqlite_url(&data.path().join("receipt.db")))
            .await
            .unwrap(),
        data.path(),
    );
    ledger
        .remember(pb::RememberRequest {
            content: "bench status: the check runs in the bench project".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    let mut ms = Vec::new();
    for i in 0..n {
        let watcher = format!("bench-{i}");
        let job = operator
            .register(Registration {
                profile_id: "default".into(),
                task_id: "bench".into(),
                watcher_name: watcher.clone(),
                producer: "operator".into(),
                argv: vec!["/bin/true".into()],
                cwd: project.path().display().to_string(),
                artifact_paths: vec!["src".into()],
                check_paths: vec!["check.sh".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        let mut e = engine.clone();
        let spec = pb::WatchSpec {
            name: watcher,
            gate_query: "bench status".into(),
            max_iterations: 50,
            max_wallclock_s: 60.0,
            poll_interval_s: 30.0,
            contract_json: json!({"job_id": job.job_id}).to_string(),
            agent_id: "agent".into(),
            ..Default::default()
        };
        let waiter = tokio::spawn(async move {
            let mut s = e
                .run_loop(pb::RunLoopRequest {
                    profile_id: String::new(),
                    kind: Some(pb::run_loop_request::Kind::Watch(spec)),
                })
                .await
                .unwrap()
                .into_inner();
            while let Some(ev) = s.next().await {
                if let Some(pb::run_event::Event::Outcome(o)) = ev.unwrap().event {
                    return (o, Instant::now());
                }
            }
            panic!("no outcome");
        });
        // Let the watcher finish its first lap and wait.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let ran = operator.run(&job.job_id, 30.0, |_| {}).await.unwrap();
        let stored = Instant::now();
        assert_eq!(ran.receipt.verdict, "PASS");
        let (o, done_at) = waiter.await.unwrap();
        assert_eq!(o.status, "DONE", "{}", o.reason);
        ms.push(done_at.duration_since(stored).as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    println!(
        "{}",
        json!({"watch.done_after_receipt_ms": {"median": r3(at(0.5)), "p99": r3(at(0.99)), "n": ms.len()}})
    );
}
