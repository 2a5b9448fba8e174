//! The `slm.v1.Bridge` gRPC server.

use tonic::{Request, Response, Status};

use slm_proto::v1 as pb;
use slm_proto::v1::bridge_server::{Bridge as BridgeRpc, BridgeServer};

use crate::bridge::{Bridge, Outcome};
use crate::domain::{V1_CONTRACT, V2_CONTRACT, is_safe_id};

pub const DEFAULT_PROFILE: &str = "default";
const DEFAULT_LIST: u32 = 20;
const MAX_LIST: u32 = 500;
pub const SOURCE: &str = "learning.db:M041_external_evidence_receipts";

#[derive(Clone)]
pub struct BridgeService {
    bridge: Bridge,
}

impl BridgeService {
    pub fn new(bridge: Bridge) -> Self {
        Self { bridge }
    }

    pub fn into_server(self) -> BridgeServer<Self> {
        BridgeServer::new(self)
    }

    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }
}

fn profile(raw: &str) -> Result<String, Status> {
    let p = raw.trim();
    if p.is_empty() {
        return Ok(DEFAULT_PROFILE.into());
    }
    if !is_safe_id(p, false) {
        return Err(Status::invalid_argument(
            "profile_id must be a safe identifier",
        ));
    }
    Ok(p.to_string())
}

fn to_pb(o: Outcome) -> pb::ObserveResponse {
    pb::ObserveResponse {
        success: o.success,
        durable: o.durable,
        created: o.created,
        retryable: o.retryable,
        error: o.error.unwrap_or_default(),
        observed: o.observed,
        control_plane: o.control_plane.to_string(),
    }
}

/// A bad profile becomes the failure-before-write shape, like any refusal.
fn refused(e: Status) -> pb::ObserveResponse {
    pb::ObserveResponse {
        error: e.message().to_string(),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl BridgeRpc for BridgeService {
    async fn status(
        &self,
        _req: Request<pb::BridgeStatusRequest>,
    ) -> Result<Response<pb::BridgeStatusResponse>, Status> {
        let p = self.bridge.probe().await;
        let observations = self
            .bridge
            .store()
            .evidence_counts(DEFAULT_PROFILE)
            .await
            .map(|c| c.receipts_total.max(0) as u64)
            .unwrap_or(0);
        Ok(Response::new(pb::BridgeStatusResponse {
            state: match p.installed {
                Some(true) => "installed",
                Some(false) => "not installed",
                None => "unknown",
            }
            .into(),
            version: p.version,
            reason: p.reason,
            contracts: vec![V1_CONTRACT.into(), V2_CONTRACT.into()],
            observations,
            probe_failed: p.installed.is_none(),
        }))
    }

    async fn observe_evidence(
        &self,
        req: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::ObserveResponse>, Status> {
        let r = req.into_inner();
        Ok(Response::new(match profile(&r.profile_id) {
            Ok(p) => to_pb(self.bridge.observe_evidence(&p, &r.workspace).await),
            Err(e) => refused(e),
        }))
    }

    async fn observe_execution_learning(
        &self,
        req: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::ObserveResponse>, Status> {
        let r = req.into_inner();
        Ok(Response::new(match profile(&r.profile_id) {
            Ok(p) => to_pb(
                self.bridge
                    .observe_execution_learning(&p, &r.workspace)
                    .await,
            ),
            Err(e) => refused(e),
        }))
    }

    async fn erase_profile(
        &self,
        req: Request<pb::ProfileErasure>,
    ) -> Result<Response<pb::ProfileErasureResponse>, Status> {
        let p = profile(&req.into_inner().profile_id)?;
        self.bridge
            .store()
            .erase_profile(&p)
            .await
            .map_err(|e| Status::unavailable(e.message))?;
        Ok(Response::new(pb::ProfileErasureResponse {}))
    }

    async fn reopen_profile(
        &self,
        req: Request<pb::ProfileErasure>,
    ) -> Result<Response<pb::ProfileErasureResponse>, Status> {
        let p = profile(&req.into_inner().profile_id)?;
        self.bridge
            .store()
            .reopen_profile(&p)
            .await
            .map_err(|e| Status::unavailable(e.message))?;
        Ok(Response::new(pb::ProfileErasureResponse {}))
    }

    async fn list_observations(
        &self,
        req: Request<pb::ListObservationsRequest>,
    ) -> Result<Response<pb::ListObservationsResponse>, Status> {
        let r = req.into_inner();
        let p = profile(&r.profile_id)?;
        let limit = if r.limit == 0 {
            DEFAULT_LIST
        } else {
            r.limit.min(MAX_LIST)
        };
        let store = self.bridge.store();
        let (counts, rows) = match (
            store.evidence_counts(&p).await,
            store.list_v1(&p, limit).await,
        ) {
            (Ok(c), Ok(rows)) => (c, rows),
            // A missing or unreadable table is a normal, reported state.
            _ => {
                return Ok(Response::new(pb::ListObservationsResponse {
                    availability: "unavailable".into(),
                    source: SOURCE.into(),
                    ..Default::default()
                }));
            }
        };
        let learning = store.learning_counts(&p).await.unwrap_or_default();
        let u = |n: i64| n.max(0) as u64;
        Ok(Response::new(pb::ListObservationsResponse {
            observations: rows
                .into_iter()
                .map(|o| pb::Observation {
                    run_ref: o.run_ref,
                    run_id: o.run_id,
                    outcome: o.outcome,
                    terminal_at: o.terminal_at,
                    contract: o.contract,
                    eligible_for_learning: o.eligible_for_learning,
                    run_state: o.run_state,
                    demonstration: o.demonstration,
                    observed_at: o.observed_at,
                    receipt_sequence: o.receipt_sequence,
                    trust: o.trust,
                    workspace_id: o.workspace_id,
                })
                .collect(),
            total: u(counts.receipts_total),
            demonstration_count: u(counts.demonstrations_total),
            eligible_for_learning_total: u(counts.eligible_for_learning_total),
            by_run_state: counts
                .receipts_by_run_state
                .into_iter()
                .map(|(run_state, n)| pb::RunStateCount {
                    run_state,
                    count: u(n),
                })
                .collect(),
            availability: "available".into(),
            source: SOURCE.into(),
            learning_receipts_total: u(learning.receipts_total),
            learning_events_total: u(learning.learning_events_total),
            positive_events: u(learning.positive_events),
            negative_events: u(learning.negative_events),
        }))
    }
}
