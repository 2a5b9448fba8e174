//! The `slm.v1.Receipt` gRPC server. Operator methods (register, run) demand
//! the operator credential in the `x-slm-operator-token` metadata; the gate
//! and the read methods do not.

use std::pin::Pin;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{BroadcastStream, ReceiverStream};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use slm_proto::v1 as pb;
use slm_proto::v1::receipt_server::{Receipt as ReceiptRpc, ReceiptServer};

use crate::checks::{CheckError, Checks, Registration, RunResult};
use crate::domain::evidence::{Receipt, evidence_object};
use crate::domain::gate::GateRequest;
use crate::domain::job::Job;

pub const OPERATOR_HEADER: &str = "x-slm-operator-token";
const DEFAULT_PROFILE: &str = "default";

#[derive(Clone)]
pub struct ReceiptService {
    checks: Checks,
    operator_token: String,
}

fn status(e: CheckError) -> Status {
    match e {
        CheckError::Refused(m) => Status::failed_precondition(m),
        CheckError::NotFound(m) => Status::not_found(m),
        CheckError::Store(e) => Status::unavailable(e.to_string()),
        CheckError::Internal(m) => Status::internal(m),
    }
}

fn profile(p: &str) -> String {
    let p = p.trim();
    if p.is_empty() {
        DEFAULT_PROFILE.into()
    } else {
        p.into()
    }
}

/// Constant-time equality of two tokens.
fn same_token(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub fn job_to_pb(j: &Job, now_us: i64, newest_seq: Option<i64>) -> pb::Job {
    pb::Job {
        job_id: j.job_id.clone(),
        profile_id: j.profile_id.clone(),
        task_id: j.task_id.clone(),
        watcher_name: j.watcher_name.clone(),
        producer: j.producer.clone(),
        command_digest: j.command_digest.clone(),
        argv: j.argv.clone(),
        cwd: j.cwd.clone(),
        revision_digest: j.revision_digest.clone(),
        registered_at: j.registered_at.clone(),
        expires_at: j.expires_at.clone(),
        allow_prestart_evidence: j.allow_prestart_evidence,
        artifact_paths: j.artifact_paths.clone(),
        definition_digest: j.definition_digest.clone(),
        current: newest_seq == Some(j.seq) && now_us < j.expires_us,
    }
}

pub fn receipt_to_pb(r: &Receipt) -> pb::ExecutionReceipt {
    let ev = evidence_object(r).unwrap_or_default();
    let s = |k: &str| ev.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let adm = ev.get("admission").and_then(|a| a.as_object());
    let a = |k: &str| {
        adm.and_then(|m| m.get(k))
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string()
    };
    pb::ExecutionReceipt {
        receipt_id: r.receipt_id.clone(),
        job_id: r.run_id.clone(),
        verdict: r.verdict.clone(),
        exit_code: i32::try_from(r.exit_code).unwrap_or(i32::MIN),
        stop_reason: s("stop_reason"),
        containment: s("containment"),
        produced_at: r.produced_at.clone(),
        revision_digest: a("revision_digest"),
        definition_digest: a("definition_digest"),
        stdout_sha256: s("stdout_sha256"),
        stderr_sha256: s("stderr_sha256"),
        output_sha256: s("output_sha256"),
        sandbox: s("sandbox"),
    }
}

fn now_us() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000) as i64
}

impl ReceiptService {
    /// `operator_token` is the credential operator calls must present.
    pub fn new(checks: Checks, operator_token: String) -> Self {
        Self {
            checks,
            operator_token,
        }
    }

    pub fn into_server(self) -> ReceiptServer<Self> {
        ReceiptServer::new(self)
    }

    pub fn checks(&self) -> &Checks {
        &self.checks
    }

    fn require_operator(&self, md: &MetadataMap) -> Result<(), Status> {
        let given = md
            .get(OPERATOR_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if given.is_empty() || !same_token(given.as_bytes(), self.operator_token.as_bytes()) {
            return Err(Status::permission_denied(
                "registering and running checks needs the operator credential (SLM_OPERATOR_TOKEN_FILE or SLM_OPERATOR_TOKEN)",
            ));
        }
        Ok(())
    }

    async fn job_pb(&self, j: &Job) -> pb::Job {
        let newest = self
            .checks
            .store()
            .newest_job(&j.profile_id, &j.watcher_name)
            .await
            .ok()
            .flatten()
            .map(|n| n.seq);
        job_to_pb(j, now_us(), newest)
    }
}

type RunStream = Pin<Box<dyn Stream<Item = Result<pb::RunCheckEvent, Status>> + Send>>;
type ReceiptStream = Pin<Box<dyn Stream<Item = Result<pb::ReceiptEvent, Status>> + Send>>;

#[tonic::async_trait]
impl ReceiptRpc for ReceiptService {
    async fn register_job(
        &self,
        req: Request<pb::RegisterJobRequest>,
    ) -> Result<Response<pb::Job>, Status> {
        self.require_operator(req.metadata())?;
        let r = req.into_inner();
        let job = self
            .checks
            .register(Registration {
                profile_id: profile(&r.profile_id),
                task_id: r.task_id,
                watcher_name: r.watcher_name,
                producer: r.producer,
                argv: r.argv,
                cwd: r.cwd,
                artifact_paths: r.artifact_paths,
                check_paths: r.check_paths,
                allow_prestart_evidence: r.allow_prestart_evidence,
                ttl_seconds: r.ttl_seconds,
            })
            .await
            .map_err(status)?;
        Ok(Response::new(self.job_pb(&job).await))
    }

    type RunCheckStream = RunStream;

    async fn run_check(
        &self,
        req: Request<pb::RunCheckRequest>,
    ) -> Result<Response<Self::RunCheckStream>, Status> {
        self.require_operator(req.metadata())?;
        let r = req.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let checks = self.checks.clone();
        tokio::spawn(async move {
            let progress_tx = tx.clone();
            let progress = move |m: String| {
                let _ = progress_tx.try_send(Ok(pb::RunCheckEvent {
                    event: Some(pb::run_check_event::Event::Progress(m)),
                }));
            };
            let result = checks.run(&r.job_id, r.timeout_s, progress).await;
            let ev = match result {
                Ok(RunResult { receipt, .. }) => Ok(pb::RunCheckEvent {
                    event: Some(pb::run_check_event::Event::Receipt(receipt_to_pb(&receipt))),
                }),
                Err(e) => Err(status(e)),
            };
            let _ = tx.send(ev).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_job(&self, req: Request<pb::GetJobRequest>) -> Result<Response<pb::Job>, Status> {
        let id = req.into_inner().job_id;
        let job = self
            .checks
            .store()
            .job(&id)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?
            .ok_or_else(|| Status::not_found(crate::domain::msg::NO_SUCH_JOB))?;
        Ok(Response::new(self.job_pb(&job).await))
    }

    async fn list_jobs(
        &self,
        req: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsResponse>, Status> {
        let r = req.into_inner();
        let limit = if r.limit == 0 { 50 } else { r.limit.min(500) };
        let store = self.checks.store();
        let jobs = store
            .list_jobs(&profile(&r.profile_id), limit)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut out = Vec::with_capacity(jobs.len());
        for j in &jobs {
            let latest = store
                .newest_receipt(j)
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            out.push(pb::JobStatus {
                job: Some(self.job_pb(j).await),
                latest: latest.as_ref().map(receipt_to_pb),
            });
        }
        Ok(Response::new(pb::ListJobsResponse { jobs: out }))
    }

    async fn gate_status(
        &self,
        req: Request<pb::GateStatusRequest>,
    ) -> Result<Response<pb::GateStatusResponse>, Status> {
        let r = req.into_inner();
        let started = if r.watcher_started_at.trim().is_empty() {
            None
        } else {
            let t = slm_runtime::time::parse_iso(&r.watcher_started_at).ok_or_else(|| {
                Status::invalid_argument("watcher_started_at is not an ISO-8601 time")
            })?;
            Some((t.unix_timestamp_nanos() / 1000) as i64)
        };
        let p = profile(&r.profile_id);
        let (passed, reason) = self
            .checks
            .gate(&GateRequest {
                profile_id: &p,
                contract_json: &r.contract_json,
                watcher_name: r.watcher_name.trim(),
                running_agent: &r.running_agent,
                watcher_started_us: started,
            })
            .await;
        Ok(Response::new(pb::GateStatusResponse { passed, reason }))
    }

    async fn erase_profile(
        &self,
        req: Request<pb::EraseReceiptsRequest>,
    ) -> Result<Response<pb::EraseReceiptsResponse>, Status> {
        self.require_operator(req.metadata())?;
        let p = req.into_inner().profile_id;
        if p.trim().is_empty() {
            return Err(Status::invalid_argument("profile_id is required"));
        }
        let (jobs, receipts) = self
            .checks
            .store()
            .erase_profile(p.trim(), &slm_runtime::time::now_iso())
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(pb::EraseReceiptsResponse { jobs, receipts }))
    }

    type WatchReceiptsStream = ReceiptStream;

    async fn watch_receipts(
        &self,
        req: Request<pb::WatchReceiptsRequest>,
    ) -> Result<Response<Self::WatchReceiptsStream>, Status> {
        let r = req.into_inner();
        let p = profile(&r.profile_id);
        let job_id = r.job_id;
        let stream =
            BroadcastStream::new(self.checks.subscribe().await).filter_map(move |ev| match ev {
                Ok(e) if e.profile_id == p && (job_id.is_empty() || e.job_id == job_id) => {
                    Some(Ok(pb::ReceiptEvent {
                        job_id: e.job_id,
                        receipt_id: e.receipt_id,
                        verdict: e.verdict,
                    }))
                }
                Ok(_) => None,
                Err(_) => Some(Err(Status::data_loss(
                    "receipt events were dropped; re-check the gate",
                ))),
            });
        Ok(Response::new(Box::pin(stream)))
    }
}
