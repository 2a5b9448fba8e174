//! How soon a waiting `slm_loop_run` watcher reports DONE after the
//! operator's receipt is stored (`watch.done_after_receipt_ms`).
//!
//! The ledger, receipt and loop-engine services run in this process, wired
//! as `slm serve` wires them. The operator runs the check through its own
//! receipt `Store` (a separate SQLite connection pool on the same database
//! file), as another process would, so the watcher can learn of the receipt
//! only through the SQLite change feed (inotify) and the receipt event
//! stream — not through an in-process shortcut. It is not a second OS
//! process. The watcher's poll interval is 30 s, so any figure far below
//! that is the event path.
//!
//! A sample runs from `Checks::run` returning (the receipt is committed) to
//! the watcher's outcome event arriving at the client; each sample is a new
//! job and a new watcher that has finished its first lap and waits.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
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

use crate::summary;

/// `(figures, details)`.
pub async fn run(quick: bool) -> (Value, Value) {
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
    let figures = json!({"watch.done_after_receipt_ms": summary(ms)});
    let details = json!({
        "method": "separate receipt Store (own SQLite pool) in this process; change feed + receipt event stream",
        "watcher_poll_interval_s": 30.0,
        "runs": n,
    });
    (figures, details)
}
