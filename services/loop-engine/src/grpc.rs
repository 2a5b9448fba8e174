//! The `slm.v1.LoopEngine` gRPC server: starts runs on a task and streams
//! their rows, reads history and runs through the ledger service, and
//! operates the kill switch.

use std::collections::BTreeSet;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_server::{LoopEngine, LoopEngineServer};
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_runtime::Transport;

use crate::demo::{DEMO_NAME, DemoGate, DemoRunner, demo_iterations};
use crate::domain::Status as RunStatus;
use crate::domain::stop_reasons::last_gate_reason;
use crate::domain::stop_reasons::watcher_reason;
use crate::domain::watch;
use crate::domain::{
    Bounds, LoopSpec, NoApprover, Outcome, Rung, SystemClock, new_run_id, run_bounded_loop,
};
// The run-state rule lives in the domain; re-exported here for the
// `slm_loop_engine::grpc::*` paths.
pub use crate::domain::run_state::{
    RUN_SILENT_AFTER_S, RUN_STATE_ENDED, RUN_STATE_INTERRUPTED, RUN_STATE_RUNNING,
    RUN_STATE_UNFINISHED, is_terminal, run_state,
};
use crate::kill::KillFiles;
use crate::ledger::{ServiceLedger, TeeLedger};
use crate::watch::{WatchGate, WatchRunner, subscribe_wakeups};

type RunStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;

/// Rows buffered for a slow listener before the run waits for it.
const EVENT_BUFFER: usize = 256;

#[derive(Clone)]
pub struct LoopEngineService {
    ledger: LedgerClient<Transport>,
    receipt: Option<ReceiptClient<Transport>>,
    kill: Arc<KillFiles>,
    active: Arc<Mutex<BTreeSet<String>>>,
}

pub fn outcome_to_pb(o: Outcome) -> pb::RunOutcome {
    pb::RunOutcome {
        status: o.status.as_str().to_string(),
        reason: o.reason.clone(),
        laps: o.laps,
        run_id: o.run_id,
        write_errors: o.write_errors,
        receipt_reason: String::new(),
        bound_reason: o.reason,
    }
}

impl LoopEngineService {
    /// `data_root` holds the kill files; None leaves only `SLM_LOOP_KILL`.
    pub fn new(ledger: LedgerClient<Transport>, data_root: Option<&Path>) -> Self {
        Self {
            ledger,
            receipt: None,
            kill: Arc::new(KillFiles::new(data_root)),
            active: Arc::default(),
        }
    }

    /// The receipt service the watcher's gate asks. Without one, every
    /// watcher lap is refused ("no registered job or execution receipt").
    pub fn with_receipt(mut self, receipt: ReceiptClient<Transport>) -> Self {
        self.receipt = Some(receipt);
        self
    }

    pub fn into_server(self) -> LoopEngineServer<Self> {
        LoopEngineServer::new(self)
    }

    /// Registers a run, drives `run` to its outcome on a task, then sends
    /// the outcome after the rows it streamed.
    fn spawn_run(
        &self,
        run_id: String,
        tx: mpsc::Sender<Result<pb::RunEvent, Status>>,
        rx: mpsc::Receiver<Result<pb::RunEvent, Status>>,
        run: impl Future<Output = pb::RunOutcome> + Send + 'static,
    ) -> RunStream {
        let kill = self.kill.clone();
        let active = self.active.clone();
        active.lock().unwrap().insert(run_id.clone());
        // The run keeps the caller's span, so its ledger and receipt calls
        // join the caller's trace.
        let run = tracing::Instrument::in_current_span(run);
        tokio::spawn(async move {
            let outcome = run.await;
            active.lock().unwrap().remove(&run_id);
            let _ = kill.clear(Some(&run_id));
            let _ = tx
                .send(Ok(pb::RunEvent {
                    event: Some(pb::run_event::Event::Outcome(outcome)),
                }))
                .await;
        });
        Box::pin(ReceiverStream::new(rx))
    }

    fn start_demo(&self, profile_id: String, spec: pb::DemoSpec) -> Result<RunStream, Status> {
        let bounds = Bounds::with_max_iterations(demo_iterations(spec.iterations))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let run_id = new_run_id(DEMO_NAME);
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let mut ledger = TeeLedger::new(
            ServiceLedger::start(self.ledger.clone(), profile_id, "slm-loop-demo".into()),
            tx.clone(),
        );
        let switch = self.kill.switch_for(&run_id);
        let id = run_id.clone();
        let run = async move {
            let outcome = run_bounded_loop(
                LoopSpec {
                    name: DEMO_NAME,
                    bounds: &bounds,
                    rung: Rung::L1,
                    run_id: Some(id),
                },
                &mut DemoRunner,
                &mut DemoGate,
                &mut ledger,
                None::<&mut NoApprover>,
                &switch,
                &SystemClock::new(),
            )
            .await;
            let mut outcome = outcome;
            outcome.write_errors.extend(ledger.inner.finish().await);
            outcome_to_pb(outcome)
        };
        Ok(self.spawn_run(run_id, tx, rx, run))
    }

    async fn start_watch(
        &self,
        profile_id: String,
        spec: pb::WatchSpec,
    ) -> Result<RunStream, Status> {
        let name = watch::validate_name(&spec.name).map_err(Status::invalid_argument)?;
        let query = watch::validate_query(&spec.gate_query).map_err(Status::invalid_argument)?;
        let limits = watch::limits(
            i64::from(spec.max_iterations),
            spec.max_wallclock_s,
            spec.poll_interval_s,
            spec.max_tokens,
            i64::from(spec.no_progress_window),
        );
        let bounds = Bounds::new(
            limits.max_iterations,
            limits.no_progress_window,
            limits.max_tokens,
            Some(limits.max_wallclock_s),
            None,
        )
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let agent_id = if spec.agent_id.trim().is_empty() {
            "mcp_client".to_string()
        } else {
            spec.agent_id.clone()
        };
        let run_id = new_run_id(&name);
        // Open the wake-up subscriptions before the first lap.
        let wake = Arc::new(Notify::new());
        let job_id = serde_json::from_str::<serde_json::Value>(&spec.contract_json)
            .ok()
            .and_then(|v| v.get("job_id").and_then(|j| j.as_str()).map(str::to_string))
            .unwrap_or_default();
        let mut ledger_client = self.ledger.clone();
        let mut receipt_client = self.receipt.clone();
        let subscriptions = subscribe_wakeups(
            &mut ledger_client,
            receipt_client.as_mut(),
            &profile_id,
            &job_id,
            wake.clone(),
        )
        .await;
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let mut ledger = TeeLedger::new(
            ServiceLedger::start(self.ledger.clone(), profile_id.clone(), agent_id.clone()),
            tx.clone(),
        );
        let mut runner = WatchRunner {
            wake,
            poll: Duration::from_secs_f64(limits.poll_interval_s),
        };
        let mut gate = WatchGate {
            ledger: self.ledger.clone(),
            receipt: self.receipt.clone(),
            profile_id,
            name: name.clone(),
            query,
            min_score: spec.gate_min_score,
            require_support: spec.require_support,
            contract_json: spec.contract_json,
            agent_id,
            started_at: slm_runtime::time::now_iso(),
            receipt_reason: String::new(),
        };
        let switch = self.kill.switch_for(&run_id);
        let id = run_id.clone();
        let run = async move {
            let outcome = run_bounded_loop(
                LoopSpec {
                    name: &name,
                    bounds: &bounds,
                    rung: Rung::L1,
                    run_id: Some(id),
                },
                &mut runner,
                &mut gate,
                &mut ledger,
                None::<&mut NoApprover>,
                &switch,
                &SystemClock::new(),
            )
            .await;
            for t in subscriptions {
                t.abort();
            }
            let mut outcome = outcome;
            outcome.write_errors.extend(ledger.inner.finish().await);
            let receipt_reason = gate.receipt_reason().to_string();
            let reason = watcher_reason(
                outcome.status == RunStatus::Halt,
                &outcome.reason,
                &receipt_reason,
                ledger.last_gate.as_ref().map(|(d, p)| (d.as_str(), *p)),
                &ledger.last_detail,
            );
            let mut pb = outcome_to_pb(outcome);
            pb.reason = reason;
            pb.receipt_reason = receipt_reason;
            pb
        };
        Ok(self.spawn_run(run_id, tx, rx, run))
    }
}

fn required(value: &str, what: &str) -> Result<String, Status> {
    let v = value.trim();
    if v.is_empty() {
        Err(Status::invalid_argument(format!("{what} is required")))
    } else {
        Ok(v.to_string())
    }
}

#[tonic::async_trait]
impl LoopEngine for LoopEngineService {
    type RunLoopStream = RunStream;

    async fn run_loop(
        &self,
        req: Request<pb::RunLoopRequest>,
    ) -> Result<Response<Self::RunLoopStream>, Status> {
        let r = req.into_inner();
        match r.kind {
            Some(pb::run_loop_request::Kind::Demo(spec)) => {
                Ok(Response::new(self.start_demo(r.profile_id, spec)?))
            }
            Some(pb::run_loop_request::Kind::Watch(spec)) => {
                Ok(Response::new(self.start_watch(r.profile_id, spec).await?))
            }
            None => Err(Status::invalid_argument(
                "a loop kind (demo or watch) is required",
            )),
        }
    }

    async fn history(
        &self,
        req: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        let r = req.into_inner();
        let name = required(&r.name, "name")?;
        let page = self
            .ledger
            .clone()
            .list_loop_runs(pb::ListLoopRunsRequest {
                profile_id: r.profile_id,
                name: name.clone(),
                limit: r.limit,
                cursor: r.cursor,
            })
            .await?
            .into_inner();
        let now = time::OffsetDateTime::now_utc();
        let active = self.active.lock().unwrap().clone();
        let runs = page
            .runs
            .into_iter()
            .map(|run| {
                let gate = (!run.gate_detail.is_empty())
                    .then_some((run.gate_detail.as_str(), run.gate_passed));
                let (ended, state) = run_state(
                    &run.r#final,
                    active.contains(&run.run_id),
                    &run.last_ts,
                    now,
                );
                pb::RunSummary {
                    ended,
                    state: state.into(),
                    reason: last_gate_reason(gate, &run.last_detail),
                    run_id: run.run_id,
                    laps: run.rows,
                    r#final: if run.r#final.is_empty() {
                        "unknown".into()
                    } else {
                        run.r#final
                    },
                    ts: run.last_ts,
                }
            })
            .collect();
        Ok(Response::new(pb::HistoryResponse {
            name,
            runs,
            next_cursor: page.next_cursor,
        }))
    }

    async fn show(
        &self,
        req: Request<pb::ShowRequest>,
    ) -> Result<Response<pb::ShowResponse>, Status> {
        let r = req.into_inner();
        let run_id = required(&r.run_id, "run_id")?;
        let laps = self
            .ledger
            .clone()
            .list_run_laps(pb::ListRunLapsRequest {
                profile_id: r.profile_id,
                run_id: run_id.clone(),
                limit: r.limit,
            })
            .await?
            .into_inner()
            .laps;
        let (ended, state) = match laps.last() {
            Some(last) => run_state(
                &last.decision,
                self.active.lock().unwrap().contains(&run_id),
                &last.ts,
                time::OffsetDateTime::now_utc(),
            ),
            // No rows: nothing is known about the run.
            None => (false, ""),
        };
        Ok(Response::new(pb::ShowResponse {
            run_id,
            laps,
            ended,
            state: state.into(),
        }))
    }

    async fn kill(
        &self,
        req: Request<pb::KillRequest>,
    ) -> Result<Response<pb::KillResponse>, Status> {
        let r = req.into_inner();
        let run = Some(r.run_id.trim()).filter(|s| !s.is_empty());
        let io = |e: std::io::Error| Status::failed_precondition(format!("kill switch: {e}"));
        if r.clear {
            self.kill.clear(run).map_err(io)?;
        } else {
            self.kill.engage(run).map_err(io)?;
        }
        let active = self.active.lock().unwrap();
        let run_ids = match run {
            _ if r.clear => Vec::new(),
            None => active.iter().cloned().collect(),
            Some(id) => active.iter().filter(|a| *a == id).cloned().collect(),
        };
        Ok(Response::new(pb::KillResponse {
            engaged: !r.clear,
            run_ids,
        }))
    }
}
