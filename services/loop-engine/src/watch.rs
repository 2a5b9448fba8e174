//! The watcher behind `slm_loop_run`: a loop whose runner waits and whose
//! gate asks two independent things each lap — does recall find an external
//! locator, and does the receipt service hold a valid receipt from the
//! registered job. It wakes on events (a new memory, a new receipt) and polls
//! only as a fallback, so DONE follows a receipt by milliseconds.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;

use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_runtime::Transport;

use crate::domain::stop_reasons::NO_RECEIPT_EXAMINED;
use crate::domain::watch::{GATE_LIMIT, RecallView, detail, lap_passes};
use crate::domain::{Gate, LapResult, Runner, StepError, Verdict};

/// The tag every lap memory carries.
const LAP_TAG: &str = "slm-loop";
/// Backoff of the recall retries: 50, 100, 200, 400 ms (750 ms at most).
const RECALL_RETRY_FIRST: Duration = Duration::from_millis(50);
const RECALL_RETRY_LAST: Duration = Duration::from_millis(400);
/// The receipt reason when the receipt service cannot be asked.
const RECEIPT_UNREACHABLE: &str = "no registered job or execution receipt";

/// Waits before every lap but the first: until an event or the poll interval.
pub struct WatchRunner {
    pub wake: Arc<Notify>,
    pub poll: Duration,
}

impl Runner for WatchRunner {
    async fn run(&mut self, lap: u32) -> Result<LapResult, StepError> {
        if lap > 1 {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.poll) => {}
            }
        }
        Ok(LapResult::default())
    }
}

/// Recall plus the receipt gate, each lap.
pub struct WatchGate {
    pub ledger: LedgerClient<Transport>,
    pub receipt: Option<ReceiptClient<Transport>>,
    pub profile_id: String,
    pub name: String,
    pub query: String,
    pub min_score: f64,
    pub require_support: bool,
    pub contract_json: String,
    pub agent_id: String,
    pub started_at: String,
    /// The latest receipt reason, for the result.
    pub receipt_reason: String,
}

impl WatchGate {
    async fn receipt_status(&mut self) -> (bool, String) {
        let Some(client) = self.receipt.as_mut() else {
            return (false, RECEIPT_UNREACHABLE.into());
        };
        match client
            .gate_status(pb::GateStatusRequest {
                profile_id: self.profile_id.clone(),
                contract_json: self.contract_json.clone(),
                watcher_name: self.name.clone(),
                running_agent: self.agent_id.clone(),
                watcher_started_at: self.started_at.clone(),
            })
            .await
        {
            Ok(r) => {
                let r = r.into_inner();
                (r.passed, r.reason)
            }
            Err(_) => (false, RECEIPT_UNREACHABLE.into()),
        }
    }

    pub fn receipt_reason(&self) -> &str {
        if self.receipt_reason.is_empty() {
            NO_RECEIPT_EXAMINED
        } else {
            &self.receipt_reason
        }
    }
}

impl Gate for WatchGate {
    async fn check(&mut self, _lap: u32) -> Result<Verdict, StepError> {
        let request = pb::RecallRequest {
            profile_id: self.profile_id.clone(),
            query: self.query.clone(),
            limit: GATE_LIMIT,
            tag: String::new(),
            evidence_floor: None,
            exclude_loop_rows: true,
        };
        // GAP-33: a busy or restarting ledger answers UNAVAILABLE; retry a
        // few times within the lap (well under a second in all) before the
        // run ends in ERROR. Other refusals are final at once.
        let mut backoff = RECALL_RETRY_FIRST;
        let recall = loop {
            match self.ledger.recall(request.clone()).await {
                Ok(r) => break r.into_inner(),
                Err(s) if s.code() == tonic::Code::Unavailable && backoff <= RECALL_RETRY_LAST => {
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                Err(s) => {
                    return Err(StepError::new(
                        "RuntimeError",
                        format!("owned SLM reader rejected recall: {}", s.message()),
                    ));
                }
            }
        };
        let top = recall.results.iter().map(|h| h.score).fold(0.0, f64::max);
        let view = RecallView::new(recall.results.len(), top, recall.no_confident_match);
        let (independent, reason) = self.receipt_status().await;
        self.receipt_reason = reason;
        let passed = lap_passes(&view, self.min_score, self.require_support, independent);
        Ok(Verdict::new(
            passed,
            detail(&self.query, &view, independent, &self.receipt_reason),
        ))
    }
}

/// Wakes the runner on every new memory of the profile and every new receipt
/// of the job. The subscriptions are open when this returns, so nothing
/// written after the watcher starts is missed.
pub async fn subscribe_wakeups(
    ledger: &mut LedgerClient<Transport>,
    receipt: Option<&mut ReceiptClient<Transport>>,
    profile_id: &str,
    job_id: &str,
    wake: Arc<Notify>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Ok(s) = ledger
        .watch_memories(pb::WatchMemoriesRequest {
            profile_id: profile_id.into(),
            tag: String::new(),
        })
        .await
    {
        let mut s = s.into_inner();
        let w = wake.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(ev) = s.next().await {
                // Lap rows (this watcher's own included) are never
                // locators: waking on them would only spin.
                let is_lap = ev
                    .as_ref()
                    .ok()
                    .and_then(|e| e.memory.as_ref())
                    .is_some_and(|m| m.tags.iter().any(|t| t == LAP_TAG));
                if !is_lap {
                    w.notify_one();
                }
            }
        }));
    }
    if let Some(client) = receipt
        && let Ok(s) = client
            .watch_receipts(pb::WatchReceiptsRequest {
                profile_id: profile_id.into(),
                job_id: job_id.into(),
            })
            .await
    {
        let mut s = s.into_inner();
        tasks.push(tokio::spawn(async move {
            while s.next().await.is_some() {
                wake.notify_one();
            }
        }));
    }
    tasks
}
