//! The learning store (`learning.db` on SQLite, or PostgreSQL): M041 v1
//! evidence, the M050 execution-reliability store and the profile-closure
//! tombstone, through one implementation for both backends. Nothing here
//! writes memories or preferences; nothing here is read by recall.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use slm_runtime::db::{MigrationSet, Step};
use slm_runtime::time::now_iso;
use slm_runtime::{Backend, Db};

use crate::domain::{self, Sealed, V1Record, refusal};

pub static MIGRATIONS: MigrationSet = MigrationSet {
    service: "bridge",
    sqlite: &[Step {
        version: 1,
        description: "bridge init (M040 closures, M041, M050)",
        sql: include_str!("../../../../migrations/sqlite/bridge/0001_init.sql"),
    }],
    postgres: &[Step {
        version: 1,
        description: "bridge init (M040 closures, M041, M050)",
        sql: include_str!("../../../../migrations/postgres/bridge/0001_init.sql"),
    }],
};

/// The M041 columns, in their exact order (BRIDGE-12).
pub const M041_COLUMNS: [&str; 20] = [
    "profile_id",
    "contract_id",
    "workspace_id",
    "run_ref",
    "run_id",
    "outcome",
    "run_state",
    "demonstration",
    "eligible_for_learning",
    "terminal_at",
    "graph_digest",
    "plan_digest",
    "policy_digest",
    "receipt_sequence",
    "receipt_head_digest",
    "receipt_trust",
    "nodes_json",
    "artifact_digests_json",
    "payload_sha256",
    "observed_at",
];

/// A refused write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WriteError {
    pub message: String,
    /// Only the busy/deadline cause is retryable.
    pub retryable: bool,
}

impl WriteError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }
    fn busy() -> Self {
        Self {
            message: refusal::WRITE_DEADLINE.into(),
            retryable: true,
        }
    }
}

fn db_error(e: sqlx::Error) -> WriteError {
    if is_busy(&e) {
        return WriteError::busy();
    }
    WriteError::new(format!("learning database error: {e}"))
}

fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            let code = d.code().unwrap_or_default();
            let msg = d.message().to_ascii_lowercase();
            code == "5"
                || code == "6"
                || code == "517"
                || code == "261"
                || msg.contains("database is locked")
                || msg.contains("busy")
        }
        sqlx::Error::PoolTimedOut => true,
        _ => false,
    }
}

/// `SLM_DB_BUSY_TIMEOUT_MS`: default 10000, invalid 10000, negative 0.
pub fn busy_timeout() -> Duration {
    let ms = std::env::var("SLM_DB_BUSY_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(10_000)
        .max(0);
    Duration::from_millis(ms as u64)
}

/// The per-store admission gate (BRIDGE-15 step 2, BRIDGE-24 step 2).
#[derive(Default)]
struct Gate {
    closing: HashSet<String>,
    inflight: HashMap<String, usize>,
}

struct Admission {
    gate: Arc<Mutex<Gate>>,
    profile: String,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut g = self.gate.lock().expect("gate");
        if let Some(n) = g.inflight.get_mut(&self.profile) {
            *n -= 1;
            if *n == 0 {
                g.inflight.remove(&self.profile);
            }
        }
    }
}

/// One v1 row as listed for the dashboard (DASH-05 run shape).
#[derive(Debug, Clone, PartialEq)]
pub struct ObservationRow {
    pub run_id: String,
    pub run_ref: String,
    pub outcome: String,
    pub run_state: String,
    pub demonstration: bool,
    pub eligible_for_learning: bool,
    pub terminal_at: String,
    pub observed_at: String,
    pub receipt_sequence: i64,
    pub trust: String,
    pub workspace_id: String,
    pub contract: String,
}

/// BRIDGE-17 counts of a profile's v1 evidence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvidenceCounts {
    pub receipts_total: i64,
    pub demonstrations_total: i64,
    pub eligible_for_learning_total: i64,
    pub receipts_by_run_state: Vec<(String, i64)>,
}

/// BRIDGE-22 counts of a profile's execution-reliability store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LearningCounts {
    pub receipts_total: i64,
    pub learning_events_total: i64,
    pub positive_events: i64,
    pub negative_events: i64,
}

#[derive(Clone)]
pub struct Store {
    db: Db,
    gate: Arc<Mutex<Gate>>,
    queue: Arc<tokio::sync::Mutex<()>>,
}

impl Store {
    pub async fn open(url: &str) -> Result<Self, slm_runtime::DbError> {
        let db = Db::open_migrated(url, &MIGRATIONS).await?;
        Ok(Self {
            db,
            gate: Arc::default(),
            queue: Arc::default(),
        })
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    pub async fn close(&self) {
        self.db.close().await
    }

    /// Checks the M041 table's columns are exactly BRIDGE-12's, in order.
    pub async fn verify_m041(&self) -> Result<(), String> {
        let cols: Vec<String> = match self.db.backend {
            Backend::Sqlite => sqlx::query("SELECT name FROM pragma_table_info('external_evidence_receipts') ORDER BY cid")
                .fetch_all(&self.db.pool)
                .await
                .map_err(|e| e.to_string())?
                .iter()
                .map(|r| r.try_get::<String, _>(0).unwrap_or_default())
                .collect(),
            Backend::Postgres => sqlx::query(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = 'external_evidence_receipts' \
                 ORDER BY ordinal_position",
            )
            .fetch_all(&self.db.pool)
            .await
            .map_err(|e| e.to_string())?
            .iter()
            .map(|r| r.try_get::<String, _>(0).unwrap_or_default())
            .collect(),
        };
        if cols != M041_COLUMNS {
            return Err("M041 external evidence schema did not reach its end-state".into());
        }
        Ok(())
    }

    fn admit(&self, profile: &str) -> Result<Admission, WriteError> {
        let mut g = self.gate.lock().expect("gate");
        if g.closing.contains(profile) {
            return Err(WriteError::new(refusal::PROFILE_CLOSED));
        }
        *g.inflight.entry(profile.to_string()).or_default() += 1;
        Ok(Admission {
            gate: self.gate.clone(),
            profile: profile.to_string(),
        })
    }

    /// Runs one write transaction through the gate, the in-process queue and
    /// the busy retry loop (BRIDGE-15 steps 2..4).
    async fn write<T, F>(&self, profile: &str, op: F) -> Result<T, WriteError>
    where
        F: for<'c> Fn(
            &'c mut AnyConnection,
        )
            -> std::pin::Pin<Box<dyn Future<Output = Result<T, WriteError>> + Send + 'c>>,
    {
        let _admission = self.admit(profile)?;
        let busy = busy_timeout();
        let _queue = tokio::time::timeout(busy + Duration::from_secs(5), self.queue.lock())
            .await
            .map_err(|_| WriteError::busy())?;
        let start = Instant::now();
        loop {
            match self.attempt(profile, &op).await {
                Err(e) if e.retryable && start.elapsed() < busy => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => return other,
            }
        }
    }

    async fn attempt<T, F>(&self, profile: &str, op: &F) -> Result<T, WriteError>
    where
        F: for<'c> Fn(
            &'c mut AnyConnection,
        )
            -> std::pin::Pin<Box<dyn Future<Output = Result<T, WriteError>> + Send + 'c>>,
    {
        let mut conn = self.db.pool.acquire().await.map_err(db_error)?;
        if self.db.backend == Backend::Sqlite {
            sqlx::query("PRAGMA busy_timeout = 0")
                .execute(&mut *conn)
                .await
                .map_err(db_error)?;
        }
        let mut tx = sqlx::Connection::begin(&mut *conn)
            .await
            .map_err(db_error)?;
        if self.db.backend == Backend::Postgres {
            // Serialises this profile's writers against its erasure.
            sqlx::query("SELECT 1 FROM pg_advisory_xact_lock(hashtext($1))")
                .bind(profile)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        let out = op(&mut tx).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(out)
    }

    /// BRIDGE-11..15: validates and stores one v1 payload. `Ok(true)` when a
    /// row was created, `Ok(false)` for an identical duplicate.
    pub async fn insert_v1(&self, payload: &Map<String, Value>) -> Result<bool, WriteError> {
        let rec = domain::validate_v1(payload).map_err(WriteError::new)?;
        let rec = Arc::new(rec);
        let profile = rec.profile_id.clone();
        self.write(&profile, move |conn| {
            let rec = rec.clone();
            Box::pin(async move {
                let observed_at = now_iso();
                let done = sqlx::query(
                    "INSERT INTO external_evidence_receipts (profile_id, contract_id, workspace_id, run_ref, run_id, \
                     outcome, run_state, demonstration, eligible_for_learning, terminal_at, graph_digest, plan_digest, \
                     policy_digest, receipt_sequence, receipt_head_digest, receipt_trust, nodes_json, artifact_digests_json, \
                     payload_sha256, observed_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,0,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19) \
                     ON CONFLICT (profile_id, contract_id, workspace_id, run_ref) DO NOTHING",
                )
                .bind(&rec.profile_id)
                .bind(&rec.contract_id)
                .bind(&rec.workspace_id)
                .bind(&rec.run_ref)
                .bind(&rec.run_id)
                .bind(&rec.outcome)
                .bind(&rec.run_state)
                .bind(i64::from(rec.demonstration))
                .bind(&rec.terminal_at)
                .bind(&rec.graph_digest)
                .bind(&rec.plan_digest)
                .bind(&rec.policy_digest)
                .bind(rec.receipt_sequence)
                .bind(&rec.receipt_head_digest)
                .bind(&rec.receipt_trust)
                .bind(&rec.nodes_json)
                .bind(&rec.artifact_digests_json)
                .bind(&rec.payload_sha256)
                .bind(&observed_at)
                .execute(&mut *conn)
                .await
                .map_err(db_error)?;
                // Checked inside the write transaction (BRIDGE-23).
                if tombstoned(conn, &rec.profile_id).await? {
                    return Err(WriteError::new(refusal::PROFILE_CLOSED));
                }
                if done.rows_affected() == 1 {
                    return Ok(true);
                }
                let row = sqlx::query(
                    "SELECT * FROM external_evidence_receipts WHERE profile_id = $1 AND contract_id = $2 \
                     AND workspace_id = $3 AND run_ref = $4",
                )
                .bind(&rec.profile_id)
                .bind(&rec.contract_id)
                .bind(&rec.workspace_id)
                .bind(&rec.run_ref)
                .fetch_one(&mut *conn)
                .await
                .map_err(db_error)?;
                let stored = record_from_row(&row).map_err(db_error)?;
                let digest = domain::sha256_hex(
                    domain::canon(&Value::Object(domain::v1_payload_from_row(&stored))).as_bytes(),
                );
                if digest == rec.payload_sha256 {
                    Ok(false)
                } else {
                    Err(WriteError::new(refusal::DIFFERENT_HEAD))
                }
            })
        })
        .await
    }

    /// BRIDGE-22: stores one sealed v2 receipt and its learning event.
    pub async fn insert_v2(&self, sealed: &Sealed) -> Result<bool, WriteError> {
        sealed.verify().map_err(WriteError::new)?;
        let sealed = Arc::new(sealed.clone());
        let profile = sealed.field("profile_id").to_string();
        self.write(&profile, move |conn| {
            let s = sealed.clone();
            Box::pin(async move {
                let now = now_iso();
                let done = sqlx::query(
                    "INSERT INTO execution_learning_receipts (profile_id, workspace_id, run_ref, run_id, receipt_head_digest, \
                     payload_json, payload_sha256, producer_identity, capability_digest, terminal_listing_digest, observed_at) \
                     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) ON CONFLICT (profile_id, workspace_id, run_ref) DO NOTHING",
                )
                .bind(s.field("profile_id"))
                .bind(s.field("workspace_id"))
                .bind(s.field("run_ref"))
                .bind(s.field("run_id"))
                .bind(s.head_digest())
                .bind(s.payload_json())
                .bind(s.payload_sha256())
                .bind(&s.producer_identity)
                .bind(&s.capability_digest)
                .bind(&s.terminal_listing_digest)
                .bind(&now)
                .execute(&mut *conn)
                .await
                .map_err(db_error)?;
                if tombstoned(conn, s.field("profile_id")).await? {
                    return Err(WriteError::new(refusal::PROFILE_CLOSED));
                }
                if done.rows_affected() == 0 {
                    let stored: String = sqlx::query_scalar(
                        "SELECT payload_sha256 FROM execution_learning_receipts \
                         WHERE profile_id = $1 AND workspace_id = $2 AND run_ref = $3",
                    )
                    .bind(s.field("profile_id"))
                    .bind(s.field("workspace_id"))
                    .bind(s.field("run_ref"))
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(db_error)?;
                    return if stored == s.payload_sha256() {
                        Ok(false)
                    } else {
                        Err(WriteError::new(refusal::DIFFERENT_HEAD))
                    };
                }
                sqlx::query(
                    "INSERT INTO execution_learning_events (profile_id, workspace_id, run_ref, receipt_head_digest, \
                     route_key, signal, created_at) VALUES ($1,$2,$3,$4,$5,$6,$7)",
                )
                .bind(s.field("profile_id"))
                .bind(s.field("workspace_id"))
                .bind(s.field("run_ref"))
                .bind(s.head_digest())
                .bind(s.route_key())
                .bind(s.signal())
                .bind(&now)
                .execute(&mut *conn)
                .await
                .map_err(db_error)?;
                Ok(true)
            })
        })
        .await
    }

    /// BRIDGE-17 counts for one profile.
    pub async fn evidence_counts(&self, profile: &str) -> Result<EvidenceCounts, sqlx::Error> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, COUNT(CASE WHEN demonstration = 1 THEN 1 END) AS d, \
             COUNT(CASE WHEN eligible_for_learning = 1 THEN 1 END) AS e \
             FROM external_evidence_receipts WHERE profile_id = $1",
        )
        .bind(profile)
        .fetch_one(&self.db.pool)
        .await?;
        let by_state = sqlx::query(
            "SELECT run_state, COUNT(*) AS n FROM external_evidence_receipts WHERE profile_id = $1 \
             GROUP BY run_state ORDER BY run_state",
        )
        .bind(profile)
        .fetch_all(&self.db.pool)
        .await?;
        Ok(EvidenceCounts {
            receipts_total: row.try_get("n")?,
            demonstrations_total: int(&row, "d")?,
            eligible_for_learning_total: int(&row, "e")?,
            receipts_by_run_state: by_state
                .iter()
                .map(|r| Ok((r.try_get("run_state")?, r.try_get("n")?)))
                .collect::<Result<_, sqlx::Error>>()?,
        })
    }

    /// The newest v1 observations of a profile (by terminal time).
    pub async fn list_v1(
        &self,
        profile: &str,
        limit: u32,
    ) -> Result<Vec<ObservationRow>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT * FROM external_evidence_receipts WHERE profile_id = $1 \
             ORDER BY terminal_at DESC, run_ref DESC LIMIT $2",
        )
        .bind(profile)
        .bind(i64::from(limit))
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(ObservationRow {
                    run_id: r.try_get("run_id")?,
                    run_ref: r.try_get("run_ref")?,
                    outcome: r.try_get("outcome")?,
                    run_state: r.try_get("run_state")?,
                    demonstration: r.try_get::<i64, _>("demonstration")? != 0,
                    eligible_for_learning: r.try_get::<i64, _>("eligible_for_learning")? != 0,
                    terminal_at: r.try_get("terminal_at")?,
                    observed_at: r.try_get("observed_at")?,
                    receipt_sequence: r.try_get("receipt_sequence")?,
                    trust: r.try_get("receipt_trust")?,
                    workspace_id: r.try_get("workspace_id")?,
                    contract: r.try_get("contract_id")?,
                })
            })
            .collect()
    }

    /// BRIDGE-22 status counts for one profile.
    pub async fn learning_counts(&self, profile: &str) -> Result<LearningCounts, sqlx::Error> {
        let receipts: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM execution_learning_receipts WHERE profile_id = $1",
        )
        .bind(profile)
        .fetch_one(&self.db.pool)
        .await?;
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, COUNT(CASE WHEN signal > 0 THEN 1 END) AS p, \
             COUNT(CASE WHEN signal < 0 THEN 1 END) AS m \
             FROM execution_learning_events WHERE profile_id = $1",
        )
        .bind(profile)
        .fetch_one(&self.db.pool)
        .await?;
        Ok(LearningCounts {
            receipts_total: receipts,
            learning_events_total: row.try_get("n")?,
            positive_events: int(&row, "p")?,
            negative_events: int(&row, "m")?,
        })
    }

    /// BRIDGE-24 (the bridge's part): close and drain the profile, then in
    /// one transaction write the tombstone and delete its rows; check that
    /// nothing is left. The tombstone stays (GAP-23: see [`Self::reopen_profile`]).
    pub async fn erase_profile(&self, profile: &str) -> Result<(), WriteError> {
        self.purge(profile, true).await
    }

    /// The "forget learning" reset: the same purge without a tombstone.
    pub async fn reset_profile(&self, profile: &str) -> Result<(), WriteError> {
        self.purge(profile, false).await
    }

    /// A profile created again under an erased name may record evidence
    /// again (GAP-23): clears the tombstone and the closing mark.
    pub async fn reopen_profile(&self, profile: &str) -> Result<(), WriteError> {
        sqlx::query("DELETE FROM agent_receipt_profile_closures WHERE profile_id = $1")
            .bind(profile)
            .execute(&self.db.pool)
            .await
            .map_err(db_error)?;
        self.gate.lock().expect("gate").closing.remove(profile);
        Ok(())
    }

    async fn purge(&self, profile: &str, tombstone: bool) -> Result<(), WriteError> {
        self.gate
            .lock()
            .expect("gate")
            .closing
            .insert(profile.to_string());
        let drained = async {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                if !self
                    .gate
                    .lock()
                    .expect("gate")
                    .inflight
                    .contains_key(profile)
                {
                    return true;
                }
                if Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        .await;
        let result = if !drained {
            Err(WriteError {
                message: refusal::DRAIN_DEADLINE.into(),
                retryable: true,
            })
        } else {
            self.purge_rows(profile, tombstone).await
        };
        if !tombstone || result.is_err() {
            self.gate.lock().expect("gate").closing.remove(profile);
        }
        result
    }

    async fn purge_rows(&self, profile: &str, tombstone: bool) -> Result<(), WriteError> {
        let mut tx = self.db.pool.begin().await.map_err(db_error)?;
        if self.db.backend == Backend::Postgres {
            sqlx::query("SELECT 1 FROM pg_advisory_xact_lock(hashtext($1))")
                .bind(profile)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        if tombstone {
            sqlx::query(
                "INSERT INTO agent_receipt_profile_closures (profile_id, closed_at) VALUES ($1, $2) \
                 ON CONFLICT (profile_id) DO UPDATE SET closed_at = excluded.closed_at",
            )
            .bind(profile)
            .bind(now_iso())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        const TABLES: [&str; 3] = [
            "external_evidence_receipts",
            "execution_learning_events",
            "execution_learning_receipts",
        ];
        for t in TABLES {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {t} WHERE profile_id = $1"
            )))
            .bind(profile)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        for t in TABLES {
            let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM {t} WHERE profile_id = $1"
            )))
            .bind(profile)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
            if left != 0 {
                return Err(WriteError::new(refusal::RESIDUE));
            }
        }
        tx.commit().await.map_err(db_error)?;
        Ok(())
    }

    pub async fn is_tombstoned(&self, profile: &str) -> Result<bool, WriteError> {
        let mut conn = self.db.pool.acquire().await.map_err(db_error)?;
        tombstoned(&mut conn, profile).await
    }
}

/// A COUNT column (BIGINT on both backends).
fn int(row: &AnyRow, col: &str) -> Result<i64, sqlx::Error> {
    row.try_get::<i64, _>(col)
}

async fn tombstoned(conn: &mut AnyConnection, profile: &str) -> Result<bool, WriteError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM agent_receipt_profile_closures WHERE profile_id = $1",
    )
    .bind(profile)
    .fetch_one(&mut *conn)
    .await
    .map_err(db_error)?;
    Ok(n > 0)
}

fn record_from_row(r: &AnyRow) -> Result<V1Record, sqlx::Error> {
    Ok(V1Record {
        profile_id: r.try_get("profile_id")?,
        contract_id: r.try_get("contract_id")?,
        workspace_id: r.try_get("workspace_id")?,
        run_ref: r.try_get("run_ref")?,
        run_id: r.try_get("run_id")?,
        outcome: r.try_get("outcome")?,
        run_state: r.try_get("run_state")?,
        demonstration: r.try_get::<i64, _>("demonstration")? != 0,
        terminal_at: r.try_get("terminal_at")?,
        graph_digest: r.try_get("graph_digest")?,
        plan_digest: r.try_get("plan_digest")?,
        policy_digest: r.try_get("policy_digest")?,
        receipt_sequence: r.try_get("receipt_sequence")?,
        receipt_head_digest: r.try_get("receipt_head_digest")?,
        receipt_trust: r.try_get("receipt_trust")?,
        nodes_json: r.try_get("nodes_json")?,
        artifact_digests_json: r.try_get("artifact_digests_json")?,
        payload_sha256: r.try_get("payload_sha256")?,
    })
}
