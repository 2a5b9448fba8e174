//! The engine's ledger port over the ledger service: every row becomes a
//! memory through `AppendLap`. A failure is returned to the engine, which
//! counts it and carries on (fail-open).

use tokio::sync::mpsc;

use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_runtime::Transport;

use crate::domain::stop_reasons::is_gate_row;
use crate::domain::{Ledger, LedgerRow};

pub fn row_to_pb(row: &LedgerRow) -> pb::LapEntry {
    pb::LapEntry {
        run_id: row.run_id.clone(),
        name: row.name.clone(),
        lap: row.lap,
        ts: row.ts.clone(),
        decision: row.decision.as_str().to_string(),
        passed: row.passed,
        detail: row.detail.clone(),
        agent_claimed_done: row.agent_claimed_done,
        runner_log: row.runner_log.clone(),
        budget: Some(pb::Budget {
            tokens: row.budget.tokens,
            wallclock_s: row.budget.wallclock_s,
        }),
    }
}

/// Writes rows to the ledger service in one profile.
pub struct ServiceLedger {
    pub client: LedgerClient<Transport>,
    pub profile_id: String,
    pub agent_id: String,
}

impl Ledger for ServiceLedger {
    async fn append(&mut self, row: &LedgerRow) -> Result<(), String> {
        self.client
            .append_lap(pb::AppendLapRequest {
                profile_id: self.profile_id.clone(),
                entry: Some(row_to_pb(row)),
                agent_id: self.agent_id.clone(),
                gate_row: is_gate_row(&row.detail),
            })
            .await
            .map(|_| ())
            .map_err(|s| s.message().to_string())
    }
}

/// Passes every row to a live listener as well (the RunLoop stream), whether
/// or not the durable write succeeded, and remembers what explains the end.
pub struct TeeLedger<L> {
    pub inner: L,
    pub events: mpsc::Sender<Result<pb::RunEvent, tonic::Status>>,
    /// The newest row's detail.
    pub last_detail: String,
    /// The newest gate row's detail and pass flag.
    pub last_gate: Option<(String, bool)>,
}

impl<L> TeeLedger<L> {
    pub fn new(inner: L, events: mpsc::Sender<Result<pb::RunEvent, tonic::Status>>) -> Self {
        Self {
            inner,
            events,
            last_detail: String::new(),
            last_gate: None,
        }
    }
}

impl<L: Ledger> Ledger for TeeLedger<L> {
    async fn append(&mut self, row: &LedgerRow) -> Result<(), String> {
        self.last_detail = row.detail.clone();
        if is_gate_row(&row.detail) {
            self.last_gate = Some((row.detail.clone(), row.passed));
        }
        let result = self.inner.append(row).await;
        // A listener that went away does not stop the run.
        let _ = self
            .events
            .send(Ok(pb::RunEvent {
                event: Some(pb::run_event::Event::Lap(row_to_pb(row))),
            }))
            .await;
        result
    }
}
