//! The receipt service's tables (jobs and receipts, append-only) through
//! sqlx, one implementation for SQLite and PostgreSQL.

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use slm_runtime::Db;
use slm_runtime::db::{MigrationSet, Step};

use crate::domain::evidence::Receipt;
use crate::domain::job::{FileRecord, Job};

pub static MIGRATIONS: MigrationSet = MigrationSet {
    service: "receipt",
    sqlite: &[Step {
        version: 1,
        description: "receipt init",
        sql: include_str!("../../../../migrations/sqlite/receipt/0001_init.sql"),
    }],
    postgres: &[
        Step {
            version: 1,
            description: "receipt init",
            sql: include_str!("../../../../migrations/postgres/receipt/0001_init.sql"),
        },
        Step {
            version: 2,
            description: "receipt notify",
            sql: include_str!("../../../../migrations/postgres/receipt/0002_notify.sql"),
        },
    ],
};

/// The PostgreSQL channel new rows are announced on.
pub const CHANGE_CHANNEL: &str = "slm_receipts";

const JOB_COLUMNS: &str = "seq, job_id, profile_id, task_id, watcher_name, producer, command_digest, command_json, cwd, \
     artifacts_json, revision_digest, registered_at, expires_at, registered_us, expires_us, allow_prestart_evidence, \
     artifact_paths_json, check_paths_json, definition_json, definition_digest";
const RECEIPT_COLUMNS: &str = "seq, receipt_id, profile_id, task_id, run_id, producer, command_digest, verdict, exit_code, \
     produced_at, produced_us, evidence_digest, evidence";

#[derive(Debug, thiserror::Error)]
#[error("receipt database error: {0}")]
pub struct StoreError(pub String);

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        // Trigger refusals surface with their exact text.
        match &e {
            sqlx::Error::Database(d) => StoreError(d.message().to_string()),
            _ => StoreError(e.to_string()),
        }
    }
}

/// JSON text of a list column.
fn enc<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("list columns serialise")
}

fn json_list<T: serde::de::DeserializeOwned>(s: &str) -> Result<Vec<T>, sqlx::Error> {
    serde_json::from_str(s).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

fn job_from_row(r: &AnyRow) -> Result<Job, sqlx::Error> {
    Ok(Job {
        seq: r.try_get("seq")?,
        job_id: r.try_get("job_id")?,
        profile_id: r.try_get("profile_id")?,
        task_id: r.try_get("task_id")?,
        watcher_name: r.try_get("watcher_name")?,
        producer: r.try_get("producer")?,
        command_digest: r.try_get("command_digest")?,
        argv: json_list(&r.try_get::<String, _>("command_json")?)?,
        cwd: r.try_get("cwd")?,
        artifacts: json_list::<FileRecord>(&r.try_get::<String, _>("artifacts_json")?)?,
        revision_digest: r.try_get("revision_digest")?,
        registered_at: r.try_get("registered_at")?,
        expires_at: r.try_get("expires_at")?,
        registered_us: r.try_get("registered_us")?,
        expires_us: r.try_get("expires_us")?,
        allow_prestart_evidence: r.try_get::<i64, _>("allow_prestart_evidence")? != 0,
        artifact_paths: json_list(&r.try_get::<String, _>("artifact_paths_json")?)?,
        check_paths: json_list(&r.try_get::<String, _>("check_paths_json")?)?,
        definition: json_list::<FileRecord>(&r.try_get::<String, _>("definition_json")?)?,
        definition_digest: r.try_get("definition_digest")?,
    })
}

fn receipt_from_row(r: &AnyRow) -> Result<Receipt, sqlx::Error> {
    Ok(Receipt {
        seq: r.try_get("seq")?,
        receipt_id: r.try_get("receipt_id")?,
        profile_id: r.try_get("profile_id")?,
        task_id: r.try_get("task_id")?,
        run_id: r.try_get("run_id")?,
        producer: r.try_get("producer")?,
        command_digest: r.try_get("command_digest")?,
        verdict: r.try_get("verdict")?,
        exit_code: r.try_get("exit_code")?,
        produced_at: r.try_get("produced_at")?,
        produced_us: r.try_get("produced_us")?,
        evidence_digest: r.try_get("evidence_digest")?,
        evidence: r.try_get("evidence")?,
    })
}

#[derive(Clone, Debug)]
pub struct Store {
    db: Db,
}

impl Store {
    pub async fn open(url: &str) -> Result<Self, slm_runtime::DbError> {
        Ok(Self {
            db: Db::open_migrated(url, &MIGRATIONS).await?,
        })
    }

    pub async fn close(&self) {
        self.db.close().await
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Inserts a job; `seq` is assigned by the database.
    pub async fn insert_job(&self, j: &Job) -> Result<i64, StoreError> {
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO loop_gate_jobs (job_id, profile_id, task_id, watcher_name, producer, command_digest, command_json, \
             cwd, artifacts_json, revision_digest, registered_at, expires_at, registered_us, expires_us, allow_prestart_evidence, \
             artifact_paths_json, check_paths_json, definition_json, definition_digest) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) RETURNING seq",
        )
        .bind(&j.job_id)
        .bind(&j.profile_id)
        .bind(&j.task_id)
        .bind(&j.watcher_name)
        .bind(&j.producer)
        .bind(&j.command_digest)
        .bind(enc(&j.argv))
        .bind(&j.cwd)
        .bind(enc(&j.artifacts))
        .bind(&j.revision_digest)
        .bind(&j.registered_at)
        .bind(&j.expires_at)
        .bind(j.registered_us)
        .bind(j.expires_us)
        .bind(i64::from(j.allow_prestart_evidence))
        .bind(enc(&j.artifact_paths))
        .bind(enc(&j.check_paths))
        .bind(enc(&j.definition))
        .bind(&j.definition_digest)
        .fetch_one(&self.db.pool)
        .await?;
        Ok(seq)
    }

    pub async fn job(&self, job_id: &str) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM loop_gate_jobs WHERE job_id = $1"
        )))
        .bind(job_id)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(row.as_ref().map(job_from_row).transpose()?)
    }

    /// The newest registration for (profile, watcher).
    pub async fn newest_job(
        &self,
        profile: &str,
        watcher: &str,
    ) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM loop_gate_jobs WHERE profile_id = $1 AND watcher_name = $2 ORDER BY seq DESC LIMIT 1"
        )))
        .bind(profile)
        .bind(watcher)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(row.as_ref().map(job_from_row).transpose()?)
    }

    pub async fn list_jobs(&self, profile: &str, limit: u32) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM loop_gate_jobs WHERE profile_id = $1 ORDER BY seq DESC LIMIT $2"
        )))
        .bind(profile)
        .bind(i64::from(limit))
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows.iter().map(job_from_row).collect::<Result<_, _>>()?)
    }

    /// Definition digests still referenced by an unexpired job.
    pub async fn live_definitions(&self, now_us: i64) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT definition_digest FROM loop_gate_jobs WHERE expires_us > $1",
        )
        .bind(now_us)
        .fetch_all(&self.db.pool)
        .await?)
    }

    pub async fn insert_receipt(&self, r: &Receipt) -> Result<i64, StoreError> {
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO loop_execution_receipts (receipt_id, profile_id, task_id, run_id, producer, command_digest, verdict, \
             exit_code, produced_at, produced_us, evidence_digest, evidence) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING seq",
        )
        .bind(&r.receipt_id)
        .bind(&r.profile_id)
        .bind(&r.task_id)
        .bind(&r.run_id)
        .bind(&r.producer)
        .bind(&r.command_digest)
        .bind(&r.verdict)
        .bind(r.exit_code)
        .bind(&r.produced_at)
        .bind(r.produced_us)
        .bind(&r.evidence_digest)
        .bind(&r.evidence)
        .fetch_one(&self.db.pool)
        .await?;
        Ok(seq)
    }

    /// Receipts stored after `after_seq`, oldest first (for change events).
    pub async fn receipts_after(
        &self,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<Receipt>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RECEIPT_COLUMNS} FROM loop_execution_receipts WHERE seq > $1 ORDER BY seq LIMIT $2"
        )))
        .bind(after_seq)
        .bind(i64::from(limit))
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows
            .iter()
            .map(receipt_from_row)
            .collect::<Result<_, _>>()?)
    }

    pub async fn max_receipt_seq(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(seq) FROM loop_execution_receipts")
                .fetch_one(&self.db.pool)
                .await?
                .unwrap_or(0),
        )
    }

    /// The newest receipt matching the job's identity (RECEIPT-42): by
    /// production time, then insertion order.
    pub async fn newest_receipt(&self, j: &Job) -> Result<Option<Receipt>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {RECEIPT_COLUMNS} FROM loop_execution_receipts \
             WHERE profile_id = $1 AND run_id = $2 AND task_id = $3 AND producer = $4 AND command_digest = $5 \
             ORDER BY produced_us DESC, seq DESC LIMIT 1"
        )))
        .bind(&j.profile_id)
        .bind(&j.job_id)
        .bind(&j.task_id)
        .bind(&j.producer)
        .bind(&j.command_digest)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(row.as_ref().map(receipt_from_row).transpose()?)
    }

    /// Erases every job and receipt of a profile (the tombstone lets the
    /// append-only triggers allow it).
    pub async fn erase_profile(&self, profile: &str, at: &str) -> Result<(u64, u64), StoreError> {
        let mut tx = self.db.pool.begin().await?;
        sqlx::query(
            "INSERT INTO profile_erasures (profile_id, erased_at) VALUES ($1, $2) ON CONFLICT (profile_id) DO NOTHING",
        )
        .bind(profile)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        let receipts = sqlx::query("DELETE FROM loop_execution_receipts WHERE profile_id = $1")
            .bind(profile)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let jobs = sqlx::query("DELETE FROM loop_gate_jobs WHERE profile_id = $1")
            .bind(profile)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        // The tombstone is scoped to this erasure: a profile created later
        // under the same name starts clean and protected (GAP-23).
        sqlx::query("DELETE FROM profile_erasures WHERE profile_id = $1")
            .bind(profile)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((jobs, receipts))
    }

    /// A consistent copy of the database into a new file (SQLite only).
    pub async fn backup_to(
        &self,
        dest: &std::path::Path,
    ) -> Result<u64, slm_runtime::db::BackupError> {
        self.db.backup_to(dest).await
    }

    /// Raw access for tests that play an attacker with database access.
    pub fn pool(&self) -> &sqlx::AnyPool {
        &self.db.pool
    }
}
