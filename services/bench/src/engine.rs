//! Per-lap overhead of the bounded loop engine: what a lap costs when the
//! runner and the gate do nothing.
//!
//! - `engine.per_lap_us`: the engine over the durable ledger the `slm` binary
//!   uses (`ServiceLedger` → in-process `LedgerClient` → `LedgerService` →
//!   `Store` on a WAL SQLite file), one AppendLap per lap; a sample is one
//!   run's wall time (including waiting until every lap is committed) divided
//!   by its laps;
//! - `engine.per_lap_us_memory`: the same runs over `InMemoryLedger`.
//!
//! `details.engine` splits an AppendLap: one AppendLap through the
//! in-process client, the same write straight on the `Store` (no gRPC), a
//! bare `Store::remember` (the memory row, its tags and the full-text
//! trigger, without the loop tables), and a trivial read with and without the
//! in-process gRPC hop.

use std::future::Future;
use std::time::Instant;

use serde_json::{Value, json};

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

use crate::{micros, round, summary, summary_mean};

pub const LAPS_PER_RUN: u32 = 200;
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

/// One run of `LAPS_PER_RUN` laps: the runner returns at once (changed, no
/// tokens) and the gate fails until the last lap, which passes. Returns the
/// run's wall time per lap in µs.
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

/// Runs `runs` engine runs (after `warmup` untimed ones); `spawn_run` starts
/// one as a task, like the service does, and yields its per-lap time.
async fn engine_runs<F>(warmup: usize, runs: usize, spawn_run: F) -> Vec<f64>
where
    F: Fn() -> tokio::task::JoinHandle<f64>,
{
    let mut samples = Vec::with_capacity(runs);
    for i in 0..warmup + runs {
        let per_lap = spawn_run().await.expect("run task");
        if i >= warmup {
            samples.push(per_lap);
        }
    }
    samples
}

/// Times `calls` awaits of `op(i)` inside one spawned task; each call is one
/// sample.
async fn timed_calls<F, Fut>(warmup: usize, calls: usize, mut op: F) -> Vec<f64>
where
    F: FnMut(usize) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut samples = Vec::with_capacity(calls);
        for i in 0..warmup + calls {
            // `op(i)` prepares its inputs synchronously; only the returned
            // future is timed.
            let call = op(i);
            let start = Instant::now();
            call.await;
            let us = micros(start);
            if i >= warmup {
                samples.push(us);
            }
        }
        samples
    })
    .await
    .expect("call task")
}

/// A lap row as the engine writes it (lap `lap` of run `run_id`, a failing
/// gate).
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

/// The memory `AppendLap` builds for `entry` (what the handler passes to the
/// store).
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

/// `(figures, details)`.
pub async fn run(quick: bool) -> (Value, Value) {
    let plan = Plan::new(quick);
    let dir = tempfile::tempdir().expect("tempdir");
    let url = sqlite_url(&dir.path().join("ledger.db"));
    let store = Store::open(&url).await.expect("open the ledger store");
    let client: LedgerClient<Transport> =
        LedgerClient::new(in_process(LedgerService::new(store.clone()).into_server()));

    // Engine over the durable ledger, as `slm` runs it.
    let durable = {
        let client = client.clone();
        engine_runs(plan.durable_warmup_runs, plan.durable_runs, move || {
            let client = client.clone();
            tokio::spawn(async move {
                let mut ledger = ServiceLedger::start(client, PROFILE.into(), AGENT.into());
                // The run's time includes waiting until every lap is
                // committed: durable means written, not queued.
                let start = Instant::now();
                timed_run(&mut ledger).await;
                let errors = ledger.finish().await;
                assert!(errors.is_empty(), "{errors:?}");
                start.elapsed().as_secs_f64() * 1e6 / f64::from(LAPS_PER_RUN)
            })
        })
        .await
    };

    // Engine over the in-memory ledger.
    let memory = engine_runs(plan.memory_warmup_runs, plan.memory_runs, || {
        let mut ledger = InMemoryLedger::new();
        tokio::spawn(async move { timed_run(&mut ledger).await })
    })
    .await;

    // One AppendLap through the in-process client.
    let append = {
        let client = client.clone();
        timed_calls(plan.call_warmup, plan.calls, move |i| {
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
        .await
    };

    // The same write straight on the store: no proto, no handler, no gRPC hop.
    let store_append = {
        let store = store.clone();
        timed_calls(plan.call_warmup, plan.calls, move |i| {
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
        .await
    };

    // Only the memory row (+ tags, + FTS trigger) in its transaction.
    let store_remember = {
        let store = store.clone();
        timed_calls(plan.call_warmup, plan.calls, move |i| {
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
        .await
    };

    // A trivial read: one statement on the pool, then the same through the
    // gRPC hop.
    let store_read = {
        let store = store.clone();
        timed_calls(plan.call_warmup, plan.calls, move |_| {
            let store = store.clone();
            async move {
                store.list_profiles().await.expect("Store::list_profiles");
            }
        })
        .await
    };
    let rpc_read = {
        let client = client.clone();
        timed_calls(plan.call_warmup, plan.calls, move |_| {
            let mut client = client.clone();
            async move {
                client
                    .list_profiles(pb::ListProfilesRequest {})
                    .await
                    .expect("ListProfiles");
            }
        })
        .await
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

    store.close().await;
    let db_bytes: u64 = ["ledger.db", "ledger.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.path().join(f)).ok())
        .map(|m| m.len())
        .sum();

    let figures = json!({
        "engine.per_lap_us": summary(durable.clone()),
        "engine.per_lap_us_memory": summary(memory),
    });
    let details = json!({
        "engine.per_lap_us": summary_mean(durable),
        "ledger.append_lap_us": summary_mean(append),
        "store.append_lap_us": summary_mean(store_append),
        "store.remember_us": summary_mean(store_remember),
        "store.list_profiles_us": summary_mean(store_read),
        "ledger.list_profiles_us": summary_mean(rpc_read),
        "engine.row_to_pb_us": round(row_to_proto, 3),
        "laps_per_run": LAPS_PER_RUN,
        "durable_runs": plan.durable_runs,
        "memory_runs": plan.memory_runs,
        "calls": plan.calls,
        "db_bytes_at_end": db_bytes,
    });
    (figures, details)
}
