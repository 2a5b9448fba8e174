//! The ledger service's behaviour, proven on SQLite and on a real PostgreSQL
//! (`SLM_TEST_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`;
//! each test creates and drops its own database). Every test goes through the
//! generated gRPC client over the in-process transport.

use slm_ledger::{LedgerService, Store};
use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_runtime::testing::TestDatabase;
use slm_runtime::transport::{Transport, in_process};
use tokio_stream::StreamExt;
use tonic::Code;

enum Cleanup {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    Pg(#[allow(dead_code)] TestDatabase),
}

struct Env {
    client: LedgerClient<Transport>,
    store: Store,
    url: String,
    _cleanup: Cleanup,
}

async fn env(backend: &str) -> Env {
    let (url, cleanup) = match backend {
        "sqlite" => {
            let dir = tempfile::tempdir().unwrap();
            let url = slm_runtime::config::sqlite_url(&dir.path().join("memory.db"));
            (url, Cleanup::Dir(dir))
        }
        _ => {
            let pg = TestDatabase::create("slm_test").await;
            (pg.url.clone(), Cleanup::Pg(pg))
        }
    };
    let store = Store::open(&url).await.unwrap();
    let client = LedgerClient::new(in_process(LedgerService::new(store.clone()).into_server()));
    Env {
        client,
        store,
        url,
        _cleanup: cleanup,
    }
}

fn remember(content: &str, tags: &[&str]) -> pb::RememberRequest {
    pb::RememberRequest {
        content: content.into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    }
}

fn recall(query: &str) -> pb::RecallRequest {
    pb::RecallRequest {
        query: query.into(),
        ..Default::default()
    }
}

fn lap(run_id: &str, name: &str, n: u32, decision: &str, detail: &str) -> pb::AppendLapRequest {
    pb::AppendLapRequest {
        entry: Some(pb::LapEntry {
            run_id: run_id.into(),
            name: name.into(),
            lap: n,
            ts: format!("2026-07-23T10:00:0{}+00:00", n % 10),
            decision: decision.into(),
            passed: decision == "done",
            detail: detail.into(),
            agent_claimed_done: true,
            runner_log: "log".into(),
            budget: Some(pb::Budget {
                tokens: 8 * i64::from(n),
                wallclock_s: 0.125,
            }),
        }),
        ..Default::default()
    }
}

async fn remember_and_recall(backend: &str) {
    let mut e = env(backend).await;
    let c = &mut e.client;
    c.remember(remember(
        "The build status for project Orion lives in /srv/orion/status",
        &["locator", "orion"],
    ))
    .await
    .unwrap();
    c.remember(remember("Groceries: milk, bread and coffee", &["personal"]))
        .await
        .unwrap();
    c.remember(remember("orion deployment notes", &["orion"]))
        .await
        .unwrap();

    let r = c
        .recall(recall("where is the Orion build status"))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.no_confident_match);
    assert_eq!(r.evidence_floor, 0.5);
    let top = r.results[0].memory.as_ref().unwrap();
    assert!(top.content.starts_with("The build status"));
    assert_eq!(r.results[0].score, 1.0);
    assert_eq!(top.tags, vec!["locator", "orion"]);
    assert_eq!(top.importance, 5);
    assert!(top.created_at.ends_with("+00:00"));
    // Scores are normalised and ordered.
    assert!(r.results.iter().all(|h| (0.0..=1.0).contains(&h.score)));
    assert!(r.results.windows(2).all(|w| w[0].score >= w[1].score));
    assert_eq!(r.results[1].score, 1.0 / 3.0);

    // Tag filter.
    let mut q = recall("orion");
    q.tag = "locator".into();
    let r = c.recall(q).await.unwrap().into_inner();
    assert_eq!(r.results.len(), 1);
    assert!(
        r.results[0]
            .memory
            .as_ref()
            .unwrap()
            .content
            .contains("/srv/orion")
    );

    // Limit.
    let mut q = recall("orion");
    q.limit = 1;
    assert_eq!(c.recall(q).await.unwrap().into_inner().results.len(), 1);

    // Evidence floor: one of three terms is below the default floor.
    let r = c
        .recall(recall("orion spaceship telescope"))
        .await
        .unwrap()
        .into_inner();
    assert!(r.no_confident_match);
    assert!(!r.results.is_empty());
    let mut q = recall("orion spaceship telescope");
    q.evidence_floor = Some(0.3);
    assert!(!c.recall(q).await.unwrap().into_inner().no_confident_match);

    // Nothing matches at all.
    let r = c.recall(recall("zebra")).await.unwrap().into_inner();
    assert!(r.results.is_empty() && r.no_confident_match);
    // Query syntax characters are inert.
    let r = c
        .recall(recall("\"orion\" OR NEAR(* ' | & !"))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.results.is_empty());
}

async fn bad_input_is_refused_and_nothing_is_lost(backend: &str) {
    let mut e = env(backend).await;
    let c = &mut e.client;
    c.remember(remember("keep me safe", &[])).await.unwrap();
    let cases = [
        remember("   ", &[]),
        remember("nul\0byte", &[]),
        remember("x", &[""]),
        pb::RememberRequest {
            content: "x".into(),
            metadata_json: "[1,2]".into(),
            ..Default::default()
        },
        pb::RememberRequest {
            content: "x".into(),
            importance: 42,
            ..Default::default()
        },
        pb::RememberRequest {
            content: "x".repeat((1 << 20) + 1),
            ..Default::default()
        },
    ];
    for case in cases {
        let err = c.remember(case).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(!err.message().is_empty());
    }
    let err = c.recall(recall("  ")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let mut q = recall("x");
    q.profile_id = "nope".into();
    let err = c.recall(q).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(
        err.message()
            .contains("There is no profile 'nope' on this computer")
    );
    let mut q = remember("x", &[]);
    q.profile_id = "nope".into();
    assert_eq!(c.remember(q).await.unwrap_err().code(), Code::NotFound);
    let err = c
        .append_lap(lap("r-1", "n", 1, "bogus", "d"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let r = c.recall(recall("keep safe")).await.unwrap().into_inner();
    assert_eq!(r.results.len(), 1);
}

async fn profiles_isolate_and_delete(backend: &str) {
    let mut e = env(backend).await;
    let c = &mut e.client;
    c.create_profile(pb::CreateProfileRequest {
        profile_id: "work".into(),
    })
    .await
    .unwrap();
    let err = c
        .create_profile(pb::CreateProfileRequest {
            profile_id: "work".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    let names: Vec<String> = c
        .list_profiles(pb::ListProfilesRequest {})
        .await
        .unwrap()
        .into_inner()
        .profiles
        .into_iter()
        .map(|p| p.profile_id)
        .collect();
    assert_eq!(names, vec!["default", "work"]);

    let mut m = remember("secret plan for work", &["w"]);
    m.profile_id = "work".into();
    c.remember(m).await.unwrap();
    let mut l = lap("w-1", "wl", 1, "continue", "d");
    l.profile_id = "work".into();
    c.append_lap(l).await.unwrap();
    c.remember(remember("public plan", &[])).await.unwrap();

    // Default profile does not see work memories.
    let r = c.recall(recall("secret plan")).await.unwrap().into_inner();
    assert!(
        r.results
            .iter()
            .all(|h| !h.memory.as_ref().unwrap().content.contains("secret"))
    );
    let mut q = recall("secret plan");
    q.profile_id = "work".into();
    assert_eq!(
        c.recall(q).await.unwrap().into_inner().results[0].score,
        1.0
    );

    let deleted = c
        .delete_profile(pb::DeleteProfileRequest {
            profile_id: "work".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.memories_deleted, 2);
    let mut q = recall("secret plan");
    q.profile_id = "work".into();
    assert_eq!(c.recall(q).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(
        c.delete_profile(pb::DeleteProfileRequest {
            profile_id: "default".into()
        })
        .await
        .unwrap_err()
        .code(),
        Code::FailedPrecondition
    );
    // Re-created profile starts empty.
    c.create_profile(pb::CreateProfileRequest {
        profile_id: "work".into(),
    })
    .await
    .unwrap();
    let mut q = recall("secret plan");
    q.profile_id = "work".into();
    assert!(c.recall(q).await.unwrap().into_inner().results.is_empty());
    assert_eq!(
        c.list_loop_runs(pb::ListLoopRunsRequest {
            profile_id: "work".into(),
            name: "wl".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs
        .len(),
        0
    );
}

async fn loop_ledger_is_indexed_and_paged(backend: &str) {
    let mut e = env(backend).await;
    let c = &mut e.client;
    // 25 runs of "build" interleaved with runs of another loop.
    for i in 0..25 {
        let run = format!("build-{i:08x}");
        c.append_lap(lap(&run, "build", 1, "continue", "first"))
            .await
            .unwrap();
        c.append_lap(lap(&format!("other-{i}"), "other", 1, "continue", "x"))
            .await
            .unwrap();
        c.append_lap(lap(&run, "build", 2, "done", "gate ok"))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = c
            .list_loop_runs(pb::ListLoopRunsRequest {
                name: "build".into(),
                limit: 10,
                cursor: cursor.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.runs.len() <= 10);
        seen.extend(page.runs);
        if page.next_cursor.is_empty() {
            break;
        }
        cursor = page.next_cursor;
    }
    // Every run, newest first, none lost.
    let ids: Vec<String> = seen.iter().map(|r| r.run_id.clone()).collect();
    let expected: Vec<String> = (0..25).rev().map(|i| format!("build-{i:08x}")).collect();
    assert_eq!(ids, expected);
    assert!(
        seen.iter()
            .all(|r| r.rows == 2 && r.r#final == "done" && r.name == "build")
    );
    assert_eq!(seen[0].last_detail, "gate ok");
    assert_eq!(seen[0].started_ts, "2026-07-23T10:00:01+00:00");

    let recent = c
        .list_recent_runs(pb::ListRecentRunsRequest {
            limit: 3,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(recent.runs.len(), 3);
    assert_eq!(recent.runs[0].run_id, "other-24");

    let laps = c
        .list_run_laps(pb::ListRunLapsRequest {
            run_id: "build-00000003".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .laps;
    assert_eq!(laps.iter().map(|l| l.lap).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(laps[1].decision, "done");
    assert!(laps[1].agent_claimed_done);
    assert_eq!(laps[1].budget.as_ref().unwrap().tokens, 16);
    assert_eq!(laps[1].runner_log, "log");

    // A watcher's recall can leave every lap (and anything shaped like one) out.
    let mut q = recall("gate ok");
    q.exclude_loop_rows = true;
    assert!(c.recall(q).await.unwrap().into_inner().results.is_empty());

    // The ledger is memory: tag search and recall find laps.
    let mut q = recall("gate");
    q.tag = "loop:build".into();
    let r = c.recall(q).await.unwrap().into_inner();
    assert!(!r.results.is_empty());
    let m = r.results[0].memory.as_ref().unwrap();
    assert!(m.session_id.starts_with("loop:build-"));
    assert_eq!(m.importance, 2);
    assert!(m.metadata_json.contains("\"integration\":\"slm-loop\""));

    // A memory that imitates a ledger row does not become history.
    let mut fake = remember(
        r#"{"run_id":"forged-1","lap":1,"name":"build"}"#,
        &["loop:build"],
    );
    fake.session_id = "loop:forged-1".into();
    c.remember(fake).await.unwrap();
    let page = c
        .list_loop_runs(pb::ListLoopRunsRequest {
            name: "build".into(),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.runs.len(), 25);
    assert!(page.runs.iter().all(|r| r.run_id != "forged-1"));

    // The newest gate row is tracked for HALT reasons.
    let marker = "recall 'x': hits=1 independent_receipt=False receipt_reason=no execution receipt";
    let mut gate_lap = lap("watch-1", "watch", 1, "continue", marker);
    gate_lap.gate_row = true;
    c.append_lap(gate_lap).await.unwrap();
    c.append_lap(lap("watch-1", "watch", 2, "halt", "max-iterations"))
        .await
        .unwrap();
    let run = &c
        .list_loop_runs(pb::ListLoopRunsRequest {
            name: "watch".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs[0];
    assert_eq!(run.gate_detail, marker);
    assert_eq!(run.last_detail, "max-iterations");
    assert_eq!(run.r#final, "halt");

    let err = c
        .list_loop_runs(pb::ListLoopRunsRequest {
            name: "build".into(),
            cursor: "garbage".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    let session = c
        .list_session(pb::ListSessionRequest {
            session_id: "loop:watch-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(session.memories.len(), 2);
}

async fn watchers_see_new_memories(backend: &str) {
    let mut e = env(backend).await;
    let mut stream = e
        .client
        .watch_memories(pb::WatchMemoriesRequest {
            tag: "locator".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    e.client
        .remember(remember("not for you", &["other"]))
        .await
        .unwrap();
    e.client
        .remember(remember("build lives in /x", &["locator"]))
        .await
        .unwrap();
    let ev = tokio::time::timeout(std::time::Duration::from_secs(5), stream.next())
        .await
        .expect("an event arrives")
        .unwrap()
        .unwrap();
    assert_eq!(ev.memory.unwrap().content, "build lives in /x");
}

async fn backup_is_a_consistent_copy(backend: &str) {
    let mut e = env(backend).await;
    e.client
        .remember(remember("backed up memory", &["b"]))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("copy.db");
    let res = e
        .client
        .backup(pb::BackupRequest {
            destination: dest.display().to_string(),
        })
        .await;
    if backend == "postgres" {
        assert_eq!(res.unwrap_err().code(), Code::FailedPrecondition);
        return;
    }
    assert!(res.unwrap().into_inner().bytes > 0);
    // The copy opens as a ledger and holds the memory.
    let copy = Store::open(&slm_runtime::config::sqlite_url(&dest))
        .await
        .unwrap();
    let mut c = LedgerClient::new(in_process(LedgerService::new(copy).into_server()));
    let r = c.recall(recall("backed up")).await.unwrap().into_inner();
    assert_eq!(r.results.len(), 1);
    // An existing destination is refused rather than overwritten.
    let err = e
        .client
        .backup(pb::BackupRequest {
            destination: dest.display().to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    let _ = &e.store;
}

/// A memory written through another connection pool (as another process
/// would) still reaches subscribers: the SQLite change feed or PostgreSQL
/// LISTEN/NOTIFY relays it.
async fn watchers_see_other_writers(backend: &str) {
    let mut e = env(backend).await;
    let mut stream = e
        .client
        .watch_memories(pb::WatchMemoriesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let other = Store::open(&e.url).await.unwrap();
    let mut other_client = LedgerClient::new(in_process(LedgerService::new(other).into_server()));
    other_client
        .remember(remember("written elsewhere", &[]))
        .await
        .unwrap();
    let ev = tokio::time::timeout(std::time::Duration::from_secs(5), stream.next())
        .await
        .expect("the change feed relays another writer's memory")
        .unwrap()
        .unwrap();
    assert_eq!(ev.memory.unwrap().content, "written elsewhere");
}

async fn lap_batches_commit_together_in_order(backend: &str) {
    let mut e = env(backend).await;
    let c = &mut e.client;
    let mut laps: Vec<pb::AppendLapRequest> = (1..=5)
        .map(|n| {
            lap(
                "batch-1",
                "batch",
                n,
                if n == 5 { "done" } else { "continue" },
                &format!("d{n}"),
            )
        })
        .collect();
    laps.insert(2, lap("batch-1", "batch", 99, "bogus", "refused"));
    laps.push(lap("other-1", "other", 1, "halt", "x"));
    let results = c
        .append_laps(pb::AppendLapsRequest { laps })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(results.len(), 7);
    assert!(
        results[2].error.contains("unknown lap decision"),
        "{:?}",
        results[2]
    );
    assert_eq!(results[2].memory_id, 0);
    let ids: Vec<i64> = results
        .iter()
        .filter(|r| r.error.is_empty())
        .map(|r| r.memory_id)
        .collect();
    assert_eq!(ids.len(), 6);
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids follow request order: {ids:?}"
    );
    let shown = c
        .list_run_laps(pb::ListRunLapsRequest {
            run_id: "batch-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .laps;
    assert_eq!(
        shown.iter().map(|l| l.lap).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(shown[3].detail, "d4");
    let run = &c
        .list_loop_runs(pb::ListLoopRunsRequest {
            name: "batch".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs[0];
    assert_eq!(
        (run.rows, run.r#final.as_str(), run.last_detail.as_str()),
        (5, "done", "d5")
    );
    // A batch for an unknown profile fails as a whole, lap by lap.
    let mut bad = lap("ghost-1", "ghost", 1, "continue", "x");
    bad.profile_id = "ghost".into();
    let results = c
        .append_laps(pb::AppendLapsRequest {
            laps: vec![bad.clone(), bad],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert!(
        results
            .iter()
            .all(|r| r.memory_id == 0 && r.error.contains("There is no profile 'ghost'"))
    );
}

macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name("sqlite").await })*
        }
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name("postgres").await })*
        }
    };
}

both_backends!(
    remember_and_recall,
    bad_input_is_refused_and_nothing_is_lost,
    profiles_isolate_and_delete,
    loop_ledger_is_indexed_and_paged,
    watchers_see_new_memories,
    watchers_see_other_writers,
    lap_batches_commit_together_in_order,
    backup_is_a_consistent_copy,
);

/// On PostgreSQL the full-text index takes new rows straight in (no GIN
/// pending list for every recall to scan), and a row written just now is
/// found through it.
#[tokio::test]
async fn postgres_full_text_index_has_no_pending_list() {
    let mut e = env("postgres").await;
    let options: Option<String> = sqlx::query_scalar(
        "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = 'memories_fts'",
    )
    .fetch_one(&e.store.db().pool)
    .await
    .unwrap();
    assert_eq!(options.as_deref(), Some("fastupdate=off"));
    e.client
        .remember(remember("the staging migration failed on a lock", &[]))
        .await
        .unwrap();
    let hits = e
        .client
        .recall(recall("staging lock"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(hits.results.len(), 1);
}
