//! The memory service's tables through sqlx. One implementation for SQLite
//! and PostgreSQL: the SQL is shared except for full-text search and backup.
//! No business decisions here: callers pass validated values.

use sqlx::any::AnyRow;
use sqlx::error::ErrorKind;
use sqlx::{AnyConnection, AssertSqlSafe, Row};

use slm_runtime::db::{MigrationSet, Step};
use slm_runtime::{Backend, Db};

use crate::domain::{LapRecord, LedgerError, NewMemory, StoredMemory};

mod recall;

pub static MIGRATIONS: MigrationSet = MigrationSet {
    service: "ledger",
    sqlite: &[Step {
        version: 1,
        description: "ledger init",
        sql: include_str!("../../../../migrations/sqlite/ledger/0001_init.sql"),
    }],
    postgres: &[
        Step {
            version: 1,
            description: "ledger init",
            sql: include_str!("../../../../migrations/postgres/ledger/0001_init.sql"),
        },
        Step {
            version: 2,
            description: "ledger notify",
            sql: include_str!("../../../../migrations/postgres/ledger/0002_notify.sql"),
        },
        Step {
            version: 3,
            description: "ledger full-text index without pending list",
            sql: include_str!(
                "../../../../migrations/postgres/ledger/0003_fts_no_pending_list.sql"
            ),
        },
    ],
};

/// The PostgreSQL channel new rows are announced on.
pub const CHANGE_CHANNEL: &str = "slm_memories";

const MEMORY_COLUMNS: &str = "m.id, m.profile_id, m.content, m.tags, m.session_id, m.metadata, m.importance, m.agent_id, m.created_at";

/// A run summary as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub run_id: String,
    pub name: String,
    pub seq: i64,
    pub rows: i64,
    pub final_decision: String,
    pub started_ts: String,
    pub last_ts: String,
    pub last_detail: String,
    pub gate_detail: Option<String>,
    pub gate_passed: bool,
}

#[derive(Clone, Debug)]
pub struct Store {
    db: Db,
}

fn memory_from_row(r: &AnyRow) -> Result<StoredMemory, sqlx::Error> {
    let tags: String = r.try_get("tags")?;
    Ok(StoredMemory {
        id: r.try_get("id")?,
        profile_id: r.try_get("profile_id")?,
        content: r.try_get("content")?,
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        session_id: r.try_get("session_id")?,
        metadata: r.try_get("metadata")?,
        importance: r.try_get::<i64, _>("importance")? as i32,
        agent_id: r.try_get("agent_id")?,
        created_at: r.try_get("created_at")?,
    })
}

fn run_from_row(r: &AnyRow) -> Result<RunRow, sqlx::Error> {
    Ok(RunRow {
        run_id: r.try_get("run_id")?,
        name: r.try_get("loop_name")?,
        seq: r.try_get("seq")?,
        rows: r.try_get("rows")?,
        final_decision: r.try_get("final")?,
        started_ts: r.try_get("started_ts")?,
        last_ts: r.try_get("last_ts")?,
        last_detail: r.try_get("last_detail")?,
        gate_detail: r.try_get("gate_detail")?,
        gate_passed: r.try_get::<i64, _>("gate_passed")? != 0,
    })
}

/// Maps a foreign-key failure on `profile_id` to the caller's mistake.
fn profile_error(profile: &str) -> impl FnOnce(sqlx::Error) -> LedgerError + '_ {
    move |e| match &e {
        sqlx::Error::Database(d) if d.kind() == ErrorKind::ForeignKeyViolation => {
            LedgerError::UnknownProfile(profile.to_string())
        }
        _ => LedgerError::from(e),
    }
}

/// A lap to store: its memory, its record and whether it is a gate row.
#[derive(Debug, Clone)]
pub struct NewLap {
    pub memory: NewMemory,
    pub lap: LapRecord,
    pub gate_row: bool,
}

/// What a batch adds to one run's summary.
struct RunDelta<'a> {
    profile_id: &'a str,
    run_id: &'a str,
    name: &'a str,
    first_seq: i64,
    first_ts: &'a str,
    rows: i64,
    last: &'a LapRecord,
    gate: Option<&'a LapRecord>,
}

fn summarise_runs<'a>(laps: &'a [NewLap], stored: &[StoredMemory]) -> Vec<RunDelta<'a>> {
    let mut runs: Vec<RunDelta<'a>> = Vec::new();
    for (l, m) in laps.iter().zip(stored) {
        let key = (l.memory.profile_id.as_str(), l.lap.run_id.as_str());
        match runs.iter_mut().find(|r| (r.profile_id, r.run_id) == key) {
            Some(r) => {
                r.rows += 1;
                r.last = &l.lap;
                if l.gate_row {
                    r.gate = Some(&l.lap);
                }
            }
            None => runs.push(RunDelta {
                profile_id: key.0,
                run_id: key.1,
                name: &l.lap.name,
                first_seq: m.id,
                first_ts: &l.lap.ts,
                rows: 1,
                last: &l.lap,
                gate: l.gate_row.then_some(&l.lap),
            }),
        }
    }
    runs
}

/// Several memories in one statement. Ids are assigned in row order on both
/// backends, so the returned ids, sorted, match the rows in order.
async fn insert_memory_rows(
    conn: &mut AnyConnection,
    backend: Backend,
    ms: &[&NewMemory],
    created_at: &str,
) -> Result<Vec<StoredMemory>, LedgerError> {
    let sql = format!(
        "INSERT INTO memories (profile_id, content, session_id, agent_id, importance, metadata, tags, created_at) \
         VALUES {} RETURNING id",
        backend.values_list(ms.len(), 8)
    );
    let mut q = sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql));
    for m in ms {
        q = q
            .bind(&m.profile_id)
            .bind(&m.content)
            .bind(&m.session_id)
            .bind(&m.agent_id)
            .bind(i64::from(m.importance))
            .bind(&m.metadata)
            .bind(serde_json::to_string(&m.tags).expect("tags serialise"))
            .bind(created_at);
    }
    let mut ids = q
        .fetch_all(&mut *conn)
        .await
        .map_err(profile_error(&ms[0].profile_id))?;
    ids.sort_unstable();
    Ok(ms
        .iter()
        .zip(ids)
        .map(|(m, id)| StoredMemory {
            id,
            profile_id: m.profile_id.clone(),
            content: m.content.clone(),
            tags: m.tags.clone(),
            session_id: m.session_id.clone(),
            metadata: m.metadata.clone(),
            importance: m.importance,
            agent_id: m.agent_id.clone(),
            created_at: created_at.to_string(),
        })
        .collect())
}

/// The tags of several memories in one statement.
async fn insert_tags<'a>(
    conn: &mut AnyConnection,
    backend: Backend,
    memories: impl Iterator<Item = (&'a NewMemory, i64)>,
) -> Result<(), LedgerError> {
    let rows: Vec<(&str, i64, &str)> = memories
        .flat_map(|(m, id)| {
            m.tags
                .iter()
                .map(move |t| (m.profile_id.as_str(), id, t.as_str()))
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "INSERT INTO memory_tags (profile_id, memory_id, tag) VALUES {}",
        backend.values_list(rows.len(), 3)
    );
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for (p, id, t) in rows {
        q = q.bind(p).bind(id).bind(t);
    }
    q.execute(&mut *conn).await?;
    Ok(())
}

impl Store {
    pub async fn open(url: &str) -> Result<Self, slm_runtime::DbError> {
        let db = Db::open_migrated(url, &MIGRATIONS).await?;
        Ok(Self { db })
    }

    pub fn backend(&self) -> Backend {
        self.db.backend
    }

    pub async fn close(&self) {
        self.db.close().await
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    pub async fn remember(
        &self,
        m: &NewMemory,
        created_at: &str,
    ) -> Result<StoredMemory, LedgerError> {
        let mut tx = self.db.pool.begin().await?;
        let stored = insert_memory_rows(&mut tx, self.db.backend, &[m], created_at)
            .await?
            .remove(0);
        insert_tags(&mut tx, self.db.backend, std::iter::once((m, stored.id))).await?;
        tx.commit().await?;
        Ok(stored)
    }

    /// Stores many memories in one transaction (imports, benchmark fills).
    pub async fn remember_many(
        &self,
        ms: &[NewMemory],
        created_at: &str,
    ) -> Result<usize, LedgerError> {
        let mut tx = self.db.pool.begin().await?;
        // Keep each statement well under SQLite's bound-parameter limit.
        for chunk in ms.chunks(500) {
            let refs: Vec<&NewMemory> = chunk.iter().collect();
            let stored = insert_memory_rows(&mut tx, self.db.backend, &refs, created_at).await?;
            insert_tags(
                &mut tx,
                self.db.backend,
                chunk.iter().zip(stored.iter().map(|m| m.id)),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(ms.len())
    }

    /// Stores laps as memories and updates their runs' summaries, in one
    /// transaction (a batch is one commit, one WAL sync, one full-text
    /// segment). A `gate_row` becomes its run's newest gate detail.
    pub async fn append_laps(
        &self,
        laps: &[NewLap],
        created_at: &str,
    ) -> Result<Vec<StoredMemory>, LedgerError> {
        if laps.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.db.pool.begin().await?;
        let memories: Vec<&NewMemory> = laps.iter().map(|l| &l.memory).collect();
        let stored = insert_memory_rows(&mut tx, self.db.backend, &memories, created_at).await?;
        insert_tags(
            &mut tx,
            self.db.backend,
            laps.iter()
                .map(|l| &l.memory)
                .zip(stored.iter().map(|m| m.id)),
        )
        .await?;
        let sql = format!(
            "INSERT INTO loop_laps (memory_id, profile_id, run_id, loop_name, lap) VALUES {}",
            self.db.backend.values_list(laps.len(), 5)
        );
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for (l, m) in laps.iter().zip(&stored) {
            q = q
                .bind(m.id)
                .bind(&l.memory.profile_id)
                .bind(&l.lap.run_id)
                .bind(&l.lap.name)
                .bind(i64::from(l.lap.lap));
        }
        q.execute(&mut *tx).await?;
        for run in summarise_runs(laps, &stored) {
            sqlx::query(
                "INSERT INTO loop_runs (profile_id, run_id, loop_name, seq, rows, final, started_ts, last_ts, last_detail, gate_detail, gate_passed) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (profile_id, run_id) DO UPDATE SET \
                   rows = loop_runs.rows + excluded.rows, final = excluded.final, last_ts = excluded.last_ts, \
                   last_detail = excluded.last_detail, \
                   gate_detail = COALESCE(excluded.gate_detail, loop_runs.gate_detail), \
                   gate_passed = CASE WHEN excluded.gate_detail IS NULL THEN loop_runs.gate_passed ELSE excluded.gate_passed END",
            )
            .bind(run.profile_id)
            .bind(run.run_id)
            .bind(run.name)
            .bind(run.first_seq)
            .bind(run.rows)
            .bind(run.last.decision.as_str())
            .bind(run.first_ts)
            .bind(run.last.ts.as_str())
            .bind(run.last.detail.as_str())
            .bind(run.gate.map(|g| g.detail.as_str()))
            .bind(i64::from(run.gate.is_some_and(|g| g.passed)))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(stored)
    }

    /// How many memories hold each of `terms` (all profiles, as the
    /// full-text index counts them), each counted up to `cap`: a common
    /// term costs at most `cap` index entries, not its whole posting list.
    pub async fn term_frequencies(
        &self,
        terms: &[String],
        cap: u32,
    ) -> Result<Vec<u32>, LedgerError> {
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        // `cap` is a number, so writing it into the text is safe.
        let counts: Vec<String> = (1..=terms.len())
            .map(|i| match self.db.backend {
                Backend::Sqlite => format!(
                    "(SELECT COUNT(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH ${i} LIMIT {cap}))"
                ),
                Backend::Postgres => format!(
                    "(SELECT COUNT(*) FROM (SELECT 1 FROM memories m \
                     WHERE m.content_tsv @@ to_tsquery('simple', ${i}) LIMIT {cap}) s{i})"
                ),
            })
            .collect();
        let mut q = sqlx::query(AssertSqlSafe(format!("SELECT {}", counts.join(", "))));
        for t in terms {
            q = q.bind(self.match_term(t));
        }
        let row = q.fetch_one(&self.db.pool).await?;
        (0..terms.len())
            .map(|i| Ok(row.try_get::<i64, _>(i)?.clamp(0, i64::from(cap)) as u32))
            .collect()
    }

    /// One term as the full-text query syntax quotes it. Terms are letters
    /// and digits only (domain::recall::tokens), so quoting them is enough
    /// to keep the query syntax inert.
    fn match_term(&self, term: &str) -> String {
        match self.db.backend {
            Backend::Sqlite => format!("\"{term}\""),
            Backend::Postgres => format!("'{term}'"),
        }
    }

    /// Full-text candidates holding any of `terms` (all of them when
    /// `all`), newest first, at most `limit`.
    pub async fn recall_candidates(
        &self,
        profile: &str,
        terms: &[String],
        all: bool,
        tag: Option<&str>,
        limit: u32,
        exclude_laps: bool,
    ) -> Result<Vec<StoredMemory>, LedgerError> {
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let mut tag_clause = String::new();
        if tag.is_some() {
            tag_clause.push_str(" AND EXISTS (SELECT 1 FROM memory_tags t WHERE t.profile_id = m.profile_id AND t.tag = $4 AND t.memory_id = m.id)");
        }
        // Lap rows repeat the watcher's query in their detail, so they match
        // it well; left in the candidates they would crowd the locators out
        // once a watcher has run enough laps.
        if exclude_laps {
            tag_clause
                .push_str(" AND NOT EXISTS (SELECT 1 FROM loop_laps l WHERE l.memory_id = m.id)");
        }
        let quoted: Vec<String> = terms.iter().map(|t| self.match_term(t)).collect();
        // On SQLite the CROSS JOIN makes the full-text index drive the join
        // (left to itself the planner walks every memory of the profile and
        // probes the index once per row), and ordering by the index's rowid
        // lets it stop after `limit` rows instead of sorting every match.
        let (sql, query) = match self.db.backend {
            Backend::Sqlite => (
                format!(
                    "SELECT {MEMORY_COLUMNS} FROM memories_fts CROSS JOIN memories m ON m.id = memories_fts.rowid \
                     WHERE memories_fts MATCH $1 AND m.profile_id = $2{tag_clause} \
                     ORDER BY memories_fts.rowid DESC LIMIT $3"
                ),
                quoted.join(if all { " AND " } else { " OR " }),
            ),
            Backend::Postgres => (
                format!(
                    "SELECT {MEMORY_COLUMNS} FROM memories m \
                     WHERE m.content_tsv @@ to_tsquery('simple', $1) AND m.profile_id = $2{tag_clause} \
                     ORDER BY m.id DESC LIMIT $3"
                ),
                quoted.join(if all { " & " } else { " | " }),
            ),
        };
        let mut q = sqlx::query(AssertSqlSafe(sql))
            .bind(query)
            .bind(profile)
            .bind(i64::from(limit));
        if let Some(t) = tag {
            q = q.bind(t);
        }
        let rows = q.fetch_all(&self.db.pool).await?;
        Ok(rows.iter().map(memory_from_row).collect::<Result<_, _>>()?)
    }

    /// Memories stored after `after_id`, oldest first (for change events).
    pub async fn memories_after(
        &self,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<StoredMemory>, LedgerError> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.id > $1 ORDER BY m.id LIMIT $2"
        )))
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows.iter().map(memory_from_row).collect::<Result<_, _>>()?)
    }

    pub async fn max_memory_id(&self) -> Result<i64, LedgerError> {
        Ok(
            sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(id) FROM memories")
                .fetch_one(&self.db.pool)
                .await?
                .unwrap_or(0),
        )
    }

    pub async fn list_session(
        &self,
        profile: &str,
        session: &str,
        limit: u32,
    ) -> Result<Vec<StoredMemory>, LedgerError> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.profile_id = $1 AND m.session_id = $2 ORDER BY m.id LIMIT $3"
        )))
        .bind(profile)
        .bind(session)
        .bind(i64::from(limit))
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows.iter().map(memory_from_row).collect::<Result<_, _>>()?)
    }

    /// Runs newest first, starting below `before` (a run's `seq`).
    pub async fn list_runs(
        &self,
        profile: &str,
        name: Option<&str>,
        before: i64,
        limit: u32,
    ) -> Result<Vec<RunRow>, LedgerError> {
        let name_clause = if name.is_some() {
            " AND loop_name = $4"
        } else {
            ""
        };
        let sql = format!(
            "SELECT run_id, loop_name, seq, rows, final, started_ts, last_ts, last_detail, gate_detail, gate_passed \
             FROM loop_runs WHERE profile_id = $1 AND seq < $2{name_clause} ORDER BY seq DESC LIMIT $3"
        );
        let mut q = sqlx::query(AssertSqlSafe(sql))
            .bind(profile)
            .bind(before)
            .bind(i64::from(limit));
        if let Some(n) = name {
            q = q.bind(n);
        }
        let rows = q.fetch_all(&self.db.pool).await?;
        Ok(rows.iter().map(run_from_row).collect::<Result<_, _>>()?)
    }

    /// The stored lap texts of a run, oldest first.
    pub async fn run_laps(
        &self,
        profile: &str,
        run_id: &str,
        limit: u32,
    ) -> Result<Vec<String>, LedgerError> {
        let rows = sqlx::query(
            "SELECT m.content FROM loop_laps l JOIN memories m ON m.id = l.memory_id \
             WHERE l.profile_id = $1 AND l.run_id = $2 ORDER BY l.memory_id LIMIT $3",
        )
        .bind(profile)
        .bind(run_id)
        .bind(i64::from(limit))
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| r.try_get::<String, _>("content"))
            .collect::<Result<_, _>>()?)
    }

    pub async fn list_profiles(&self) -> Result<Vec<(String, String)>, LedgerError> {
        let rows = sqlx::query("SELECT profile_id, created_at FROM profiles ORDER BY profile_id")
            .fetch_all(&self.db.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| Ok((r.try_get("profile_id")?, r.try_get("created_at")?)))
            .collect::<Result<_, sqlx::Error>>()?)
    }

    pub async fn profile_exists(&self, profile: &str) -> Result<bool, LedgerError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM profiles WHERE profile_id = $1")
            .bind(profile)
            .fetch_one(&self.db.pool)
            .await?;
        Ok(n > 0)
    }

    pub async fn create_profile(&self, profile: &str, created_at: &str) -> Result<(), LedgerError> {
        let done = sqlx::query(
            "INSERT INTO profiles (profile_id, created_at) VALUES ($1, $2) ON CONFLICT (profile_id) DO NOTHING",
        )
        .bind(profile)
        .bind(created_at)
        .execute(&self.db.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(LedgerError::ProfileExists(profile.to_string()));
        }
        Ok(())
    }

    /// Deletes a profile with every row it owns; returns the memories removed.
    pub async fn delete_profile(&self, profile: &str) -> Result<u64, LedgerError> {
        let mut tx = self.db.pool.begin().await?;
        for table in ["memory_tags", "loop_laps", "loop_runs"] {
            sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE profile_id = $1"
            )))
            .bind(profile)
            .execute(&mut *tx)
            .await?;
        }
        let memories = sqlx::query("DELETE FROM memories WHERE profile_id = $1")
            .bind(profile)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let profiles = sqlx::query("DELETE FROM profiles WHERE profile_id = $1")
            .bind(profile)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if profiles == 0 {
            return Err(LedgerError::UnknownProfile(profile.to_string()));
        }
        tx.commit().await?;
        Ok(memories)
    }

    /// A consistent copy of the database into a new file, taken while other
    /// connections keep reading and writing.
    pub async fn backup_to(&self, dest: &std::path::Path) -> Result<u64, LedgerError> {
        self.db.backup_to(dest).await.map_err(|e| match e {
            slm_runtime::db::BackupError::Unsupported => LedgerError::Unsupported(e.to_string()),
            slm_runtime::db::BackupError::BadPath => LedgerError::Invalid(e.to_string()),
            slm_runtime::db::BackupError::Db(e) => LedgerError::from(e),
        })
    }
}
