//! Many concurrent watchers waiting on one loop engine (`watchers`):
//! `{"watchers": N, "cpu_percent": x, "rss_mb": y}`.
//!
//! The ledger, receipt and loop-engine services run in this process on one
//! data root, wired as `slm serve` wires them but reached through the
//! in-process transport (no TCP, no HTTP/2 framing). N `slm_loop_run`
//! watchers (1,000; 200 with `--quick`) are started through `RunLoop`, each
//! with a client task draining its event stream; they share one registered
//! job (so each subscribes to its receipts and to the profile's memories),
//! poll every 30 s and wait for an event that never comes.
//!
//! After every watcher has reported its first lap, the process's CPU time
//! (utime + stime from /proc/self/stat) is sampled over a fixed window of one
//! poll interval (30 s; 15 s with `--quick`), so the full window sees every
//! watcher's periodic lap once: `cpu_percent` = CPU seconds / window seconds
//! × 100 (100 = one core). `rss_mb` is VmRSS from /proc/self/status at the end
//! of the window — the whole `slm bench` process, including what earlier
//! benchmarks left allocated (`rss_baseline_mb`, measured before the services
//! start, says how much). Afterwards every watcher is killed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_stream::StreamExt;

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

use crate::round;

const POLL_S: f64 = 30.0;

/// utime + stime of this process, in seconds.
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); `after` starts at field 3.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

/// VmRSS of this process, in MB.
pub fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| round(kb / 1024.0, 1))
}

/// `(figures, details)`.
pub async fn run(quick: bool) -> (Value, Value) {
    let (n, window_s) = if quick { (200, 15.0) } else { (1000, POLL_S) };
    let rss_baseline = rss_mb();
    let data = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("src")).unwrap();
    std::fs::write(project.path().join("src/a.txt"), "ok\n").unwrap();
    std::fs::write(project.path().join("check.sh"), "exit 0\n").unwrap();

    let ledger_store = LedgerStore::open(&sqlite_url(&data.path().join("memory.db")))
        .await
        .unwrap();
    let mut ledger = LedgerClient::new(in_process(
        LedgerService::new(ledger_store.clone()).into_server(),
    ));
    let receipts = ReceiptStore::open(&sqlite_url(&data.path().join("receipt.db")))
        .await
        .unwrap();
    let checks = Checks::new(receipts.clone(), data.path());
    let job = checks
        .register(Registration {
            profile_id: "default".into(),
            task_id: "bench".into(),
            watcher_name: "watcher-0".into(),
            producer: "operator".into(),
            argv: vec!["/bin/true".into()],
            cwd: project.path().display().to_string(),
            artifact_paths: vec!["src".into()],
            check_paths: vec!["check.sh".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let receipt = ReceiptClient::new(in_process(
        ReceiptService::new(checks, "t".repeat(64)).into_server(),
    ));
    let mut engine = LoopEngineClient::new(in_process(
        LoopEngineService::new(ledger.clone(), Some(data.path()))
            .with_receipt(receipt)
            .into_server(),
    ));
    ledger
        .remember(pb::RememberRequest {
            content: "bench status: watchers wait for a receipt".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    let started = Instant::now();
    let cpu_start = cpu_seconds();
    let first_laps = Arc::new(AtomicUsize::new(0));
    let all_waiting = Arc::new(Notify::new());
    let mut waiters = Vec::with_capacity(n);
    for i in 0..n {
        let mut e = engine.clone();
        let spec = pb::WatchSpec {
            name: format!("watcher-{i}"),
            gate_query: "bench status".into(),
            max_iterations: 200,
            max_wallclock_s: 120.0,
            poll_interval_s: POLL_S,
            contract_json: json!({"job_id": job.job_id}).to_string(),
            agent_id: "agent".into(),
            ..Default::default()
        };
        let stream = e
            .run_loop(pb::RunLoopRequest {
                profile_id: String::new(),
                kind: Some(pb::run_loop_request::Kind::Watch(spec)),
            })
            .await
            .expect("RunLoop")
            .into_inner();
        let first_laps = first_laps.clone();
        let all_waiting = all_waiting.clone();
        waiters.push(tokio::spawn(async move {
            let mut s = stream;
            let mut seen_lap = false;
            let mut status = String::new();
            while let Some(ev) = s.next().await {
                match ev.ok().and_then(|e| e.event) {
                    Some(pb::run_event::Event::Lap(_)) if !seen_lap => {
                        seen_lap = true;
                        if first_laps.fetch_add(1, Ordering::SeqCst) + 1 == n {
                            all_waiting.notify_one();
                        }
                    }
                    Some(pb::run_event::Event::Outcome(o)) => status = o.status,
                    _ => {}
                }
            }
            status
        }));
    }
    let settled = tokio::time::timeout(Duration::from_secs(300), all_waiting.notified())
        .await
        .is_ok();
    let setup_s = started.elapsed().as_secs_f64();
    let setup_cpu = cpu_seconds() - cpu_start;

    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(window_s)).await;
    let cpu = cpu_seconds() - cpu0;
    let window = t0.elapsed().as_secs_f64();
    let rss = rss_mb();
    let waiting = first_laps.load(Ordering::SeqCst);

    // Stop every watcher: trip the kill switch, then wake them all (a new
    // memory) so they reach the kill check between laps.
    let kill_start = Instant::now();
    let _ = engine
        .kill(pb::KillRequest {
            run_id: String::new(),
            clear: false,
        })
        .await;
    let _ = ledger
        .remember(pb::RememberRequest {
            content: "bench over: wake every watcher".into(),
            ..Default::default()
        })
        .await;
    let mut killed = 0;
    for w in waiters {
        if let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(60), w).await
            && status == "KILLED"
        {
            killed += 1;
        }
    }
    let stop_s = kill_start.elapsed().as_secs_f64();
    ledger_store.close().await;
    receipts.close().await;

    let figures = json!({
        "watchers": {
            "watchers": n,
            "cpu_percent": round(cpu / window * 100.0, 2),
            "rss_mb": rss,
        }
    });
    let details = json!({
        "watchers_waiting": waiting,
        "all_settled": settled,
        "poll_interval_s": POLL_S,
        "window_s": round(window, 2),
        "cpu_s_in_window": round(cpu, 3),
        "rss_baseline_mb": rss_baseline,
        "rss_delta_mb": round(rss - rss_baseline, 1),
        "setup_s": round(setup_s, 2),
        "setup_cpu_s": round(setup_cpu, 2),
        "killed": killed,
        "stop_s": round(stop_s, 2),
        "transport": "in-process (no TCP)",
    });
    (figures, details)
}
