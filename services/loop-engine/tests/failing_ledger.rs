//! Faults in the ledger (ENGINE-18): a ledger that refuses some or all writes,
//! a ledger service that is down, and a ledger service whose `AppendLaps`
//! fails while its reads still work. In every case the loop reaches the
//! terminal status it would reach with a healthy ledger, and the outcome
//! reports one `lap <n>: <error>` per failed write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use slm_ledger::{LedgerService, Store as LedgerStore};
use slm_loop_engine::LoopEngineService;
use slm_loop_engine::demo::{DemoGate, DemoRunner};
use slm_loop_engine::domain::{
    Bounds, InMemoryLedger, Ledger, LedgerRow, LoopSpec, NoApprover, Outcome, Rung, Status,
    SystemClock, run_bounded_loop,
};
use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_receipt::checks::{Checks, Registration};
use slm_receipt::grpc::ReceiptService;
use slm_receipt::store::Store as ReceiptStore;
use slm_runtime::Transport;
use slm_runtime::config::sqlite_url;
use slm_runtime::transport::{in_process, remote, unavailable};
use tokio_stream::StreamExt;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

/// Refuses every `every`-th append (1 = all), keeping the others.
struct FlakyLedger {
    every: u32,
    seen: u32,
    kept: InMemoryLedger,
}

impl FlakyLedger {
    fn new(every: u32) -> Self {
        Self {
            every,
            seen: 0,
            kept: InMemoryLedger::new(),
        }
    }
}

impl Ledger for FlakyLedger {
    async fn append(&mut self, row: &LedgerRow) -> Result<(), String> {
        self.seen += 1;
        if self.seen.is_multiple_of(self.every) {
            return Err(format!("injected write failure #{}", self.seen));
        }
        self.kept.append(row).await
    }
}

async fn demo_with<L: Ledger>(ledger: &mut L, max_iterations: i64) -> Outcome {
    let bounds = Bounds::with_max_iterations(max_iterations).unwrap();
    run_bounded_loop(
        LoopSpec {
            name: "convergence-demo",
            bounds: &bounds,
            rung: Rung::L1,
            run_id: None,
        },
        &mut DemoRunner,
        &mut DemoGate,
        ledger,
        None::<&mut NoApprover>,
        &|| false,
        &SystemClock::new(),
    )
    .await
}

#[tokio::test]
async fn every_nth_failed_write_is_counted_and_changes_nothing_else() {
    // Healthy reference runs: DONE at lap 3, HALT after 2 laps (+ halt row).
    let mut good = InMemoryLedger::new();
    let done = demo_with(&mut good, 10).await;
    assert_eq!((done.status, done.laps), (Status::Done, 3));
    let mut good_halt = InMemoryLedger::new();
    let halt = demo_with(&mut good_halt, 2).await;
    assert_eq!(
        (halt.status, halt.reason.as_str()),
        (Status::Halt, "max-iterations")
    );
    let halt_rows = good_halt.rows().len();

    for every in [1, 2, 3] {
        let mut flaky = FlakyLedger::new(every);
        let o = demo_with(&mut flaky, 10).await;
        assert_eq!(
            (o.status, o.reason.as_str(), o.laps),
            (Status::Done, "gate-passed", 3),
            "every {every}"
        );
        let failed: Vec<u32> = (1..=3).filter(|n| n % every == 0).collect();
        assert_eq!(
            o.write_errors,
            failed
                .iter()
                .map(|n| format!("lap {n}: injected write failure #{n}"))
                .collect::<Vec<_>>(),
            "every {every}"
        );
        // The rows that were accepted are exactly the others, unchanged.
        let kept: Vec<u32> = flaky.kept.rows().iter().map(|r| r.lap).collect();
        assert_eq!(
            kept,
            (1..=3).filter(|n| n % every != 0).collect::<Vec<_>>(),
            "every {every}"
        );

        let mut flaky = FlakyLedger::new(every);
        let o = demo_with(&mut flaky, 2).await;
        assert_eq!(
            (o.status, o.reason.as_str(), o.laps),
            (Status::Halt, "max-iterations", 2)
        );
        assert_eq!(
            o.write_errors.len() + flaky.kept.rows().len(),
            halt_rows,
            "every row is either written or reported (every {every})"
        );
    }
}

fn demo_request() -> pb::RunLoopRequest {
    pb::RunLoopRequest {
        profile_id: String::new(),
        kind: Some(pb::run_loop_request::Kind::Demo(pb::DemoSpec {
            iterations: 10,
        })),
    }
}

async fn outcome_of(
    engine: &mut LoopEngineClient<Transport>,
    req: pb::RunLoopRequest,
) -> (Vec<pb::LapEntry>, pb::RunOutcome) {
    let mut s = engine.run_loop(req).await.unwrap().into_inner();
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

/// The ServiceLedger with no ledger service behind it: an unreachable
/// address (connection refused) and a transport that answers UNAVAILABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_service_that_is_down_leaves_the_demo_done_with_every_write_reported() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for (label, transport) in [
        (
            "refused",
            remote(&format!("http://127.0.0.1:{closed}")).unwrap(),
        ),
        ("unavailable", unavailable("the ledger is down".into())),
    ] {
        let data = tempfile::tempdir().unwrap();
        let mut engine = LoopEngineClient::new(in_process(
            LoopEngineService::new(LedgerClient::new(transport), Some(data.path())).into_server(),
        ));
        let (laps, o) = tokio::time::timeout(
            Duration::from_secs(60),
            outcome_of(&mut engine, demo_request()),
        )
        .await
        .expect("a dead ledger never blocks the run");
        assert_eq!(
            (o.status.as_str(), o.reason.as_str(), o.laps),
            ("DONE", "gate-passed", 3),
            "{label}"
        );
        // The live stream still carried every lap.
        assert_eq!(laps.len(), 3, "{label}");
        assert_eq!(o.write_errors.len(), 3, "{label}: {:?}", o.write_errors);
        for (i, e) in o.write_errors.iter().enumerate() {
            assert!(e.starts_with(&format!("lap {}: ", i + 1)), "{label}: {e}");
        }
        if label == "unavailable" {
            assert!(o.write_errors[0].contains("the ledger is down"), "{o:?}");
        }
    }
}

/// A real ledger service whose `AppendLaps` answers UNAVAILABLE while
/// `fail` is set; every other call (recall, remember, history) passes.
fn append_failing(inner: Transport, fail: Arc<AtomicBool>, refused: Arc<AtomicU32>) -> Transport {
    BoxCloneSyncService::new(tower::service_fn(
        move |req: http::Request<tonic::body::Body>| {
            let inner = inner.clone();
            let fail = fail.clone();
            let refused = refused.clone();
            async move {
                if fail.load(Ordering::SeqCst) && req.uri().path().ends_with("/AppendLaps") {
                    refused.fetch_add(1, Ordering::SeqCst);
                    return Ok(
                        tonic::Status::unavailable("injected: ledger write refused").into_http()
                    );
                }
                inner.oneshot(req).await
            }
        },
    ))
}

/// The watcher keeps waiting while its lap writes fail, still ends DONE on
/// the receipt, and reports each lost lap; the laps written while the ledger
/// worked are in history, and the run is reported as ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_whose_writes_fail_keeps_running_and_reports_them() {
    let data = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("src")).unwrap();
    std::fs::write(project.path().join("src/app.txt"), "ready\n").unwrap();
    std::fs::write(
        project.path().join("check.sh"),
        "grep -q ready src/app.txt\n",
    )
    .unwrap();
    let store = LedgerStore::open(&sqlite_url(&data.path().join("memory.db")))
        .await
        .unwrap();
    let real = in_process(LedgerService::new(store).into_server());
    let mut ledger = LedgerClient::new(real.clone());
    let fail = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU32::new(0));
    let faulty = LedgerClient::new(append_failing(real, fail.clone(), refused.clone()));
    let receipts = ReceiptStore::open(&sqlite_url(&data.path().join("receipt.db")))
        .await
        .unwrap();
    let receipt = ReceiptClient::new(in_process(
        ReceiptService::new(Checks::new(receipts, data.path()), "t".repeat(64)).into_server(),
    ));
    let mut engine = LoopEngineClient::new(in_process(
        LoopEngineService::new(faulty, Some(data.path()))
            .with_receipt(receipt)
            .into_server(),
    ));
    ledger
        .remember(pb::RememberRequest {
            content: "The build status for this task is checked in /srv/proj".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let op = Checks::new(
        ReceiptStore::open(&sqlite_url(&data.path().join("receipt.db")))
            .await
            .unwrap(),
        data.path(),
    );
    let job = op
        .register(Registration {
            profile_id: "default".into(),
            task_id: "build".into(),
            watcher_name: "build".into(),
            producer: "operator-checker".into(),
            argv: vec!["sh".into(), "check.sh".into()],
            cwd: project.path().display().to_string(),
            artifact_paths: vec!["src/*.txt".into()],
            check_paths: vec!["check.sh".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let req = pb::RunLoopRequest {
        profile_id: String::new(),
        kind: Some(pb::run_loop_request::Kind::Watch(pb::WatchSpec {
            name: "build".into(),
            gate_query: "where is the build status".into(),
            max_iterations: 200,
            max_wallclock_s: 60.0,
            poll_interval_s: 0.25,
            contract_json: format!(r#"{{"job_id": "{}"}}"#, job.job_id),
            agent_id: "agent-1".into(),
            ..Default::default()
        })),
    };
    let mut e2 = engine.clone();
    let waiter = tokio::spawn(async move { outcome_of(&mut e2, req).await });
    // Some laps written, then the ledger refuses writes for a while.
    tokio::time::sleep(Duration::from_millis(800)).await;
    fail.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!waiter.is_finished(), "the watcher keeps waiting");
    let ran = op.run(&job.job_id, 10.0, |_| {}).await.unwrap();
    assert_eq!(ran.receipt.verdict, "PASS");
    let (laps, o) = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("DONE after the receipt")
        .unwrap();
    assert_eq!(
        (o.status.as_str(), o.reason.as_str()),
        ("DONE", "gate-passed"),
        "{o:?}"
    );
    assert_eq!(laps.len() as u32, o.laps);
    assert!(!o.write_errors.is_empty(), "{o:?}");
    for e in &o.write_errors {
        assert!(e.contains("injected: ledger write refused"), "{e}");
    }
    // Every lap is either in the ledger or reported, never both, never lost.
    let shown = engine
        .show(pb::ShowRequest {
            profile_id: String::new(),
            run_id: o.run_id.clone(),
            limit: 1000,
        })
        .await
        .unwrap()
        .into_inner();
    let stored: Vec<u32> = shown.laps.iter().map(|l| l.lap).collect();
    let reported: Vec<u32> = o
        .write_errors
        .iter()
        .map(|e| {
            e.strip_prefix("lap ")
                .and_then(|r| r.split(':').next())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(!stored.is_empty(), "laps before the fault were written");
    let mut all: Vec<u32> = stored.iter().chain(&reported).copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (1..=o.laps).collect::<Vec<_>>(),
        "stored {stored:?} reported {reported:?}"
    );
    assert!(refused.load(Ordering::SeqCst) >= 1);
    // The final (done) row was refused too, so the stored run has no
    // terminal row: history must not call it ended.
    let h = engine
        .history(pb::HistoryRequest {
            profile_id: String::new(),
            name: "build".into(),
            limit: 10,
            cursor: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let run = h.runs.iter().find(|r| r.run_id == o.run_id).unwrap();
    assert_eq!(run.laps as usize, stored.len());
    assert_eq!(run.r#final, "continue");
    assert!(!run.ended);
    assert_eq!(run.state, "unfinished");
    assert!(!shown.ended);
}
