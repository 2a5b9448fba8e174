//! The `slm.v1.Ledger` gRPC server: proto ↔ domain conversion and error
//! mapping around the store.

use std::path::Path;
use std::pin::Pin;

use futures::Stream;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;
use tonic::{Request, Response, Status};

use slm_proto::v1 as pb;
use slm_proto::v1::ledger_server::{Ledger, LedgerServer};
use slm_runtime::events::EventHub;
use slm_runtime::time::now_iso;

use crate::domain::entry::{Budget, LAP_IMPORTANCE};
use crate::domain::memory::{self, DEFAULT_PROFILE};
use crate::domain::recall;
use crate::domain::{LapRecord, LedgerError, NewMemory, StoredMemory};
use crate::store::{NewLap, RunRow, Store};

/// Per-run read cap (spec LEDGER-06).
const MAX_RUN_ROWS: u32 = 5000;
const DEFAULT_RUNS_PAGE: u32 = 20;
const MAX_RUNS_PAGE: u32 = 1000;
const EVENT_BUFFER: usize = 4096;
/// Laps one AppendLaps call may carry.
pub const MAX_LAP_BATCH: usize = 512;

#[derive(Clone)]
pub struct LedgerService {
    store: Store,
    events: EventHub<StoredMemory>,
}

impl LedgerService {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            events: EventHub::new(EVENT_BUFFER),
        }
    }

    /// New memories from this process and from any other process writing
    /// the same database (SQLite change feed or PostgreSQL LISTEN/NOTIFY).
    async fn subscribe(&self) -> tokio::sync::broadcast::Receiver<StoredMemory> {
        let store = self.store.clone();
        let relay_store = self.store.clone();
        self.events
            .subscribe(
                self.store.db().change_source(crate::store::CHANGE_CHANNEL),
                async move { store.max_memory_id().await.ok() },
                move |after, limit| {
                    let s = relay_store.clone();
                    async move {
                        let rows = s.memories_after(after, limit).await.ok()?;
                        Some(rows.into_iter().map(|m| (m.id, m)).collect())
                    }
                },
            )
            .await
    }

    pub fn into_server(self) -> LedgerServer<Self> {
        LedgerServer::new(self)
            .max_decoding_message_size(8 << 20)
            .max_encoding_message_size(64 << 20)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Announces a stored memory to watchers; its id.
    fn publish(&self, m: StoredMemory) -> i64 {
        let id = m.id;
        self.events.publish(id, m);
        id
    }

    /// Stores laps in one transaction and announces them; their memory ids.
    async fn store_laps(&self, laps: &[NewLap]) -> Result<Vec<i64>, Status> {
        let stored = self
            .store
            .append_laps(laps, &now_iso())
            .await
            .map_err(status)?;
        Ok(stored.into_iter().map(|m| self.publish(m)).collect())
    }

    async fn read_profile(&self, raw: &str) -> Result<String, LedgerError> {
        let p = memory::profile_id(raw)?;
        if p != DEFAULT_PROFILE && !self.store.profile_exists(&p).await? {
            return Err(LedgerError::UnknownProfile(p));
        }
        Ok(p)
    }
}

/// Longest status message sent. A message travels in the `grpc-message`
/// header, and one that echoes a huge input (a database error quoting a
/// path) would exceed the peer's header-list limit and tear down the whole
/// HTTP/2 connection, failing every other call multiplexed on it.
const MAX_STATUS_MESSAGE: usize = 1024;

fn bounded(mut m: String) -> String {
    if m.len() > MAX_STATUS_MESSAGE {
        let mut end = MAX_STATUS_MESSAGE;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        m.truncate(end);
        m.push('…');
    }
    m
}

fn status(e: LedgerError) -> Status {
    match e {
        LedgerError::Invalid(m) => Status::invalid_argument(bounded(m)),
        e @ LedgerError::UnknownProfile(_) => Status::not_found(bounded(e.to_string())),
        e @ LedgerError::ProfileExists(_) => Status::already_exists(bounded(e.to_string())),
        LedgerError::Unsupported(m) => Status::failed_precondition(bounded(m)),
        LedgerError::Db(m) => Status::unavailable(bounded(format!("ledger database error: {m}"))),
    }
}

pub fn memory_to_pb(m: StoredMemory) -> pb::Memory {
    pb::Memory {
        id: m.id,
        profile_id: m.profile_id,
        content: m.content,
        tags: m.tags,
        session_id: m.session_id,
        metadata_json: m.metadata,
        importance: m.importance,
        agent_id: m.agent_id,
        created_at: m.created_at,
    }
}

pub fn lap_from_pb(e: pb::LapEntry) -> LapRecord {
    let b = e.budget.unwrap_or_default();
    LapRecord {
        run_id: e.run_id,
        name: e.name,
        lap: e.lap,
        ts: e.ts,
        decision: e.decision,
        passed: e.passed,
        detail: e.detail,
        agent_claimed_done: e.agent_claimed_done,
        runner_log: e.runner_log,
        budget: Budget {
            tokens: b.tokens,
            wallclock_s: b.wallclock_s,
        },
    }
}

pub fn lap_to_pb(r: LapRecord) -> pb::LapEntry {
    pb::LapEntry {
        run_id: r.run_id,
        name: r.name,
        lap: r.lap,
        ts: r.ts,
        decision: r.decision,
        passed: r.passed,
        detail: r.detail,
        agent_claimed_done: r.agent_claimed_done,
        runner_log: r.runner_log,
        budget: Some(pb::Budget {
            tokens: r.budget.tokens,
            wallclock_s: r.budget.wallclock_s,
        }),
    }
}

fn run_to_pb(r: RunRow) -> pb::LoopRun {
    pb::LoopRun {
        run_id: r.run_id,
        name: r.name,
        rows: u32::try_from(r.rows).unwrap_or(u32::MAX),
        r#final: r.final_decision,
        started_ts: r.started_ts,
        last_ts: r.last_ts,
        last_detail: r.last_detail,
        gate_detail: r.gate_detail.unwrap_or_default(),
        gate_passed: r.gate_passed,
    }
}

/// A lap as the ledger stores it: validated, its runner log capped, its
/// memory (content, tags, session, metadata) derived from the record.
fn new_lap(r: pb::AppendLapRequest) -> Result<NewLap, Status> {
    let lap = lap_from_pb(
        r.entry
            .ok_or_else(|| Status::invalid_argument("entry is required"))?,
    )
    .capped();
    lap.validate().map_err(Status::invalid_argument)?;
    let memory = NewMemory {
        profile_id: r.profile_id,
        content: lap.to_json(),
        tags: lap.tags(),
        session_id: lap.session_id(),
        metadata: lap.metadata(),
        importance: LAP_IMPORTANCE,
        agent_id: r.agent_id,
    }
    .validated()
    .map_err(status)?;
    Ok(NewLap {
        memory,
        lap,
        gate_row: r.gate_row,
    })
}

fn parse_cursor(c: &str) -> Result<i64, Status> {
    if c.is_empty() {
        return Ok(i64::MAX);
    }
    c.parse::<i64>()
        .map_err(|_| Status::invalid_argument("cursor is not one this service returned"))
}

fn runs_page(rows: Vec<RunRow>, limit: u32) -> pb::ListLoopRunsResponse {
    let next_cursor = if rows.len() == limit as usize {
        rows.last().map(|r| r.seq.to_string()).unwrap_or_default()
    } else {
        String::new()
    };
    pb::ListLoopRunsResponse {
        runs: rows.into_iter().map(run_to_pb).collect(),
        next_cursor,
    }
}

fn page_limit(limit: u32) -> u32 {
    if limit == 0 {
        DEFAULT_RUNS_PAGE
    } else {
        limit.min(MAX_RUNS_PAGE)
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::MemoryEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Ledger for LedgerService {
    async fn remember(
        &self,
        req: Request<pb::RememberRequest>,
    ) -> Result<Response<pb::RememberResponse>, Status> {
        let r = req.into_inner();
        let m = NewMemory {
            profile_id: r.profile_id,
            content: r.content,
            tags: r.tags,
            session_id: r.session_id,
            metadata: r.metadata_json,
            importance: r.importance,
            agent_id: r.agent_id,
        }
        .validated()
        .map_err(status)?;
        let stored = self.store.remember(&m, &now_iso()).await.map_err(status)?;
        self.publish(stored.clone());
        Ok(Response::new(pb::RememberResponse {
            memory: Some(memory_to_pb(stored)),
        }))
    }

    async fn recall(
        &self,
        req: Request<pb::RecallRequest>,
    ) -> Result<Response<pb::RecallResponse>, Status> {
        let r = req.into_inner();
        let profile = self.read_profile(&r.profile_id).await.map_err(status)?;
        let query = memory::recall_query(&r.query).map_err(status)?;
        let tag = Some(r.tag.trim()).filter(|t| !t.is_empty());
        let limit = recall::clamp_limit(r.limit);
        let floor = recall::floor(r.evidence_floor);
        let (kept, no_confident_match) = self
            .store
            .recall(&profile, query, tag, limit, floor, r.exclude_loop_rows)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::RecallResponse {
            results: kept
                .into_iter()
                .map(|(m, score)| pb::RecallHit {
                    memory: Some(memory_to_pb(m)),
                    score,
                })
                .collect(),
            no_confident_match,
            evidence_floor: floor,
        }))
    }

    async fn list_session(
        &self,
        req: Request<pb::ListSessionRequest>,
    ) -> Result<Response<pb::ListSessionResponse>, Status> {
        let r = req.into_inner();
        let profile = self.read_profile(&r.profile_id).await.map_err(status)?;
        let limit = if r.limit == 0 {
            MAX_RUN_ROWS
        } else {
            r.limit.min(MAX_RUN_ROWS)
        };
        let rows = self
            .store
            .list_session(&profile, &r.session_id, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ListSessionResponse {
            memories: rows.into_iter().map(memory_to_pb).collect(),
        }))
    }

    async fn append_lap(
        &self,
        req: Request<pb::AppendLapRequest>,
    ) -> Result<Response<pb::AppendLapResponse>, Status> {
        let lap = new_lap(req.into_inner())?;
        let ids = self.store_laps(&[lap]).await?;
        Ok(Response::new(pb::AppendLapResponse { memory_id: ids[0] }))
    }

    async fn append_laps(
        &self,
        req: Request<pb::AppendLapsRequest>,
    ) -> Result<Response<pb::AppendLapsResponse>, Status> {
        let laps = req.into_inner().laps;
        if laps.len() > MAX_LAP_BATCH {
            return Err(Status::invalid_argument(format!(
                "at most {MAX_LAP_BATCH} laps per batch"
            )));
        }
        // Invalid laps are refused one by one; the valid ones share one
        // transaction, whose failure is every one of its laps' error.
        let mut valid: Vec<NewLap> = Vec::with_capacity(laps.len());
        let refused: Vec<Option<Status>> = laps
            .into_iter()
            .map(|l| match new_lap(l) {
                Ok(lap) => {
                    valid.push(lap);
                    None
                }
                Err(e) => Some(e),
            })
            .collect();
        let stored = self.store_laps(&valid).await;
        let mut ids = match &stored {
            Ok(ids) => ids.iter(),
            Err(_) => [].iter(),
        };
        let results = refused
            .iter()
            .map(|r| match (r, &stored) {
                (Some(e), _) | (None, Err(e)) => pb::AppendLapResult {
                    memory_id: 0,
                    error: e.message().to_string(),
                },
                (None, Ok(_)) => pb::AppendLapResult {
                    memory_id: ids.next().copied().unwrap_or(0),
                    error: String::new(),
                },
            })
            .collect();
        Ok(Response::new(pb::AppendLapsResponse { results }))
    }

    async fn list_loop_runs(
        &self,
        req: Request<pb::ListLoopRunsRequest>,
    ) -> Result<Response<pb::ListLoopRunsResponse>, Status> {
        let r = req.into_inner();
        let profile = self.read_profile(&r.profile_id).await.map_err(status)?;
        let limit = page_limit(r.limit);
        let rows = self
            .store
            .list_runs(&profile, Some(&r.name), parse_cursor(&r.cursor)?, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(runs_page(rows, limit)))
    }

    async fn list_recent_runs(
        &self,
        req: Request<pb::ListRecentRunsRequest>,
    ) -> Result<Response<pb::ListLoopRunsResponse>, Status> {
        let r = req.into_inner();
        let profile = self.read_profile(&r.profile_id).await.map_err(status)?;
        let limit = page_limit(r.limit);
        let rows = self
            .store
            .list_runs(&profile, None, parse_cursor(&r.cursor)?, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(runs_page(rows, limit)))
    }

    async fn list_run_laps(
        &self,
        req: Request<pb::ListRunLapsRequest>,
    ) -> Result<Response<pb::ListRunLapsResponse>, Status> {
        let r = req.into_inner();
        let profile = self.read_profile(&r.profile_id).await.map_err(status)?;
        let limit = if r.limit == 0 {
            MAX_RUN_ROWS
        } else {
            r.limit.min(MAX_RUN_ROWS)
        };
        let texts = self
            .store
            .run_laps(&profile, &r.run_id, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ListRunLapsResponse {
            laps: texts
                .iter()
                .filter_map(|t| LapRecord::from_json(t))
                .map(lap_to_pb)
                .collect(),
        }))
    }

    async fn list_profiles(
        &self,
        _req: Request<pb::ListProfilesRequest>,
    ) -> Result<Response<pb::ListProfilesResponse>, Status> {
        let rows = self.store.list_profiles().await.map_err(status)?;
        Ok(Response::new(pb::ListProfilesResponse {
            profiles: rows
                .into_iter()
                .map(|(profile_id, created_at)| pb::Profile {
                    profile_id,
                    created_at,
                })
                .collect(),
        }))
    }

    async fn create_profile(
        &self,
        req: Request<pb::CreateProfileRequest>,
    ) -> Result<Response<pb::Profile>, Status> {
        let raw = req.into_inner().profile_id;
        if raw.trim().is_empty() {
            return Err(Status::invalid_argument("profile_id is required"));
        }
        let p = memory::profile_id(&raw).map_err(status)?;
        let created_at = now_iso();
        self.store
            .create_profile(&p, &created_at)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::Profile {
            profile_id: p,
            created_at,
        }))
    }

    async fn delete_profile(
        &self,
        req: Request<pb::DeleteProfileRequest>,
    ) -> Result<Response<pb::DeleteProfileResponse>, Status> {
        let raw = req.into_inner().profile_id;
        if raw.trim().is_empty() {
            return Err(Status::invalid_argument("profile_id is required"));
        }
        let p = memory::profile_id(&raw).map_err(status)?;
        if p == DEFAULT_PROFILE {
            return Err(Status::failed_precondition(
                "the default profile cannot be deleted",
            ));
        }
        let memories_deleted = self.store.delete_profile(&p).await.map_err(status)?;
        Ok(Response::new(pb::DeleteProfileResponse {
            memories_deleted,
        }))
    }

    type WatchMemoriesStream = EventStream;

    async fn watch_memories(
        &self,
        req: Request<pb::WatchMemoriesRequest>,
    ) -> Result<Response<Self::WatchMemoriesStream>, Status> {
        let r = req.into_inner();
        let profile = self.read_profile(&r.profile_id).await.map_err(status)?;
        let tag = r.tag.trim().to_string();
        let rx = self.subscribe().await;
        let stream = BroadcastStream::new(rx).filter_map(move |ev| match ev {
            Ok(m) if m.profile_id == profile && (tag.is_empty() || m.tags.contains(&tag)) => {
                Some(Ok(pb::MemoryEvent {
                    memory: Some(memory_to_pb(m)),
                }))
            }
            Ok(_) => None,
            // A slow subscriber missed events: tell it, so it re-reads.
            Err(_) => Some(Err(Status::data_loss(
                "memory events were dropped; re-read the store",
            ))),
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn backup(
        &self,
        req: Request<pb::BackupRequest>,
    ) -> Result<Response<pb::BackupResponse>, Status> {
        let dest = req.into_inner().destination;
        let path = Path::new(&dest);
        if !path.is_absolute() {
            return Err(Status::invalid_argument(
                "backup destination must be absolute",
            ));
        }
        if path.exists() {
            return Err(Status::already_exists(bounded(format!(
                "backup destination {dest} already exists"
            ))));
        }
        let bytes = self.store.backup_to(path).await.map_err(status)?;
        Ok(Response::new(pb::BackupResponse {
            destination: dest,
            bytes,
        }))
    }
}
