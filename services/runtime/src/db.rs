//! Database pools from a URL (SQLite or PostgreSQL behind one `AnyPool`) and
//! per-service migrations run once at start, never on a request path.

use std::time::Duration;

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyPool, Connection, Executor, SqlSafeStr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The `VALUES` list of a multi-row insert: `rows` tuples of `cols`
    /// parameters, bound in row order. SQLite gets anonymous `?`: sqlx looks
    /// up every numbered parameter's name, and SQLite finds a name by a
    /// linear scan, so `$N` costs O(n²) in the parameter count (43 % of a
    /// 200-lap batch's time went there). PostgreSQL needs `$N`.
    pub fn values_list(self, rows: usize, cols: usize) -> String {
        let mut out = String::with_capacity(rows * (cols * 6 + 4));
        for r in 0..rows {
            if r > 0 {
                out.push_str(", ");
            }
            out.push('(');
            for c in 0..cols {
                if c > 0 {
                    out.push_str(", ");
                }
                match self {
                    Backend::Sqlite => out.push('?'),
                    Backend::Postgres => {
                        use std::fmt::Write;
                        let _ = write!(out, "${}", r * cols + c + 1);
                    }
                }
            }
            out.push(')');
        }
        out
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("unsupported database URL {0:?}: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    #[error("cannot open the database: {0}")]
    Open(#[source] sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot create the database directory {0}: {1}")]
    Dir(String, std::io::Error),
    #[error("the disk is full (no space left on device) under {0}: {1}")]
    DiskFull(String, #[source] sqlx::Error),
}

/// One migration step, embedded in the binary.
pub struct Step {
    pub version: i64,
    pub description: &'static str,
    pub sql: &'static str,
}

/// A service's migrations for both backends. Each service keeps its own
/// bookkeeping table, so several services may share one PostgreSQL database.
pub struct MigrationSet {
    pub service: &'static str,
    pub sqlite: &'static [Step],
    pub postgres: &'static [Step],
}

/// An open pool and the backend it talks to.
#[derive(Clone, Debug)]
pub struct Db {
    pub pool: AnyPool,
    pub backend: Backend,
    /// The database file, for an SQLite file database.
    pub sqlite_file: Option<std::path::PathBuf>,
    url: String,
}

/// How long an SQLite writer waits for the lock before failing.
const SQLITE_BUSY_TIMEOUT_MS: u64 = 5_000;

impl Db {
    pub fn backend_of(url: &str) -> Result<Backend, DbError> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            Err(DbError::UnsupportedUrl(url.to_string()))
        }
    }

    /// Opens a pool. SQLite files get WAL, `synchronous=NORMAL` (durable at
    /// every checkpoint, crash-safe), a busy timeout and foreign keys.
    pub async fn open(url: &str) -> Result<Self, DbError> {
        install_default_drivers();
        let backend = Self::backend_of(url)?;
        let pool = match backend {
            Backend::Sqlite => {
                let memory = url.contains(":memory:") || url.contains("mode=memory");
                if !memory {
                    ensure_parent_dir(url)?;
                    // One direct connection first: a pool would retry a
                    // failing open until its acquire timeout and then report
                    // only the timeout, not why (a full disk, say).
                    let mut probe = sqlx::AnyConnection::connect(url)
                        .await
                        .map_err(|e| open_error(url, e))?;
                    probe
                        .execute(sqlx::AssertSqlSafe(sqlite_pragmas()))
                        .await
                        .map_err(|e| open_error(url, e))?;
                    let _ = probe.close().await;
                }
                AnyPoolOptions::new()
                    // An in-memory database exists once per connection.
                    .max_connections(if memory { 1 } else { 4 })
                    .min_connections(if memory { 1 } else { 0 })
                    .idle_timeout(if memory {
                        None
                    } else {
                        Some(Duration::from_secs(600))
                    })
                    .max_lifetime(None)
                    // No ping before each acquire: it is one more round trip
                    // to the connection's worker thread per statement, and a
                    // local file has no link that could have dropped.
                    .test_before_acquire(false)
                    // A connection whose transaction could not be ended
                    // (a COMMIT and then a ROLLBACK failing on a full disk)
                    // is closed, not reused: its next "transaction" would
                    // be a savepoint inside the dead one, acknowledged and
                    // never committed.
                    .after_release(|conn, _meta| {
                        Box::pin(async move {
                            let clean = !conn.is_in_transaction();
                            if !clean {
                                tracing::warn!(
                                    "closing an SQLite connection left inside a failed transaction"
                                );
                            }
                            Ok(clean)
                        })
                    })
                    .after_connect(|conn, _meta| {
                        Box::pin(async move {
                            conn.execute(sqlx::AssertSqlSafe(sqlite_pragmas())).await?;
                            Ok(())
                        })
                    })
                    .connect(url)
                    .await
                    .map_err(|e| open_error(url, e))?
            }
            Backend::Postgres => AnyPoolOptions::new()
                .max_connections(8)
                .acquire_timeout(Duration::from_secs(10))
                .connect(url)
                .await
                .map_err(DbError::Open)?,
        };
        let sqlite_file = (backend == Backend::Sqlite)
            .then(|| sqlite_path(url))
            .flatten();
        Ok(Self {
            pool,
            backend,
            sqlite_file,
            url: url.to_string(),
        })
    }

    /// Opens and brings the schema up to date.
    pub async fn open_migrated(url: &str, set: &MigrationSet) -> Result<Self, DbError> {
        let db = Self::open(url).await?;
        db.migrate(set).await?;
        Ok(db)
    }

    pub async fn migrate(&self, set: &MigrationSet) -> Result<(), DbError> {
        let steps = match self.backend {
            Backend::Sqlite => set.sqlite,
            Backend::Postgres => set.postgres,
        };
        let migrations = steps
            .iter()
            .map(|s| {
                Migration::new(
                    s.version,
                    s.description.into(),
                    MigrationType::Simple,
                    s.sql.into_sql_str(),
                    false,
                )
            })
            .collect();
        let mut migrator = Migrator::with_migrations(migrations);
        migrator.dangerous_set_table_name(format!("_slm_migrations_{}", set.service));
        migrator.run(&self.pool).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Where other processes' writes to this database show up: the SQLite
    /// file, or the PostgreSQL channel the service's insert trigger notifies.
    pub fn change_source(&self, channel: &'static str) -> Option<crate::change_feed::ChangeSource> {
        use crate::change_feed::ChangeSource;
        match self.backend {
            Backend::Sqlite => self.sqlite_file.clone().map(ChangeSource::SqliteFile),
            Backend::Postgres => Some(ChangeSource::Postgres {
                url: self.url.clone(),
                channel,
            }),
        }
    }

    /// Writes a consistent copy of an SQLite database to a new file while
    /// other connections keep reading and writing (`VACUUM INTO`). Returns
    /// the size of the copy.
    pub async fn backup_to(&self, dest: &std::path::Path) -> Result<u64, BackupError> {
        if self.backend != Backend::Sqlite {
            return Err(BackupError::Unsupported);
        }
        let path = dest.to_str().ok_or(BackupError::BadPath)?;
        if path.contains('\0') {
            return Err(BackupError::BadPath);
        }
        self.pool
            .execute(sqlx::AssertSqlSafe(format!(
                "VACUUM INTO '{}'",
                path.replace('\'', "''")
            )))
            .await
            .map_err(BackupError::Db)?;
        Ok(std::fs::metadata(dest).map(|m| m.len()).unwrap_or(0))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("backups of a PostgreSQL database are made with pg_dump")]
    Unsupported,
    #[error("backup destination must be valid UTF-8 without NUL")]
    BadPath,
    #[error("backup failed: {0}")]
    Db(sqlx::Error),
}

/// The file of an `sqlite://PATH?...` URL (None for in-memory databases).
fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let path = path.split('?').next().unwrap_or(path);
    (!path.is_empty() && !path.contains(":memory:")).then(|| std::path::PathBuf::from(path))
}

fn sqlite_pragmas() -> String {
    format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; \
         PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}; PRAGMA foreign_keys=ON;"
    )
}

/// SQLite reports a full disk as SQLITE_FULL, or, when the shared-memory
/// or WAL file cannot grow, as a generic I/O error: name the cause when the
/// file system holding the database has no space left.
fn open_error(url: &str, e: sqlx::Error) -> DbError {
    match sqlite_path(url).and_then(|p| p.parent().map(std::path::Path::to_path_buf)) {
        Some(dir) if is_disk_full(&e) || no_space_left(&dir) => {
            DbError::DiskFull(dir.display().to_string(), e)
        }
        _ => DbError::Open(e),
    }
}

/// SQLITE_FULL (13) or PostgreSQL's disk_full (53100).
pub fn is_disk_full(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            matches!(d.code().as_deref(), Some("13") | Some("53100"))
        }
        sqlx::Error::Io(io) => io.raw_os_error() == Some(28),
        _ => false,
    }
}

/// Less than 64 KiB free for unprivileged writers.
fn no_space_left(dir: &std::path::Path) -> bool {
    rustix::fs::statvfs(dir).is_ok_and(|s| s.f_bavail.saturating_mul(s.f_frsize) < 64 * 1024)
}

fn ensure_parent_dir(url: &str) -> Result<(), DbError> {
    let Some(path) = sqlite_path(url) else {
        return Ok(());
    };
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
        && !parent.exists()
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| DbError::Dir(parent.display().to_string(), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Backend;

    #[test]
    fn values_lists_bind_in_row_order() {
        assert_eq!(Backend::Sqlite.values_list(2, 3), "(?, ?, ?), (?, ?, ?)");
        assert_eq!(
            Backend::Postgres.values_list(2, 3),
            "($1, $2, $3), ($4, $5, $6)"
        );
        assert_eq!(Backend::Postgres.values_list(1, 1), "($1)");
    }
}
