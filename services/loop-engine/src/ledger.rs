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

/// Rows queued before `append` waits for the writer.
const QUEUE: usize = 4096;
/// Rows per AppendLaps call (one transaction).
const BATCH: usize = 256;

/// Writes rows to the ledger service behind the engine: `append` queues the
/// row and returns, and a writer task sends whatever has queued up as one
/// `AppendLaps` batch — one transaction, one WAL sync, however many laps.
/// So a lap costs the engine a queue push, and the ledger commits in groups
/// as fast as the disk allows. `finish` waits until every row is written and
/// returns the failures (`lap <n>: <error>`) to report with the outcome:
/// still fail-open, never lost silently.
pub struct ServiceLedger {
    queue: Option<mpsc::Sender<LedgerRow>>,
    writer: Option<tokio::task::JoinHandle<Vec<String>>>,
}

impl ServiceLedger {
    pub fn start(client: LedgerClient<Transport>, profile_id: String, agent_id: String) -> Self {
        let (queue, rows) = mpsc::channel(QUEUE);
        let writer = tokio::spawn(tracing::Instrument::in_current_span(write_behind(
            client, profile_id, agent_id, rows,
        )));
        Self {
            queue: Some(queue),
            writer: Some(writer),
        }
    }

    /// Waits for every queued row; returns the write failures.
    pub async fn finish(&mut self) -> Vec<String> {
        self.queue.take();
        match self.writer.take() {
            Some(w) => w
                .await
                .unwrap_or_else(|e| vec![format!("ledger writer failed: {e}")]),
            None => Vec::new(),
        }
    }
}

async fn write_behind(
    mut client: LedgerClient<Transport>,
    profile_id: String,
    agent_id: String,
    mut rows: mpsc::Receiver<LedgerRow>,
) -> Vec<String> {
    let mut errors = Vec::new();
    while let Some(first) = rows.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rows.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let laps = batch
            .iter()
            .map(|row| pb::AppendLapRequest {
                profile_id: profile_id.clone(),
                entry: Some(row_to_pb(row)),
                agent_id: agent_id.clone(),
                gate_row: is_gate_row(&row.detail),
            })
            .collect();
        match client.append_laps(pb::AppendLapsRequest { laps }).await {
            Ok(r) => {
                for (row, res) in batch.iter().zip(r.into_inner().results) {
                    if !res.error.is_empty() {
                        errors.push(format!("lap {}: {}", row.lap, res.error));
                    }
                }
            }
            Err(s) => {
                for row in &batch {
                    errors.push(format!("lap {}: {}", row.lap, s.message()));
                }
            }
        }
    }
    errors
}

impl Ledger for ServiceLedger {
    async fn append(&mut self, row: &LedgerRow) -> Result<(), String> {
        match &self.queue {
            Some(q) => q
                .send(row.clone())
                .await
                .map_err(|_| "the ledger writer has stopped".to_string()),
            None => Err("the ledger writer has finished".into()),
        }
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
