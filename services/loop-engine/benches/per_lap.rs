//! Per-lap overhead of the bounded loop engine: what a lap costs when the runner and the gate
//! do nothing.
//!
//! `cargo bench -p slm-loop-engine --bench per_lap [-- --quick]`
//!
//! Prints one JSON object to stdout. Every figure is `{"median", "p99", "n"}` in microseconds:
//!
//! - `engine.per_lap_us`: the engine over the durable ledger the `slm` binary uses
//!   (`ServiceLedger` → in-process `LedgerClient` → `LedgerService` → `Store` on a WAL SQLite
//!   file), one AppendLap per lap; samples are per-run wall time / laps;
//! - `engine.per_lap_us_memory`: the same runs over `InMemoryLedger`;
//! - `ledger.append_lap_us`: one AppendLap through the in-process client, per call.
//!
//! `breakdown` splits an AppendLap: the same write straight on the `Store` (no gRPC), a bare
//! `Store::remember` (the memory row, its tags and the full-text trigger, without the loop
//! tables), and a trivial read with and without the in-process gRPC hop.

use std::future::Future;
use std::time::Instant;

use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use slm_ledger::domain::entry::LAP_IMPORTANCE;
use slm_ledger::domain::{LapRecord, NewMemory};
use slm_ledger::{LedgerService, Store};
use slm_loop_engine::domain::{
    Bounds, InMemoryLedger, LapResult, Ledger, LoopSpec, NoApprover, Rung, Status, StepError,
    SystemClock, Verdict, run_bounded_loop,
};
use slm_loop_engine::ledger::{ServiceLedger, row_to_pb};
use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_runtime::Transport;
use slm_runtime::config::sqlite_url;
use slm_runtime::transport::in_process;

const LAPS_PER_RUN: u32 = 200;
const PROFILE: &str = "default";
const AGENT: &str = "slm-loop-bench";
const NAME: &str = "per-lap-bench";

struct Plan {
    durable_warmup_runs: usize,
    durable_runs: usize,
    memory_warmup_runs: usize,
    memory_runs: usize,
    call_warmup: usize,
    calls: usize,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Plan {
                durable_warmup_runs: 2,
                durable_runs: 10,
                memory_warmup_runs: 50,
                memory_runs: 200,
                call_warmup: 200,
                calls: 1_000,
            }
        } else {
            Plan {
                durable_warmup_runs: 5,
                durable_runs: 50,
                memory_warmup_runs: 200,
                memory_runs: 2_000,
                call_warmup: 500,
                calls: 5_000,
            }
        }
    }
}

/// `{"median", "p99", "n"}` of microsecond samples (nearest-rank p99).
fn summary(mut samples: Vec<f64>) -> Value {
    assert!(!samples.is_empty());
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let median = if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    };
    let rank = ((0.99 * n as f64).ceil() as usize).clamp(1, n);
    let p99 = samples[rank - 1];
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({"median": r3(median), "p99": r3(p99), "n": n})
}

/// [`summary`] plus the mean, which is what a run's wall time adds up (checkpoint stalls
/// included); used for the breakdown.
fn summary_mean(samples: Vec<f64>) -> Value {
    let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
    let mut v = summary(samples);
    v["mean"] = json!((mean * 1000.0).round() / 1000.0);
    v
}

fn micros(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

fn machine() -> Value {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    json!({"nproc": nproc, "cpu": cpu})
}

/// One run of `LAPS_PER_RUN` laps: the runner returns at once (changed, no tokens) and the gate
/// fails until the last lap, which passes. Returns the run's wall time per lap in µs.
async fn timed_run<L: Ledger>(ledger: &mut L) -> f64 {
    let bounds = Bounds::with_max_iterations(i64::from(LAPS_PER_RUN)).expect("valid bounds");
    let mut runner = |_lap: u32| async {
        Ok::<_, StepError>(LapResult {
            changed: true,
            agent_claimed_done: false,
            tokens: 0,
            log: String::new(),
        })
    };
    let mut gate = |lap: u32| async move {
        Ok::<_, StepError>(Verdict::new(lap >= LAPS_PER_RUN, "bench gate"))
    };
    let kill = || false;
    let clock = SystemClock::new();
    let start = Instant::now();
    let outcome = run_bounded_loop(
        LoopSpec {
            name: NAME,
            bounds: &bounds,
            rung: Rung::L1,
            run_id: None,
        },
        &mut runner,
        &mut gate,
        ledger,
        None::<&mut NoApprover>,
        &kill,
        &clock,
    )
    .await;
    let elapsed = micros(start);
    assert_eq!(outcome.status, Status::Done, "{outcome:?}");
    assert_eq!(outcome.laps, LAPS_PER_RUN, "{outcome:?}");
    assert!(
        outcome.write_errors.is_empty(),
        "{:?}",
        outcome.write_errors
    );
    elapsed / f64::from(LAPS_PER_RUN)
}

/// Runs `runs` engine runs (after `warmup` untimed ones); `spawn_run` starts one on the runtime
/// as a task, like the service does, and yields its per-lap time.
fn engine_runs<F>(rt: &Runtime, warmup: usize, runs: usize, spawn_run: F) -> Vec<f64>
where
    F: Fn(&Runtime) -> JoinHandle<f64>,
{
    let mut samples = Vec::with_capacity(runs);
    for i in 0..warmup + runs {
        let per_lap = rt.block_on(spawn_run(rt)).expect("run task");
        if i >= warmup {
            samples.push(per_lap);
        }
    }
    samples
}

/// Times `calls` awaits of `op(i)` inside one spawned task; each call is one sample.
fn timed_calls<F, Fut>(rt: &Runtime, warmup: usize, calls: usize, mut op: F) -> Vec<f64>
where
    F: FnMut(usize) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    rt.block_on(rt.spawn(async move {
        let mut samples = Vec::with_capacity(calls);
        for i in 0..warmup + calls {
            // `op(i)` prepares its inputs synchronously; only the returned future is timed.
            let call = op(i);
            let start = Instant::now();
            call.await;
            let us = micros(start);
            if i >= warmup {
                samples.push(us);
            }
        }
        samples
    }))
    .expect("call task")
}

/// A lap row as the engine writes it (lap `lap` of run `run_id`, a failing gate).
fn lap_entry(run_id: &str, lap: u32) -> pb::LapEntry {
    pb::LapEntry {
        run_id: run_id.into(),
        name: NAME.into(),
        lap,
        ts: slm_runtime::time::now_iso(),
        decision: "continue".into(),
        passed: false,
        detail: "bench gate".into(),
        agent_claimed_done: false,
        runner_log: String::new(),
        budget: Some(pb::Budget {
            tokens: 0,
            wallclock_s: 0.0,
        }),
    }
}

/// The memory `AppendLap` builds for `entry` (what the handler passes to the store).
fn lap_memory(entry: &pb::LapEntry) -> (NewMemory, LapRecord) {
    let lap = slm_ledger::grpc::lap_from_pb(entry.clone()).capped();
    let m = NewMemory {
        profile_id: PROFILE.into(),
        content: lap.to_json(),
        tags: lap.tags(),
        session_id: lap.session_id(),
        metadata: lap.metadata(),
        importance: LAP_IMPORTANCE,
        agent_id: AGENT.into(),
    }
    .validated()
    .expect("valid lap memory");
    (m, lap)
}

/// Laps are grouped in runs of `LAPS_PER_RUN`, as the engine writes them.
fn run_of(i: usize) -> String {
    format!("{NAME}-{:08x}", i / LAPS_PER_RUN as usize)
}

fn main() {
    let quick = std::env::args().skip(1).any(|a| a == "--quick");
    let plan = Plan::new(quick);
    let wall = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");

    let dir = tempfile::tempdir().expect("tempdir");
    let url = sqlite_url(&dir.path().join("ledger.db"));
    let store = rt
        .block_on(Store::open(&url))
        .expect("open the ledger store");
    let client: LedgerClient<Transport> =
        LedgerClient::new(in_process(LedgerService::new(store.clone()).into_server()));

    // Engine over the durable ledger, as `slm` runs it.
    let durable = {
        let client = client.clone();
        engine_runs(
            &rt,
            plan.durable_warmup_runs,
            plan.durable_runs,
            move |rt| {
                let client = client.clone();
                rt.spawn(async move {
                    let mut ledger = ServiceLedger::start(client, PROFILE.into(), AGENT.into());
                    // The run's time includes waiting until every lap is
                    // committed: durable means written, not queued.
                    let start = Instant::now();
                    timed_run(&mut ledger).await;
                    let errors = ledger.finish().await;
                    assert!(errors.is_empty(), "{errors:?}");
                    start.elapsed().as_secs_f64() * 1e6 / f64::from(LAPS_PER_RUN)
                })
            },
        )
    };

    // Engine over the in-memory ledger.
    let memory = engine_runs(&rt, plan.memory_warmup_runs, plan.memory_runs, |rt| {
        let mut ledger = InMemoryLedger::new();
        rt.spawn(async move { timed_run(&mut ledger).await })
    });

    // One AppendLap through the in-process client.
    let append = {
        let client = client.clone();
        timed_calls(&rt, plan.call_warmup, plan.calls, move |i| {
            let mut client = client.clone();
            let entry = lap_entry(
                &format!("rpc-{}", run_of(i)),
                (i % LAPS_PER_RUN as usize) as u32 + 1,
            );
            async move {
                client
                    .append_lap(pb::AppendLapRequest {
                        profile_id: PROFILE.into(),
                        entry: Some(entry),
                        agent_id: AGENT.into(),
                        gate_row: false,
                    })
                    .await
                    .expect("AppendLap");
            }
        })
    };

    // The same write straight on the store: no proto, no handler, no gRPC hop.
    let store_append = {
        let store = store.clone();
        timed_calls(&rt, plan.call_warmup, plan.calls, move |i| {
            let store = store.clone();
            let entry = lap_entry(
                &format!("store-{}", run_of(i)),
                (i % LAPS_PER_RUN as usize) as u32 + 1,
            );
            let (m, lap) = lap_memory(&entry);
            let created = slm_runtime::time::now_iso();
            let lap = slm_ledger::store::NewLap {
                memory: m,
                lap,
                gate_row: false,
            };
            async move {
                store
                    .append_laps(&[lap], &created)
                    .await
                    .expect("Store::append_laps");
            }
        })
    };

    // Only the memory row (+ tags, + FTS trigger) in its transaction.
    let store_remember = {
        let store = store.clone();
        timed_calls(&rt, plan.call_warmup, plan.calls, move |i| {
            let store = store.clone();
            let entry = lap_entry(
                &format!("remember-{}", run_of(i)),
                (i % LAPS_PER_RUN as usize) as u32 + 1,
            );
            let (m, _) = lap_memory(&entry);
            let created = slm_runtime::time::now_iso();
            async move {
                store.remember(&m, &created).await.expect("Store::remember");
            }
        })
    };

    // A trivial read: one statement on the pool, then the same through the gRPC hop.
    let store_read = {
        let store = store.clone();
        timed_calls(&rt, plan.call_warmup, plan.calls, move |_| {
            let store = store.clone();
            async move {
                store.list_profiles().await.expect("Store::list_profiles");
            }
        })
    };
    let rpc_read = {
        let client = client.clone();
        timed_calls(&rt, plan.call_warmup, plan.calls, move |_| {
            let mut client = client.clone();
            async move {
                client
                    .list_profiles(pb::ListProfilesRequest {})
                    .await
                    .expect("ListProfiles");
            }
        })
    };

    // Engine-side cost of a row: LedgerRow → proto (no I/O).
    let row_to_proto = {
        let entry = lap_entry("x", 1);
        let row = slm_loop_engine::domain::LedgerRow {
            run_id: entry.run_id.clone(),
            name: entry.name.clone(),
            lap: 1,
            ts: entry.ts.clone(),
            decision: slm_loop_engine::domain::Decision::Continue,
            passed: false,
            detail: entry.detail.clone(),
            agent_claimed_done: false,
            runner_log: String::new(),
            budget: Default::default(),
        };
        let start = Instant::now();
        let reps = 100_000u32;
        for _ in 0..reps {
            std::hint::black_box(row_to_pb(std::hint::black_box(&row)));
        }
        micros(start) / f64::from(reps)
    };

    rt.block_on(store.close());
    let db_bytes: u64 = ["ledger.db", "ledger.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.path().join(f)).ok())
        .map(|m| m.len())
        .sum();

    let out = json!({
        "engine.per_lap_us": summary(durable),
        "engine.per_lap_us_memory": summary(memory),
        "ledger.append_lap_us": summary(append.clone()),
        "breakdown": {
            "ledger.append_lap_us": summary_mean(append),
            "store.append_lap_us": summary_mean(store_append),
            "store.remember_us": summary_mean(store_remember),
            "store.list_profiles_us": summary_mean(store_read),
            "ledger.list_profiles_us": summary_mean(rpc_read),
            "engine.row_to_pb_us": (row_to_proto * 1000.0).round() / 1000.0,
        },
        "config": {
            "quick": quick,
            "laps_per_run": LAPS_PER_RUN,
            "durable_runs": plan.durable_runs,
            "memory_runs": plan.memory_runs,
            "calls": plan.calls,
            "db_bytes_at_end": db_bytes,
            "total_s": (wall.elapsed().as_secs_f64() * 100.0).round() / 100.0,
        },
        "machine": machine(),
    });
    println!("{out}");
}
