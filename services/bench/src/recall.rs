//! Recall on a ledger holding 100,000 memories (`recall.at_100k_ms`).
//!
//! Setup (not measured): a fresh SQLite ledger (`Store::open`, the real
//! migrations, so the full-text triggers index every row; with `--postgres`
//! also a throwaway PostgreSQL database, analysed after the fill as
//! autovacuum would within a minute) is filled with
//! 100,000 varied memories — 8 to 40 words each drawn with a Zipf-like skew
//! from a vocabulary of ~80 common engineering words and 4,000 generated rare
//! words, 1–3 tags, 50 sessions — in multi-row INSERTs of 500 rows,
//! 5,000 rows per transaction, on the store's own pool. (The store's public
//! writers are one memory per transaction (`remember`) or lap rows
//! (`append_laps`); the bulk fill writes the same columns and tag rows they
//! do.)
//!
//! Measured: one `Recall` RPC (default limit 10) through the in-process
//! `LedgerClient` → `LedgerService` → FTS5 candidates → coverage ranking, for
//! four realistic queries, round-robin; a sample is one call. A call that
//! takes longer than [`CALL_CAP`] (10 s) ends the area: the figure then
//! carries `"timed_out"` and only the samples taken before it.

use std::time::Instant;

use serde_json::{Map, Value, json};

use slm_ledger::domain::NewMemory;
use slm_ledger::{LedgerService, Store};
use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_runtime::config::sqlite_url;
use slm_runtime::transport::in_process;

use crate::{millis, round, summary};

pub const MEMORIES: usize = 100_000;
const ROWS_PER_TRANSACTION: usize = 5_000;
/// A call slower than this ends the area: its figure then carries
/// `"timed_out": {"after_ms", "query"}` and the samples taken before it.
pub const CALL_CAP: std::time::Duration = std::time::Duration::from_secs(10);

/// Common words, most frequent first.
const COMMON: &[&str] = &[
    "the",
    "build",
    "test",
    "database",
    "user",
    "error",
    "deploy",
    "config",
    "service",
    "api",
    "release",
    "fix",
    "migration",
    "cache",
    "timeout",
    "request",
    "server",
    "client",
    "log",
    "branch",
    "merge",
    "review",
    "latency",
    "query",
    "index",
    "schema",
    "failed",
    "passed",
    "flaky",
    "pipeline",
    "docker",
    "kubernetes",
    "rollback",
    "version",
    "dependency",
    "upgrade",
    "memory",
    "leak",
    "crash",
    "retry",
    "queue",
    "worker",
    "token",
    "auth",
    "login",
    "session",
    "prefers",
    "dark",
    "mode",
    "editor",
    "tabs",
    "spaces",
    "python",
    "rust",
    "typescript",
    "postgres",
    "sqlite",
    "redis",
    "nginx",
    "tls",
    "certificate",
    "expired",
    "disk",
    "full",
    "cpu",
    "spike",
    "alert",
    "oncall",
    "incident",
    "postmortem",
    "customer",
    "invoice",
    "payment",
    "refund",
    "email",
    "notification",
    "webhook",
    "staging",
    "production",
];

/// The queries timed, round-robin.
pub const QUERIES: [&str; 4] = [
    "why did the database migration fail in staging",
    "user prefers dark mode in the editor",
    "flaky test in the release pipeline",
    "how to rollback a kubernetes deploy after a certificate expired",
];

/// xorshift64*: deterministic, fast, good enough for synthetic text.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// A Zipf-like rank in 0..n: small ranks far more often.
    fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        // Log-uniform over 1..=n, then shifted to 0-based.
        ((n as f64).powf(u) as usize).saturating_sub(1).min(n - 1)
    }
}

fn rare_words(rng: &mut Rng, n: usize) -> Vec<String> {
    const SYL: &[&str] = &[
        "ka", "lo", "mi", "ne", "tor", "vex", "ra", "shi", "zu", "pel", "quo", "dan", "fi", "gor",
        "hal", "jin", "sta", "bre", "cly", "wen",
    ];
    (0..n)
        .map(|_| {
            let parts = 2 + rng.below(3);
            (0..parts).map(|_| SYL[rng.below(SYL.len())]).collect()
        })
        .collect()
}

struct Row {
    content: String,
    session: String,
    tags: Vec<String>,
    importance: i64,
}

fn memory(rng: &mut Rng, rare: &[String]) -> Row {
    let words = 8 + rng.below(33);
    let mut content = String::new();
    for w in 0..words {
        if w > 0 {
            content.push(' ');
        }
        if rng.below(100) < 65 {
            content.push_str(COMMON[rng.skewed(COMMON.len())]);
        } else {
            content.push_str(&rare[rng.skewed(rare.len())]);
        }
    }
    content.push('.');
    let tags = (0..1 + rng.below(3))
        .map(|_| COMMON[1 + rng.below(30)].to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    Row {
        content,
        session: format!("session-{}", rng.below(50)),
        tags,
        importance: 1 + rng.below(10) as i64,
    }
}

/// Fills `store` with `MEMORIES` memories in the default profile, through
/// the store's own batch insert (setup, not measured).
async fn fill(store: &Store) {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let rare = rare_words(&mut rng, 4_000);
    let created = slm_runtime::time::now_iso();
    let mut written = 0;
    while written < MEMORIES {
        let n = ROWS_PER_TRANSACTION.min(MEMORIES - written);
        let batch: Vec<NewMemory> = (0..n)
            .map(|_| {
                let r = memory(&mut rng, &rare);
                NewMemory {
                    profile_id: "default".into(),
                    content: r.content,
                    tags: r.tags,
                    session_id: r.session,
                    metadata: "{}".into(),
                    importance: r.importance as i32,
                    agent_id: "bench-agent".into(),
                }
            })
            .collect();
        store
            .remember_many(&batch, &created)
            .await
            .expect("fill the ledger");
        written += n;
    }
}

/// `(figures, details)`: always on a fresh SQLite ledger; also on a
/// throwaway PostgreSQL database when `postgres` (an admin URL) is given
/// (`recall.at_100k_ms_postgres`).
pub async fn run(quick: bool, postgres: Option<&str>) -> (Value, Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = sqlite_url(&dir.path().join("memory.db"));
    let (figure, mut details) = measure(&url, quick).await;
    let db_bytes: u64 = ["memory.db", "memory.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.path().join(f)).ok())
        .map(|m| m.len())
        .sum();
    details["db_bytes"] = json!(db_bytes);
    let mut figures = json!({"recall.at_100k_ms": figure});
    if let Some(admin) = postgres {
        match slm_runtime::testing::TestDatabase::create_on(admin, "slm_bench").await {
            Ok(db) => {
                let (figure, pg) = measure(&db.url, quick).await;
                figures["recall.at_100k_ms_postgres"] = figure;
                details["postgres"] = pg;
            }
            Err(why) => figures["recall.at_100k_ms_postgres"] = json!({"skipped": why}),
        }
    }
    (figures, details)
}

/// Fills a fresh ledger at `url` and measures recall on it.
async fn measure(url: &str, quick: bool) -> (Value, Value) {
    let (warmup, calls) = if quick { (8, 100) } else { (20, 400) };
    let store = Store::open(url).await.expect("open the ledger store");
    let t = Instant::now();
    fill(&store).await;
    let fill_s = t.elapsed().as_secs_f64();
    if store.db().backend == slm_runtime::db::Backend::Postgres {
        // What autovacuum does within a minute of such a fill; without
        // statistics the planner scans every row for a rare term.
        sqlx::query("ANALYZE memories")
            .execute(&store.db().pool)
            .await
            .expect("ANALYZE the filled ledger");
    }
    let plan = candidate_plan(&store).await;
    let mut client = LedgerClient::new(in_process(LedgerService::new(store.clone()).into_server()));

    let mut all = Vec::with_capacity(calls);
    let mut per_query: Vec<Vec<f64>> = vec![Vec::new(); QUERIES.len()];
    let mut hits = vec![0usize; QUERIES.len()];
    let mut timed_out = None;
    for i in 0..warmup + calls {
        let q = i % QUERIES.len();
        let req = pb::RecallRequest {
            profile_id: String::new(),
            query: QUERIES[q].into(),
            limit: 10,
            ..Default::default()
        };
        let start = Instant::now();
        let r = match tokio::time::timeout(CALL_CAP, client.recall(req)).await {
            Ok(r) => r.expect("Recall").into_inner(),
            Err(_) => {
                // The statement keeps running on the store's worker; this
                // area runs last so it cannot skew another, and the store
                // is not closed (closing would wait for it).
                timed_out = Some(QUERIES[q]);
                break;
            }
        };
        let ms = millis(start);
        hits[q] = r.results.len();
        if i >= warmup {
            all.push(ms);
            per_query[q].push(ms);
        }
    }
    if timed_out.is_none() {
        store.close().await;
    }
    let mut queries = Map::new();
    for (q, samples) in per_query.into_iter().enumerate() {
        queries.insert(
            QUERIES[q].into(),
            json!({"ms": summary(samples), "results": hits[q]}),
        );
    }
    let mut figure = summary(all);
    if let Some(q) = timed_out {
        figure["timed_out"] = json!({"after_ms": CALL_CAP.as_millis() as u64, "query": q});
    }
    let details = json!({
        "memories": MEMORIES,
        "fill_s": round(fill_s, 2),
        "candidate_query_plan": plan,
        "limit": 10,
        "queries": queries,
    });
    (figure, details)
}

/// The plan the database picks for the ledger's candidate query of two
/// common terms (diagnostic; SQLite only).
async fn candidate_plan(store: &Store) -> Vec<String> {
    if store.db().backend != slm_runtime::db::Backend::Sqlite {
        return Vec::new();
    }
    sqlx::query(
        "EXPLAIN QUERY PLAN SELECT m.id FROM memories_fts CROSS JOIN memories m ON m.id = memories_fts.rowid \
         WHERE memories_fts MATCH $1 AND m.profile_id = $2 ORDER BY memories_fts.rowid DESC LIMIT $3",
    )
    .bind("\"database\" AND \"migration\"")
    .bind("default")
    .bind(50i64)
    .fetch_all(&store.db().pool)
    .await
    .map(|rows| {
        rows.iter()
            .filter_map(|r| sqlx::Row::try_get::<String, _>(r, 3).ok())
            .collect()
    })
    .unwrap_or_default()
}
