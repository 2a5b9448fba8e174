//! The dashboard's data: one place that asks the services over gRPC and turns
//! the answers into the view models both the JSON API and the HTML pages use.

use serde::Serialize;
use slm_loop_engine::domain::stop_reasons::{is_gate_row, last_gate_reason};
use slm_proto::v1 as pb;
use time::OffsetDateTime;

use crate::DashboardBackends;

/// Default and maximum page sizes (spec DASH-05).
pub const DEFAULT_LIMIT: u32 = 20;
pub const MAX_LIMIT: u32 = 100;

/// A run whose newest row is `continue` and older than this is not shown as
/// running: the watcher's absolute wall-clock ceiling is 600 s, so such a
/// run was interrupted before it wrote a terminal row.
pub const STALE_AFTER_S: i64 = 900;

/// `limit`: missing or 0 → 20, above 100 → 100.
pub fn clamp_limit(limit: Option<u32>) -> u32 {
    match limit {
        None | Some(0) => DEFAULT_LIMIT,
        Some(n) => n.min(MAX_LIMIT),
    }
}

/// A failure to read from a service, shown to the user (escaped).
#[derive(Debug, Clone, Serialize)]
pub struct ServiceError {
    pub service: &'static str,
    pub code: String,
    pub message: String,
    #[serde(skip)]
    pub not_found: bool,
    #[serde(skip)]
    pub bad_request: bool,
}

impl ServiceError {
    pub fn grpc(service: &'static str, s: tonic::Status) -> Self {
        Self {
            service,
            code: format!("{:?}", s.code()),
            message: s.message().to_string(),
            not_found: s.code() == tonic::Code::NotFound,
            bad_request: s.code() == tonic::Code::InvalidArgument,
        }
    }

    pub fn not_found(service: &'static str, message: impl Into<String>) -> Self {
        Self {
            service,
            code: "NotFound".into(),
            message: message.into(),
            not_found: true,
            bad_request: false,
        }
    }
}

/// The terminal status a decision stands for (seed: the five statuses).
/// `continue` is not terminal: RUNNING while recent, else UNKNOWN.
pub fn status_of(final_decision: &str, last_ts: &str, now: OffsetDateTime) -> &'static str {
    match final_decision {
        "done" => "DONE",
        "halt" => "HALT",
        "pause" => "PAUSE",
        "killed" => "KILLED",
        "error" => "ERROR",
        "continue" => match slm_runtime::time::parse_iso(last_ts) {
            Some(t) if (now - t).whole_seconds() <= STALE_AFTER_S => "RUNNING",
            _ => "UNKNOWN",
        },
        _ => "UNKNOWN",
    }
}

/// True for the five terminal statuses.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "DONE" | "HALT" | "PAUSE" | "KILLED" | "ERROR")
}

#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub run_id: String,
    pub name: String,
    pub status: &'static str,
    /// The engine's history reason (`LoopEngine.History`): the newest gate
    /// row's receipt reason, else the newest row's detail.
    pub reason: String,
    /// Ledger rows recorded.
    pub laps: u32,
    #[serde(rename = "final")]
    pub final_decision: String,
    pub started_ts: String,
    pub last_ts: String,
}

impl RunRow {
    pub fn from_pb(r: pb::LoopRun, now: OffsetDateTime) -> Self {
        let gate = (!r.gate_detail.is_empty()).then_some((r.gate_detail.as_str(), r.gate_passed));
        let reason = last_gate_reason(gate, &r.last_detail);
        let final_decision = if r.r#final.is_empty() {
            "unknown".to_string()
        } else {
            r.r#final
        };
        Self {
            status: status_of(&final_decision, &r.last_ts, now),
            reason,
            run_id: r.run_id,
            name: r.name,
            laps: r.rows,
            final_decision,
            started_ts: r.started_ts,
            last_ts: r.last_ts,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RunsPage {
    pub limit: u32,
    pub runs: Vec<RunRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LapRow {
    pub lap: u32,
    pub ts: String,
    pub decision: String,
    /// The independent gate's verdict on this lap.
    pub gate_passed: bool,
    pub detail: String,
    /// What the agent said; recorded for audit and never read by a decision.
    pub agent_claimed_done: bool,
    pub agent_claim: &'static str,
    /// Budget snapshot when the row was written.
    pub tokens: i64,
    pub wallclock_s: f64,
}

impl LapRow {
    fn from_pb(l: &pb::LapEntry) -> Self {
        let (tokens, wallclock_s) = l
            .budget
            .as_ref()
            .map_or((0, 0.0), |b| (b.tokens, b.wallclock_s));
        Self {
            lap: l.lap,
            ts: l.ts.clone(),
            decision: l.decision.clone(),
            gate_passed: l.passed,
            detail: l.detail.clone(),
            agent_claimed_done: l.agent_claimed_done,
            agent_claim: CLAIM_LABEL,
            tokens,
            wallclock_s,
        }
    }
}

/// How an agent's claim is labelled wherever it is shown.
pub const CLAIM_LABEL: &str = "claimed, not trusted";

#[derive(Debug, Clone, Serialize)]
pub struct RunDetail {
    pub run_id: String,
    pub name: String,
    pub status: &'static str,
    pub reason: String,
    pub terminal: bool,
    pub laps: Vec<LapRow>,
}

impl RunDetail {
    pub fn from_laps(run_id: String, laps: &[pb::LapEntry], now: OffsetDateTime) -> Self {
        let last = laps.last();
        let newest_gate = laps
            .iter()
            .rev()
            .find(|l| is_gate_row(&l.detail))
            .map(|l| (l.detail.as_str(), l.passed));
        let reason = last_gate_reason(newest_gate, last.map_or("", |l| l.detail.as_str()));
        let status = status_of(
            last.map_or("", |l| l.decision.as_str()),
            last.map_or("", |l| l.ts.as_str()),
            now,
        );
        Self {
            run_id,
            name: laps.first().map(|l| l.name.clone()).unwrap_or_default(),
            status,
            reason,
            terminal: is_terminal(status),
            laps: laps.iter().map(LapRow::from_pb).collect(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckRow {
    pub job_id: String,
    pub task_id: String,
    pub watcher: String,
    pub producer: String,
    pub registered_at: String,
    pub expires_at: String,
    pub expired: bool,
    pub current: bool,
    /// PASS | FAIL | … ; empty when no receipt was recorded.
    pub latest_verdict: String,
    pub latest_reason: String,
    pub containment: String,
    /// The filesystem sandbox of the latest run (`landlock-v<abi>`, `none`).
    pub sandbox: String,
    pub latest_at: String,
}

impl CheckRow {
    fn from_pb(s: pb::JobStatus, now: OffsetDateTime) -> Option<Self> {
        let job = s.job?;
        let latest = s.latest.unwrap_or_default();
        let expired = slm_runtime::time::parse_iso(&job.expires_at).is_some_and(|t| t <= now);
        Some(Self {
            job_id: job.job_id,
            task_id: job.task_id,
            watcher: job.watcher_name,
            producer: job.producer,
            registered_at: job.registered_at,
            expires_at: job.expires_at,
            expired,
            current: job.current,
            latest_verdict: latest.verdict,
            latest_reason: latest.stop_reason,
            containment: latest.containment,
            sandbox: latest.sandbox,
            latest_at: latest.produced_at,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ChecksPage {
    /// False when no receipt service is connected.
    pub available: bool,
    pub jobs: Vec<CheckRow>,
}

impl DashboardBackends {
    pub async fn recent_runs(&self, limit: u32) -> Result<RunsPage, ServiceError> {
        let page = self
            .ledger
            .clone()
            .list_recent_runs(pb::ListRecentRunsRequest {
                profile_id: String::new(),
                limit,
                cursor: String::new(),
            })
            .await
            .map_err(|s| ServiceError::grpc("ledger", s))?
            .into_inner();
        let now = OffsetDateTime::now_utc();
        Ok(RunsPage {
            limit,
            runs: page
                .runs
                .into_iter()
                .take(limit as usize)
                .map(|r| RunRow::from_pb(r, now))
                .collect(),
        })
    }

    pub async fn run(&self, run_id: &str) -> Result<RunDetail, ServiceError> {
        let shown = self
            .loop_engine
            .clone()
            .show(pb::ShowRequest {
                profile_id: String::new(),
                run_id: run_id.to_string(),
                limit: 0,
            })
            .await
            .map_err(|s| ServiceError::grpc("loop engine", s))?
            .into_inner();
        if shown.laps.is_empty() {
            return Err(ServiceError::not_found("loop engine", "no such run"));
        }
        Ok(RunDetail::from_laps(
            shown.run_id,
            &shown.laps,
            OffsetDateTime::now_utc(),
        ))
    }

    pub async fn checks(&self, limit: u32) -> Result<ChecksPage, ServiceError> {
        let Some(receipt) = &self.receipt else {
            return Ok(ChecksPage {
                available: false,
                jobs: Vec::new(),
            });
        };
        let listed = receipt
            .clone()
            .list_jobs(pb::ListJobsRequest {
                profile_id: String::new(),
                limit,
            })
            .await
            .map_err(|s| ServiceError::grpc("receipt", s))?
            .into_inner();
        let now = OffsetDateTime::now_utc();
        Ok(ChecksPage {
            available: true,
            jobs: listed
                .jobs
                .into_iter()
                .filter_map(|j| CheckRow::from_pb(j, now))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_clamp() {
        assert_eq!(clamp_limit(None), 20);
        assert_eq!(clamp_limit(Some(0)), 20);
        assert_eq!(clamp_limit(Some(1)), 1);
        assert_eq!(clamp_limit(Some(100)), 100);
        assert_eq!(clamp_limit(Some(500)), 100);
    }

    #[test]
    fn decisions_map_to_the_five_statuses() {
        let now = OffsetDateTime::now_utc();
        let fresh = slm_runtime::time::format_iso(now);
        for (d, s) in [
            ("done", "DONE"),
            ("halt", "HALT"),
            ("pause", "PAUSE"),
            ("killed", "KILLED"),
            ("error", "ERROR"),
            ("continue", "RUNNING"),
            ("", "UNKNOWN"),
            ("bogus", "UNKNOWN"),
        ] {
            assert_eq!(status_of(d, &fresh, now), s, "{d}");
        }
        let old = slm_runtime::time::format_iso(now - time::Duration::hours(1));
        assert_eq!(status_of("continue", &old, now), "UNKNOWN");
        assert_eq!(status_of("continue", "garbage", now), "UNKNOWN");
    }
}
