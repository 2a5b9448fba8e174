//! Forgery at the watcher level, end to end: one real `slm serve`, watchers
//! started through `RunLoop` (the path `slm_loop_run` takes), and an
//! agent-side *process* (`sqlite3` / `psql`) that writes receipt rows
//! straight into the service's database. No forged row ever makes a watcher
//! DONE; each watcher's HALT names the exact refusal. A control row signed
//! with the real key (which only the operator's user can read) does reach
//! DONE, so the forged rows were refused for their signature alone.

#[path = "support/serve.rs"]
mod serve;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use slm_receipt::domain::canon::{canonical, sha256_hex};
use slm_receipt::domain::evidence::{self, Receipt};
use slm_receipt::domain::msg;

use serve::*;

const AGENT: &str = "agent-7";
const WALL_S: f64 = 12.0;
const POLL_S: f64 = 0.5;

/// Runs SQL as the agent: a separate process writing the database directly.
fn agent_sql(s: &Server, sql: &str) -> Result<String, String> {
    let out = match &s.pg {
        Some(pg) => Command::new("psql")
            .args([pg.url.as_str(), "-v", "ON_ERROR_STOP=1", "-At", "-c", sql])
            .output()
            .unwrap(),
        None => Command::new("sqlite3")
            .args(["-cmd", ".timeout 10000", "-bail"])
            .arg(s.data.join("receipt.db"))
            .arg(sql)
            .output()
            .unwrap(),
    };
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && out.stderr.is_empty() {
        Ok(text)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Now, as the receipt's ISO text and microseconds.
fn now_pair() -> (String, i64) {
    let t = slm_runtime::time::parse_iso(&slm_runtime::time::now_iso()).unwrap();
    let us = (t.unix_timestamp_nanos() / 1000) as i64;
    (slm_runtime::time::format_iso(t), us)
}

fn fresh_id() -> String {
    uuid_like()
}

fn uuid_like() -> String {
    let mut b = [0u8; 16];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn insert_sql(r: &Receipt) -> String {
    format!(
        "INSERT INTO loop_execution_receipts (receipt_id, profile_id, task_id, run_id, producer, command_digest, verdict, \
         exit_code, produced_at, produced_us, evidence_digest, evidence) VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
        q(&r.receipt_id),
        q(&r.profile_id),
        q(&r.task_id),
        q(&r.run_id),
        q(&r.producer),
        q(&r.command_digest),
        q(&r.verdict),
        r.exit_code,
        q(&r.produced_at),
        r.produced_us,
        q(&r.evidence_digest),
        q(&r.evidence)
    )
}

/// The agent reads a genuine row (it can: same database).
fn read_row(s: &Server, receipt_id: &str) -> Receipt {
    let sql = format!(
        "SELECT profile_id || '|' || task_id || '|' || run_id || '|' || producer || '|' || command_digest || '|' || \
         verdict || '|' || exit_code || '|' || produced_at || '|' || produced_us || '|' || evidence_digest \
         FROM loop_execution_receipts WHERE receipt_id = {}",
        q(receipt_id)
    );
    let line = agent_sql(s, &sql).unwrap();
    let f: Vec<&str> = line.split('|').collect();
    assert_eq!(f.len(), 10, "{line}");
    let evidence = agent_sql(
        s,
        &format!(
            "SELECT evidence FROM loop_execution_receipts WHERE receipt_id = {}",
            q(receipt_id)
        ),
    )
    .unwrap();
    Receipt {
        seq: 0,
        receipt_id: receipt_id.into(),
        profile_id: f[0].into(),
        task_id: f[1].into(),
        run_id: f[2].into(),
        producer: f[3].into(),
        command_digest: f[4].into(),
        verdict: f[5].into(),
        exit_code: f[6].parse().unwrap(),
        produced_at: f[7].into(),
        produced_us: f[8].parse().unwrap(),
        evidence_digest: f[9].into(),
        evidence,
    }
}

fn replayed(genuine: &Receipt) -> Receipt {
    let (at, us) = now_pair();
    Receipt {
        receipt_id: fresh_id(),
        produced_at: at,
        produced_us: us,
        ..genuine.clone()
    }
}

fn forged(job: &slm_proto::v1::Job, key: &[u8]) -> Receipt {
    let (at, us) = now_pair();
    let unsigned = Receipt {
        seq: 0,
        receipt_id: fresh_id(),
        profile_id: job.profile_id.clone(),
        task_id: job.task_id.clone(),
        run_id: job.job_id.clone(),
        producer: job.producer.clone(),
        command_digest: job.command_digest.clone(),
        verdict: String::new(),
        exit_code: 0,
        produced_at: at,
        produced_us: us,
        evidence: String::new(),
        evidence_digest: String::new(),
    };
    let m = evidence::measure(0, None, b"", b"", &[1u8; 32], "cgroup-v2");
    evidence::sign(
        unsigned,
        &m,
        evidence::admission(&job.job_id, &job.revision_digest, &job.definition_digest),
        key,
    )
}

async fn forgery_never_reaches_done(postgres: bool) {
    let s = Server::start(postgres).await;
    let mut rc = s.receipt().await;
    let mut ledger = s.ledger().await;
    remember_locator(&mut ledger).await;

    // Five jobs, one watcher each.
    let p = |n: &str, exit| project(&s.dir.path().join(n), exit);
    let replay_dir = p("replay", 0);
    let replay = register(
        &s,
        &mut rc,
        registration(&replay_dir, "replay", "operator-checker"),
    )
    .await;
    let edit_dir = p("edit", 0);
    let edit = register(
        &s,
        &mut rc,
        registration(&edit_dir, "edit", "operator-checker"),
    )
    .await;
    let guess = register(
        &s,
        &mut rc,
        registration(&p("guess", 0), "guess", "operator-checker"),
    )
    .await;
    let own = register(&s, &mut rc, registration(&p("own", 0), "own", AGENT)).await;
    let control = register(
        &s,
        &mut rc,
        registration(&p("control", 0), "control", "operator-checker"),
    )
    .await;

    // Genuine PASSes, before the watchers start (stale for them anyway):
    // the material the agent will replay and edit.
    let old_pass = run_check(&s, &mut rc, &replay.job_id).await.unwrap();
    assert_eq!(old_pass.verdict, "PASS");
    let edit_pass = run_check(&s, &mut rc, &edit.job_id).await.unwrap();
    assert_eq!(edit_pass.verdict, "PASS");
    // The inputs change: the genuine check now fails for both.
    write(&replay_dir, "src/app.txt", "broken\n");
    write(&edit_dir, "src/app.txt", "broken\n");

    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let mut watchers = Vec::new();
    for (name, job) in [
        ("replay", &replay),
        ("edit", &edit),
        ("guess", &guess),
        ("own", &own),
        ("control", &control),
    ] {
        let spec = watch_spec(name, &job.job_id, AGENT, WALL_S, POLL_S);
        let engine = s.engine().await;
        let tx = tx.clone();
        watchers.push((
            name,
            tokio::spawn(async move { watch(engine, spec, tx).await }),
        ));
    }
    for _ in 0..watchers.len() {
        rx.recv().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;

    // Genuine FAILs after the watchers started.
    let fail = run_check(&s, &mut rc, &replay.job_id).await.unwrap();
    assert_eq!((fail.verdict.as_str(), fail.exit_code), ("FAIL", 1));
    let edit_fail = run_check(&s, &mut rc, &edit.job_id).await.unwrap();
    assert_eq!(edit_fail.verdict, "FAIL");

    // Replay: the old PASS row again, new id and newer time...
    let genuine = read_row(&s, &old_pass.receipt_id);
    agent_sql(&s, &insert_sql(&replayed(&genuine))).unwrap();
    // ... and with its own id (refused by the store).
    let mut same = replayed(&genuine);
    same.receipt_id = genuine.receipt_id.clone();
    let err = agent_sql(&s, &insert_sql(&same)).unwrap_err();
    assert!(
        err.to_lowercase().contains("unique"),
        "a duplicate receipt id is refused: {err}"
    );
    // Edited evidence: the genuine FAIL flipped to PASS, digest recomputed.
    let genuine_fail = read_row(&s, &edit_fail.receipt_id);
    let mut flipped = replayed(&genuine_fail);
    let mut ev: Value = serde_json::from_str(&genuine_fail.evidence).unwrap();
    ev["exit_code"] = 0.into();
    ev.as_object_mut().unwrap().remove("stop_reason");
    flipped.evidence = canonical(&ev);
    flipped.evidence_digest = sha256_hex(flipped.evidence.as_bytes());
    flipped.exit_code = 0;
    flipped.verdict = "PASS".into();
    agent_sql(&s, &insert_sql(&flipped)).unwrap();
    // A correctly shaped row signed with a guessed key.
    agent_sql(&s, &insert_sql(&forged(&guess, &[0u8; 32]))).unwrap();
    // The agent's own job: a genuine PASS run by the operator.
    assert_eq!(
        run_check(&s, &mut rc, &own.job_id).await.unwrap().verdict,
        "PASS"
    );
    // Control: the same construction as `guess`, signed with the real key.
    agent_sql(&s, &insert_sql(&forged(&control, &s.admission_key()))).unwrap();

    let mut results = Vec::new();
    for (name, h) in watchers {
        let (laps, o) = tokio::time::timeout(Duration::from_secs(60), h)
            .await
            .unwrap()
            .unwrap();
        let want = match name {
            "replay" | "edit" | "guess" => Some(msg::STALE),
            "own" => Some(msg::PRODUCER_IS_AGENT),
            _ => None,
        };
        match want {
            Some(reason) => {
                assert_eq!(
                    (
                        o.status.as_str(),
                        o.bound_reason.as_str(),
                        o.reason.as_str(),
                        o.receipt_reason.as_str()
                    ),
                    ("HALT", "wallclock", reason, reason),
                    "{name}: {laps:?}"
                );
                assert!(laps.iter().all(|l| !l.passed), "{name}");
            }
            None => assert_eq!(
                (
                    o.status.as_str(),
                    o.reason.as_str(),
                    o.receipt_reason.as_str()
                ),
                ("DONE", "gate-passed", msg::PASS),
                "{name}: {laps:?}"
            ),
        }
        results.push(format!("{name}: {} / {}", o.status, o.reason));
    }
    eprintln!("{results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_rows_never_reach_done_sqlite() {
    forgery_never_reaches_done(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_rows_never_reach_done_postgres() {
    forgery_never_reaches_done(true).await;
}
