//! The `slm_loop_run` watcher through the LoopEngine gRPC service, with the
//! real ledger and receipt services in process: it ends DONE only with an
//! external locator AND a valid receipt, wakes on the receipt event, and a
//! HALT names the refusal.

use std::path::Path;
use std::time::{Duration, Instant};

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

struct World {
    data: tempfile::TempDir,
    project: tempfile::TempDir,
    ledger: LedgerClient<Transport>,
    engine: LoopEngineClient<Transport>,
}

async fn world() -> World {
    let data = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("src")).unwrap();
    std::fs::write(project.path().join("src/app.txt"), "ready\n").unwrap();
    std::fs::write(
        project.path().join("check.sh"),
        "grep -q ready src/app.txt\n",
    )
    .unwrap();
    let ledger_store = LedgerStore::open(&sqlite_url(&data.path().join("memory.db")))
        .await
        .unwrap();
    let ledger = LedgerClient::new(in_process(LedgerService::new(ledger_store).into_server()));
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
    World {
        data,
        project,
        ledger,
        engine,
    }
}

/// The operator's side, as another process would do it: its own store
/// connection on the same data root.
async fn operator(data: &Path) -> Checks {
    let store = ReceiptStore::open(&sqlite_url(&data.join("receipt.db")))
        .await
        .unwrap();
    Checks::new(store, data)
}

fn registration(project: &Path, watcher: &str) -> Registration {
    Registration {
        profile_id: "default".into(),
        task_id: "build".into(),
        watcher_name: watcher.into(),
        producer: "operator-checker".into(),
        argv: vec!["sh".into(), "check.sh".into()],
        cwd: project.display().to_string(),
        artifact_paths: vec!["src/*.txt".into()],
        check_paths: vec!["check.sh".into()],
        ..Default::default()
    }
}

fn spec(name: &str, contract: &str, iterations: u32, wall: f64) -> pb::WatchSpec {
    pb::WatchSpec {
        name: name.into(),
        gate_query: "where is the build status".into(),
        max_iterations: iterations,
        max_wallclock_s: wall,
        poll_interval_s: 0.25,
        contract_json: contract.into(),
        agent_id: "agent-1".into(),
        ..Default::default()
    }
}

async fn watch(
    engine: &mut LoopEngineClient<Transport>,
    spec: pb::WatchSpec,
) -> (Vec<pb::LapEntry>, pb::RunOutcome) {
    let mut s = engine
        .run_loop(pb::RunLoopRequest {
            profile_id: String::new(),
            kind: Some(pb::run_loop_request::Kind::Watch(spec)),
        })
        .await
        .unwrap()
        .into_inner();
    let mut laps = Vec::new();
    while let Some(ev) = s.next().await {
        match ev.unwrap().event {
            Some(pb::run_event::Event::Lap(l)) => laps.push(l),
            Some(pb::run_event::Event::Outcome(o)) => return (laps, o),
            None => {}
        }
    }
    panic!("no outcome")
}

async fn locator(ledger: &mut LedgerClient<Transport>) {
    ledger
        .remember(pb::RememberRequest {
            content: "The build status for this task is checked in /srv/proj".into(),
            ..Default::default()
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_contract_it_halts_naming_the_refusal() {
    let mut w = world().await;
    locator(&mut w.ledger).await;
    let (laps, o) = watch(&mut w.engine, spec("build", "", 2, 15.0)).await;
    assert_eq!(o.status, "HALT");
    assert_eq!(o.bound_reason, "max-iterations");
    assert_eq!(o.reason, "operator-registered job_id required");
    assert_eq!(o.receipt_reason, "operator-registered job_id required");
    assert_eq!(o.laps, 2);
    assert_eq!(
        laps.iter().map(|l| l.decision.as_str()).collect::<Vec<_>>(),
        ["continue", "continue", "halt"]
    );
    assert!(
        laps[0]
            .detail
            .starts_with("recall 'where is the build status': hits=1 top=1.000 floor=False")
    );
    assert!(
        laps[0].detail.ends_with(
            "independent_receipt=False receipt_reason=operator-registered job_id required"
        )
    );
    // Malformed contracts are the same refusal.
    for bad in [
        r#"{"job_id": "ABCDEF0123456789ABCDEF0123456789"}"#,
        r#"{"job_id": "0123456789abcdef0123456789abcdef", "x": 1}"#,
        "[]",
    ] {
        let (_, o) = watch(&mut w.engine, spec("build", bad, 1, 15.0)).await;
        assert_eq!(o.reason, "operator-registered job_id required", "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_watcher_producer_and_missing_receipt() {
    let mut w = world().await;
    locator(&mut w.ledger).await;
    let op = operator(w.data.path()).await;
    let job = op
        .register(registration(w.project.path(), "build"))
        .await
        .unwrap();
    let contract = format!(r#"{{"job_id": "{}"}}"#, job.job_id);
    let (_, o) = watch(&mut w.engine, spec("build", &contract, 1, 15.0)).await;
    assert_eq!(
        (o.status.as_str(), o.reason.as_str()),
        ("HALT", "no execution receipt")
    );
    let (_, o) = watch(&mut w.engine, spec("other", &contract, 1, 15.0)).await;
    assert_eq!(
        o.reason,
        "job missing, expired, superseded or requires hermetic re-registration"
    );
    let mut s = spec("build", &contract, 1, 15.0);
    s.agent_id = "operator-checker".into();
    let (_, o) = watch(&mut w.engine, s).await;
    assert_eq!(o.reason, "receipt producer is the running agent");
    // A receipt from before the watcher started is stale.
    op.run(&job.job_id, 10.0, |_| {}).await.unwrap();
    let (_, o) = watch(&mut w.engine, spec("build", &contract, 1, 15.0)).await;
    assert_eq!(o.reason, "latest receipt stale or unauthenticated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_from_another_process_ends_the_wait_done() {
    let mut w = world().await;
    locator(&mut w.ledger).await;
    let op = operator(w.data.path()).await;
    let job = op
        .register(registration(w.project.path(), "build"))
        .await
        .unwrap();
    let contract = format!(r#"{{"job_id": "{}"}}"#, job.job_id);
    // A long poll: only the event can end this quickly.
    let mut s = spec("build", &contract, 200, 60.0);
    s.poll_interval_s = 30.0;
    let mut engine = w.engine.clone();
    let waiter = tokio::spawn(async move { watch(&mut engine, s).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ran = op.run(&job.job_id, 10.0, |_| {}).await.unwrap();
    let receipt_at = Instant::now();
    assert_eq!(ran.receipt.verdict, "PASS");
    let (laps, o) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the receipt event wakes the watcher long before its 30 s poll")
        .unwrap();
    let waited = receipt_at.elapsed();
    assert_eq!(
        (o.status.as_str(), o.reason.as_str()),
        ("DONE", "gate-passed")
    );
    assert_eq!(o.bound_reason, "gate-passed");
    assert_eq!(
        o.receipt_reason,
        "authenticated PASS for current copied revision"
    );
    assert_eq!(o.laps, 2);
    assert_eq!(laps.last().unwrap().decision, "done");
    assert!(laps.last().unwrap().passed);
    eprintln!(
        "DONE {} ms after the receipt was stored",
        waited.as_millis()
    );

    // History reports the run with the PASS reason.
    let h = w
        .engine
        .history(pb::HistoryRequest {
            name: "build".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(h.runs[0].run_id, o.run_id);
    assert_eq!(
        h.runs[0].reason,
        "authenticated PASS for current copied revision"
    );
    assert_eq!(h.runs[0].r#final, "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_alone_never_passes_and_laps_are_not_locators() {
    let w = world().await;
    let op = operator(w.data.path()).await;
    let job = op
        .register(registration(w.project.path(), "build"))
        .await
        .unwrap();
    let contract = format!(r#"{{"job_id": "{}"}}"#, job.job_id);
    // A valid receipt but no locator: no lap can pass. The watcher's own
    // lap rows mention "build status" but are never locators.
    let mut s = spec("build", &contract, 3, 15.0);
    s.gate_query = "build status".into();
    let mut engine = w.engine.clone();
    let waiter = tokio::spawn(async move { watch(&mut engine, s).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    op.run(&job.job_id, 10.0, |_| {}).await.unwrap();
    let (laps, o) = waiter.await.unwrap();
    assert_eq!(
        (o.status.as_str(), o.bound_reason.as_str()),
        ("HALT", "max-iterations")
    );
    assert!(laps.iter().all(|l| !l.passed));
    assert!(
        laps.iter().all(|l| !l.detail.contains("hits=1")),
        "{laps:?}"
    );
    // The receipt passed, so the reason is the recall line that failed.
    assert_eq!(
        o.receipt_reason,
        "authenticated PASS for current copied revision"
    );
    assert!(
        o.reason.starts_with("recall 'build status': hits=0"),
        "{}",
        o.reason
    );
}

/// Ledger writes fail open through the service too: a demo whose every lap
/// the ledger refuses still ends DONE and reports each failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_ledger_writes_are_reported_not_fatal() {
    let mut w = world().await;
    let mut s = w
        .engine
        .run_loop(pb::RunLoopRequest {
            profile_id: "ghost".into(),
            kind: Some(pb::run_loop_request::Kind::Demo(pb::DemoSpec {
                iterations: 10,
            })),
        })
        .await
        .unwrap()
        .into_inner();
    let mut outcome = None;
    while let Some(ev) = s.next().await {
        if let Some(pb::run_event::Event::Outcome(o)) = ev.unwrap().event {
            outcome = Some(o);
        }
    }
    let o = outcome.unwrap();
    assert_eq!((o.status.as_str(), o.laps), ("DONE", 3));
    assert_eq!(o.write_errors.len(), 3);
    for (i, e) in o.write_errors.iter().enumerate() {
        assert!(
            e.starts_with(&format!("lap {}: There is no profile 'ghost'", i + 1)),
            "{e}"
        );
    }
}
