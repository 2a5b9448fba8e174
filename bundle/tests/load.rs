//! Load: one real `slm serve`, 1,000 concurrent watchers waiting on
//! receipts, and 50 concurrent check runs, with every outcome checked.
//!
//! Twenty jobs, fifty watchers each (watchers of the same job share its
//! watcher name, each its own agent id):
//!
//! * jobs 0–9, a passing check run 3 times each → their 500 watchers end
//!   DONE (`gate-passed`, woken by the receipt event, not the 10 s poll);
//! * jobs 10–14, a failing check run 4 times each → their 250 watchers end
//!   HALT on their wall-clock bound naming `check FAILED (exit 1)`;
//! * jobs 15–19, never run → their 250 watchers end HALT on their wall-clock
//!   bound naming `no execution receipt`.
//!
//! The 50 runs start together once every watcher has recorded its first lap
//! (so every receipt is fresh for every watcher). Timings and the server's
//! peak RSS are printed, not asserted.

#[path = "support/serve.rs"]
mod serve;

use std::time::{Duration, Instant};

use serve::*;

const JOBS: usize = 20;
const WATCHERS_PER_JOB: usize = 50;
const CONNECTIONS: usize = 20;
/// Wall-clock bound of every watcher: long enough for all 50 runs to finish
/// first, so the HALT reasons are deterministic.
const WALL_S: f64 = 75.0;
const POLL_S: f64 = 10.0;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Pass,
    Fail,
    Never,
}

fn kind(job: usize) -> Kind {
    match job {
        0..10 => Kind::Pass,
        10..15 => Kind::Fail,
        _ => Kind::Never,
    }
}

fn runs_of(k: Kind) -> usize {
    match k {
        Kind::Pass => 3,
        Kind::Fail => 4,
        Kind::Never => 0,
    }
}

/// The two backends run one after the other: 2,000 watchers at once on two
/// cores would measure the host, not the server.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn load(postgres: bool) {
    let _serial = SERIAL.lock().await;
    let t_all = Instant::now();
    let server = Server::start(postgres).await;
    let mut rc = server.receipt().await;
    let mut ledger = server.ledger().await;
    remember_locator(&mut ledger).await;

    let mut jobs = Vec::new();
    for j in 0..JOBS {
        let k = kind(j);
        let dir = project(
            &server.dir.path().join(format!("p{j:02}")),
            if k == Kind::Fail { 1 } else { 0 },
        );
        let job = register(
            &server,
            &mut rc,
            registration(&dir, &format!("w{j:02}"), "operator-checker"),
        )
        .await;
        jobs.push((job.job_id, k));
    }

    // 1,000 watchers over 20 connections.
    let mut engines = Vec::new();
    for _ in 0..CONNECTIONS {
        engines.push(server.engine().await);
    }
    let (lap_tx, mut lap_rx) = tokio::sync::mpsc::channel(JOBS * WATCHERS_PER_JOB);
    let t_watch = Instant::now();
    let mut watchers = Vec::new();
    for (j, (job_id, k)) in jobs.iter().enumerate() {
        for w in 0..WATCHERS_PER_JOB {
            let n = j * WATCHERS_PER_JOB + w;
            let spec = watch_spec(
                &format!("w{j:02}"),
                job_id,
                &format!("agent-{n}"),
                WALL_S,
                POLL_S,
            );
            let engine = engines[n % CONNECTIONS].clone();
            let tx = lap_tx.clone();
            watchers.push((
                *k,
                tokio::spawn(async move { watch(engine, spec, tx).await }),
            ));
        }
    }
    drop(lap_tx);
    for i in 0..watchers.len() {
        tokio::time::timeout(Duration::from_secs(60), lap_rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {i} watchers started within 60 s"))
            .unwrap();
    }
    let started_in = t_watch.elapsed();
    eprintln!(
        "[load {}] {} watchers waiting after {:.2} s (peak RSS {} KiB)",
        if postgres { "postgres" } else { "sqlite" },
        watchers.len(),
        started_in.as_secs_f64(),
        server.peak_rss_kib()
    );

    // 50 concurrent check runs, each on its own connection.
    let t_runs = Instant::now();
    let mut runs = Vec::new();
    for (job_id, k) in &jobs {
        for _ in 0..runs_of(*k) {
            let mut rc = server.receipt().await;
            let job_id = job_id.clone();
            let token = server.token.clone();
            runs.push((
                *k,
                tokio::spawn(async move {
                    let t = Instant::now();
                    let mut req = tonic::Request::new(slm_proto::v1::RunCheckRequest {
                        job_id,
                        timeout_s: 30.0,
                    });
                    req.metadata_mut()
                        .insert(OPERATOR_HEADER, token.parse().unwrap());
                    let mut st = rc.run_check(req).await.unwrap().into_inner();
                    use tokio_stream::StreamExt;
                    while let Some(ev) = st.next().await {
                        if let Some(slm_proto::v1::run_check_event::Event::Receipt(r)) =
                            ev.unwrap().event
                        {
                            return (r, t.elapsed());
                        }
                    }
                    panic!("run ended without a receipt")
                }),
            ));
        }
    }
    assert_eq!(runs.len(), 50);
    let mut slowest = Duration::ZERO;
    for (k, h) in runs {
        let (r, took) = h.await.unwrap();
        slowest = slowest.max(took);
        match k {
            Kind::Pass => assert_eq!(
                (r.verdict.as_str(), r.exit_code, r.stop_reason.as_str()),
                ("PASS", 0, "")
            ),
            Kind::Fail => assert_eq!(
                (r.verdict.as_str(), r.exit_code, r.stop_reason.as_str()),
                ("FAIL", 1, "")
            ),
            Kind::Never => unreachable!(),
        }
    }
    let runs_in = t_runs.elapsed();
    assert!(
        t_watch.elapsed().as_secs_f64() < WALL_S - POLL_S,
        "the runs ended too late for the HALT watchers to see them: {:?}",
        t_watch.elapsed()
    );

    // Every watcher's outcome, tallied, then compared with what it must be.
    let mut tally: std::collections::BTreeMap<(String, String, String, String), usize> =
        Default::default();
    let mut wrong = 0usize;
    for (k, h) in watchers {
        let (laps, o) = h.await.unwrap();
        let want = match k {
            Kind::Pass => ("DONE", "gate-passed", "gate-passed"),
            Kind::Fail => ("HALT", "wallclock", "check FAILED (exit 1)"),
            Kind::Never => ("HALT", "wallclock", "no execution receipt"),
        };
        let got = (
            o.status.as_str(),
            o.bound_reason.as_str(),
            o.reason.as_str(),
        );
        let ok = got == want
            && (k != Kind::Pass
                || o.receipt_reason == "authenticated PASS for current copied revision")
            && !laps.iter().any(|l| l.passed && k != Kind::Pass);
        if !ok {
            wrong += 1;
        }
        let last = laps
            .last()
            .map(|l| l.detail.chars().take(160).collect())
            .unwrap_or_default();
        *tally
            .entry((
                format!("{k:?}"),
                o.status.clone(),
                o.reason.clone(),
                if ok { String::new() } else { last },
            ))
            .or_default() += 1;
    }
    for ((k, status, reason, last), n) in &tally {
        eprintln!("  {n:4} × {k} → {status} / {reason} {last}");
    }
    assert_eq!(wrong, 0, "{wrong} watchers ended with the wrong outcome");
    eprintln!(
        "[load {}] 50 runs in {:.2} s (slowest {:.2} s); 500 DONE, 250 HALT/FAIL, 250 HALT/no receipt; \
         watchers started in {:.2} s; all ended {:.2} s after start; whole test {:.2} s; server peak RSS {} KiB",
        if postgres { "postgres" } else { "sqlite" },
        runs_in.as_secs_f64(),
        slowest.as_secs_f64(),
        started_in.as_secs_f64(),
        t_watch.elapsed().as_secs_f64(),
        t_all.elapsed().as_secs_f64(),
        server.peak_rss_kib()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_watchers_fifty_runs_sqlite() {
    load(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_watchers_fifty_runs_postgres() {
    load(true).await;
}
