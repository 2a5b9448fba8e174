//! Adversarial cases the other suites leave open (receipt_suite.rs, exec.rs).
//!
//! * Forgery, at the gate the watcher asks every lap (GateStatus over gRPC),
//!   on SQLite and PostgreSQL: an agent-side process that writes rows straight
//!   into the database — replays of genuine receipts (new id / newer time;
//!   same id), edited evidence with a recomputed digest, correctly shaped rows
//!   signed with guessed keys, rows naming the agent as producer, job rows
//!   registered by a non-operator — never authenticate, each with its exact
//!   refusal. A control row signed with the real key shows the forged rows were
//!   refused for their signature and nothing else.
//! * Secrecy: a check that dumps its environment and reads its whole working
//!   folder sees neither the admission key (in any encoding) nor the operator
//!   token, nor where they live.
//! * Escapes through the whole pipeline (signed receipt + gate reason) and at
//!   the containment level in both modes: a uid/gid drop, a fork storm during
//!   the kill, a setsid double fork that keeps its environment. Every case ends
//!   with a /proc scan for a unique marker.
//! * Writes outside the private copy: what RECEIPT-31/32 require (no receipt,
//!   exact refusal), and what the spec leaves undetected (GAP-04).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use serde_json::Value;
use slm_proto::v1 as pb;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_receipt::checks::Checks;
use slm_receipt::domain::canon::{hex, sha256_hex};
use slm_receipt::domain::evidence::{self, Receipt};
use slm_receipt::domain::msg;
use slm_receipt::exec::{
    CheckSpec, ContainmentChoice, Execution, NetworkChoice, SandboxChoice, run_contained,
};
use slm_receipt::fsys::keys;
use slm_receipt::grpc::{OPERATOR_HEADER, ReceiptService};
use slm_receipt::store::Store;
use slm_runtime::testing::TestDatabase;
use slm_runtime::transport::{Transport, in_process};
use tokio_stream::StreamExt;
use tonic::Code;

const SURVIVOR: &str = "a process started by the check is still running: ";
const AGENT: &str = "agent-7";
const OPERATOR_REFUSAL: &str = "registering and running checks needs the operator credential (SLM_OPERATOR_TOKEN_FILE or SLM_OPERATOR_TOKEN)";

// ------------------------------------------------------------------ harness

struct Env {
    client: ReceiptClient<Transport>,
    token: String,
    project: tempfile::TempDir,
    data: tempfile::TempDir,
    store: Store,
    _pg: Option<TestDatabase>,
}

async fn env(backend: &str) -> Env {
    env_with(backend, SandboxChoice::Auto).await
}

async fn env_with(backend: &str, sandbox: SandboxChoice) -> Env {
    env_full(backend, sandbox, NetworkChoice::On).await
}

async fn env_full(backend: &str, sandbox: SandboxChoice, network: NetworkChoice) -> Env {
    let project = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (url, pg) = if backend == "sqlite" {
        (
            slm_runtime::config::sqlite_url(&data.path().join("receipt.db")),
            None,
        )
    } else {
        let pg = TestDatabase::create("slm_radv").await;
        (pg.url.clone(), Some(pg))
    };
    let store = Store::open(&url).await.unwrap();
    let token = keys::operator_token(data.path(), true).unwrap();
    let checks = Checks::new(store.clone(), data.path())
        .with_sandbox(sandbox)
        .with_network(network);
    let service = ReceiptService::new(checks, token.clone());
    let client = ReceiptClient::new(in_process(service.into_server()));
    write(project.path(), "src/app.txt", "version 1\n");
    write(
        project.path(),
        "check.sh",
        "test \"$(cat src/app.txt)\" = 'version 1'\n",
    );
    Env {
        client,
        token,
        project,
        data,
        store,
        _pg: pg,
    }
}

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

fn op<T>(token: &str, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert(OPERATOR_HEADER, token.parse().unwrap());
    r
}

fn now() -> String {
    slm_runtime::time::now_iso()
}

fn now_us() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000) as i64
}

fn iso_of_us(us: i64) -> String {
    slm_runtime::time::format_iso(
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).unwrap(),
    )
}

impl Env {
    fn registration(&self, watcher: &str, argv: &[&str]) -> pb::RegisterJobRequest {
        pb::RegisterJobRequest {
            task_id: "build".into(),
            watcher_name: watcher.into(),
            producer: "operator-checker".into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: self.project.path().display().to_string(),
            artifact_paths: vec!["src/**/*.txt".into()],
            check_paths: vec!["check.sh".into()],
            ..Default::default()
        }
    }

    async fn register(&mut self, req: pb::RegisterJobRequest) -> pb::Job {
        self.client
            .register_job(op(&self.token, req))
            .await
            .unwrap()
            .into_inner()
    }

    async fn run(
        &mut self,
        job_id: &str,
        timeout_s: f64,
    ) -> Result<pb::ExecutionReceipt, tonic::Status> {
        let mut s = self
            .client
            .run_check(op(
                &self.token,
                pb::RunCheckRequest {
                    job_id: job_id.into(),
                    timeout_s,
                },
            ))
            .await?
            .into_inner();
        while let Some(ev) = s.next().await {
            if let Some(pb::run_check_event::Event::Receipt(r)) = ev?.event {
                return Ok(r);
            }
        }
        panic!("run ended without a receipt")
    }

    async fn gate_as(&mut self, job_id: &str, watcher: &str, agent: &str, started: &str) -> String {
        let r = self
            .client
            .gate_status(pb::GateStatusRequest {
                contract_json: format!(r#"{{"job_id": "{job_id}"}}"#),
                watcher_name: watcher.into(),
                running_agent: agent.into(),
                watcher_started_at: started.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.passed, r.reason == msg::PASS, "{r:?}");
        r.reason
    }

    async fn gate(&mut self, job_id: &str, watcher: &str, started: &str) -> String {
        self.gate_as(job_id, watcher, AGENT, started).await
    }

    async fn newest(&self, job_id: &str) -> Option<Receipt> {
        let job = self.store.job(job_id).await.unwrap().unwrap();
        self.store.newest_receipt(&job).await.unwrap()
    }

    fn key(&self) -> Vec<u8> {
        keys::admission_key(self.data.path(), false).unwrap()
    }

    async fn receipt_count(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM loop_execution_receipts")
            .fetch_one(self.store.pool())
            .await
            .unwrap()
    }
}

/// The agent-side writer: a plain INSERT of a whole receipt row.
async fn insert_row(pool: &sqlx::AnyPool, r: &Receipt) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO loop_execution_receipts (receipt_id, profile_id, task_id, run_id, producer, command_digest, verdict, \
         exit_code, produced_at, produced_us, evidence_digest, evidence) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
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
    .execute(pool)
    .await
    .map(|_| ())
}

fn fresh_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A genuine row replayed as new: another id and a newer time, every other
/// byte (evidence, digest, signature) copied.
fn replayed(genuine: &Receipt) -> Receipt {
    let us = now_us();
    Receipt {
        receipt_id: fresh_id(),
        produced_at: iso_of_us(us),
        produced_us: us,
        ..genuine.clone()
    }
}

/// A correctly shaped PASS receipt for `job`, certifying `revision`, signed
/// with `key`, exactly as the runner would build it.
fn forged(job: &pb::Job, producer: &str, revision: &str, key: &[u8]) -> Receipt {
    let us = now_us();
    let unsigned = Receipt {
        seq: 0,
        receipt_id: fresh_id(),
        profile_id: job.profile_id.clone(),
        task_id: job.task_id.clone(),
        run_id: job.job_id.clone(),
        producer: producer.into(),
        command_digest: job.command_digest.clone(),
        verdict: String::new(),
        exit_code: 0,
        produced_at: iso_of_us(us),
        produced_us: us,
        evidence: String::new(),
        evidence_digest: String::new(),
    };
    let m = evidence::measure(0, None, b"", b"", &[1u8; 32], "cgroup-v2");
    evidence::sign(
        unsigned,
        &m,
        evidence::admission(&job.job_id, revision, &job.definition_digest),
        key,
    )
}

/// `r` with its evidence edited by `f`, the digest recomputed, a new id and
/// a newer time (the table is append-only, so an edit is a new row).
fn edited(r: &Receipt, f: impl FnOnce(&mut Value, &mut Receipt)) -> Receipt {
    let mut out = replayed(r);
    let mut ev: Value = serde_json::from_str(&r.evidence).unwrap();
    f(&mut ev, &mut out);
    out.evidence = slm_receipt::domain::canon::canonical(&ev);
    out.evidence_digest = sha256_hex(out.evidence.as_bytes());
    out
}

// ------------------------------------------------------------------ forgery

async fn replayed_and_edited_receipts_never_pass(backend: &str) {
    let mut e = env(backend).await;
    let pool = e.store.pool().clone();
    let started = now();
    let job = e
        .register(e.registration("build", &["sh", "check.sh"]))
        .await;
    let pass = e.run(&job.job_id, 10.0).await.unwrap();
    assert_eq!(pass.verdict, "PASS");
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::PASS);
    let genuine_pass = e.newest(&job.job_id).await.unwrap();

    // 1. Replay of the genuine PASS with a new id and a newer time: the id is
    //    signed, so the newest receipt is not authentic.
    insert_row(&pool, &replayed(&genuine_pass)).await.unwrap();
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::STALE);
    // 2. The same id with a newer time: the store refuses the duplicate.
    let mut same_id = replayed(&genuine_pass);
    same_id.receipt_id = genuine_pass.receipt_id.clone();
    insert_row(&pool, &same_id).await.unwrap_err();

    // The inputs change and the genuine run now FAILs.
    write(e.project.path(), "src/app.txt", "version 2\n");
    let fail = e.run(&job.job_id, 10.0).await.unwrap();
    assert_eq!((fail.verdict.as_str(), fail.exit_code), ("FAIL", 1));
    assert_eq!(
        e.gate(&job.job_id, "build", &started).await,
        "check FAILED (exit 1)"
    );
    let genuine_fail = e.newest(&job.job_id).await.unwrap();

    // 3. Replay of the old PASS after the inputs changed: not authentic.
    insert_row(&pool, &replayed(&genuine_pass)).await.unwrap();
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::STALE);

    // 4. Edited evidence, digest recomputed: the FAIL turned into a PASS.
    let flipped = edited(&genuine_fail, |ev, r| {
        ev["exit_code"] = 0.into();
        ev.as_object_mut().unwrap().remove("stop_reason");
        r.exit_code = 0;
        r.verdict = "PASS".into();
    });
    insert_row(&pool, &flipped).await.unwrap();
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::STALE);
    // ... or the old PASS re-pointed at the current revision.
    let live_revision = genuine_fail.evidence.clone();
    let live_revision: Value = serde_json::from_str(&live_revision).unwrap();
    let live_revision = live_revision["admission"]["revision_digest"]
        .as_str()
        .unwrap()
        .to_string();
    let repointed = edited(&genuine_pass, |ev, _| {
        ev["admission"]["revision_digest"] = live_revision.clone().into();
    });
    insert_row(&pool, &repointed).await.unwrap();
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::STALE);
    // ... or only the hashes of the output.
    let rehashed = edited(&genuine_pass, |ev, _| {
        ev["stdout_sha256"] = "0".repeat(64).into();
    });
    insert_row(&pool, &rehashed).await.unwrap();
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::STALE);
    // ... or the evidence edited and the old digest kept.
    let mut stale_digest = replayed(&genuine_fail);
    stale_digest.evidence = stale_digest
        .evidence
        .replace("\"exit_code\":1", "\"exit_code\":0");
    stale_digest.exit_code = 0;
    stale_digest.verdict = "PASS".into();
    insert_row(&pool, &stale_digest).await.unwrap();
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::STALE);

    // The append-only tables refuse the in-place variants outright.
    let err = sqlx::query("UPDATE loop_execution_receipts SET produced_us = produced_us + 1")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(msg::APPEND_ONLY), "{err}");

    // A genuine run on the restored inputs passes again: the forged rows did
    // not poison anything.
    write(e.project.path(), "src/app.txt", "version 1\n");
    assert_eq!(e.run(&job.job_id, 10.0).await.unwrap().verdict, "PASS");
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::PASS);
}

async fn rows_signed_with_guessed_keys_never_pass(backend: &str) {
    let mut e = env(backend).await;
    let pool = e.store.pool().clone();
    let started = now();
    let job = e
        .register(e.registration("build", &["sh", "check.sh"]))
        .await;
    // No genuine receipt at all: only the agent's rows.
    assert_eq!(
        e.gate(&job.job_id, "build", &started).await,
        msg::NO_RECEIPT
    );
    let token_bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&e.token[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let sha_token: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&sha256_hex(e.token.as_bytes())[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let guesses: Vec<(&str, Vec<u8>)> = vec![
        ("zero key", vec![0u8; 32]),
        ("empty key", Vec::new()),
        ("0x42 key", vec![0x42; 32]),
        ("the operator token's bytes", token_bytes),
        ("the operator token's text", e.token.as_bytes().to_vec()),
        ("sha256 of the operator token", sha_token),
        ("the job id", job.job_id.as_bytes().to_vec()),
    ];
    for (what, key) in &guesses {
        let row = forged(&job, &job.producer, &job.revision_digest, key);
        insert_row(&pool, &row).await.unwrap();
        assert_eq!(
            e.gate(&job.job_id, "build", &started).await,
            msg::STALE,
            "{what}"
        );
    }
    // A signature field that is not hex, or missing, is just as unauthentic.
    let mut odd = forged(&job, &job.producer, &job.revision_digest, &[0u8; 32]);
    let mut ev: Value = serde_json::from_str(&odd.evidence).unwrap();
    ev["admission"]["signature"] = "zz".into();
    odd.evidence = slm_receipt::domain::canon::canonical(&ev);
    odd.evidence_digest = sha256_hex(odd.evidence.as_bytes());
    insert_row(&pool, &odd).await.unwrap();
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::STALE);

    // Control: the same construction signed with the real key is accepted.
    // The rows above were refused for their key and nothing else. (Anyone
    // who can read the key file can forge: GAP-04, the same-user boundary.)
    let control = forged(&job, &job.producer, &job.revision_digest, &e.key());
    insert_row(&pool, &control).await.unwrap();
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::PASS);
    // A guessed-key row inserted after it shadows it again (newest only).
    let row = forged(&job, &job.producer, &job.revision_digest, &[7u8; 32]);
    insert_row(&pool, &row).await.unwrap();
    assert_eq!(e.gate(&job.job_id, "build", &started).await, msg::STALE);
}

async fn agent_as_producer_or_registrar_never_passes(backend: &str) {
    let mut e = env(backend).await;
    let pool = e.store.pool().clone();
    let started = now();

    // A job whose producer is the agent itself: even a genuine PASS is refused.
    let mut req = e.registration("self", &["sh", "check.sh"]);
    req.producer = AGENT.into();
    let own = e.register(req).await;
    assert_eq!(e.run(&own.job_id, 10.0).await.unwrap().verdict, "PASS");
    assert_eq!(
        e.gate(&own.job_id, "self", &started).await,
        msg::PRODUCER_IS_AGENT
    );
    // The same job asked for by another agent passes: the refusal is about
    // who is asking.
    assert_eq!(
        e.gate_as(&own.job_id, "self", "agent-8", &started).await,
        msg::PASS
    );

    // The operator's job, whose newest genuine receipt is a FAIL.
    write(e.project.path(), "src/app.txt", "version 2\n");
    let job = e
        .register(e.registration("build", &["sh", "check.sh"]))
        .await;
    assert_eq!(e.run(&job.job_id, 10.0).await.unwrap().verdict, "FAIL");
    assert_eq!(
        e.gate(&job.job_id, "build", &started).await,
        "check FAILED (exit 1)"
    );
    // The agent writes a PASS naming itself as producer, signed with the real
    // key even: it is not the job's receipt, so it is never even selected.
    let own_row = forged(&job, AGENT, &job.revision_digest, &e.key());
    insert_row(&pool, &own_row).await.unwrap();
    assert_eq!(
        e.gate(&job.job_id, "build", &started).await,
        "check FAILED (exit 1)"
    );

    // Registering needs the operator credential: none, or a wrong one.
    let err = e
        .client
        .register_job(e.registration("build", &["sh", "check.sh"]))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::PermissionDenied, OPERATOR_REFUSAL)
    );
    let wrong = "0".repeat(64);
    let err = e
        .client
        .register_job(op(&wrong, e.registration("build", &["sh", "check.sh"])))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::PermissionDenied, OPERATOR_REFUSAL)
    );
    // ... and so does running one (which is the only way to get it signed).
    let err = e
        .client
        .run_check(op(
            &wrong,
            pb::RunCheckRequest {
                job_id: job.job_id.clone(),
                timeout_s: 1.0,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::PermissionDenied, OPERATOR_REFUSAL)
    );

    // The agent registers its own job by writing the row directly (a copy of
    // the operator's with its own id and itself as producer) and backs it with
    // a receipt signed with a guessed key.
    let agent_job = fresh_id();
    sqlx::query(
        "INSERT INTO loop_gate_jobs (job_id, profile_id, task_id, watcher_name, producer, command_digest, command_json, \
         cwd, artifacts_json, revision_digest, registered_at, expires_at, registered_us, expires_us, allow_prestart_evidence, \
         artifact_paths_json, check_paths_json, definition_json, definition_digest) \
         SELECT $1, profile_id, task_id, watcher_name, $2, command_digest, command_json, cwd, artifacts_json, revision_digest, \
         registered_at, expires_at, registered_us, expires_us, 1, artifact_paths_json, check_paths_json, definition_json, \
         definition_digest FROM loop_gate_jobs WHERE job_id = $3",
    )
    .bind(&agent_job)
    .bind("agent-helper")
    .bind(&job.job_id)
    .execute(&pool)
    .await
    .unwrap();
    let mut as_job = job.clone();
    as_job.job_id = agent_job.clone();
    let row = forged(&as_job, "agent-helper", &job.revision_digest, &[0u8; 32]);
    insert_row(&pool, &row).await.unwrap();
    assert_eq!(e.gate(&agent_job, "build", &started).await, msg::STALE);
    // It supersedes the operator's job (a denial of service, never a pass).
    assert_eq!(
        e.gate(&job.job_id, "build", &started).await,
        msg::JOB_NOT_CURRENT
    );
    // A job row cannot be taken back or edited either.
    let err = sqlx::query("DELETE FROM loop_gate_jobs WHERE job_id = $1")
        .bind(&agent_job)
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(msg::IMMUTABLE), "{err}");
}

// ------------------------------------------------------------------ secrecy

/// Every printable form of the key that RECEIPT-33 names, plus uppercase hex.
fn key_forms(key: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("raw", key.to_vec()),
        ("hex", hex(key).into_bytes()),
        ("HEX", hex(key).to_uppercase().into_bytes()),
        ("base64", STANDARD.encode(key).into_bytes()),
        ("base64 no pad", STANDARD_NO_PAD.encode(key).into_bytes()),
        ("base64url", URL_SAFE.encode(key).into_bytes()),
        ("base64url no pad", URL_SAFE_NO_PAD.encode(key).into_bytes()),
    ]
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

async fn secrets_are_not_in_the_checks_environment_or_folder(backend: &str) {
    // Sandbox off: the dump leaves through a folder the sandbox would refuse
    // (what a sandboxed check may read is the test above).
    let mut e = env_with(backend, SandboxChoice::Off).await;
    // The dump goes to a folder the test owns (outside the project and the
    // data root) AND to stdout, whose hash the receipt records: equal hashes
    // prove the file is exactly what the harness captured.
    let out_dir = tempfile::tempdir().unwrap();
    let dump = out_dir.path().join("dump");
    write(
        e.project.path(),
        "check.sh",
        r#"out="$1"
{
  echo '== env'; env
  echo '== /proc/self/environ'; tr '\0' '\n' < /proc/self/environ
  echo '== tree'; ls -laR .
  for d in "$HOME" "$TMPDIR" "$XDG_CACHE_HOME" "$XDG_CONFIG_HOME" "$XDG_DATA_HOME"; do ls -la "$d"; done
  find . -type f | sort | while read -r f; do echo "== file $f"; cat "$f"; echo; done
} > "$out" 2>&1
cat "$out"
"#,
    );
    let job = e
        .register(e.registration("dump", &["sh", "check.sh", dump.to_str().unwrap()]))
        .await;
    let r = e.run(&job.job_id, 10.0).await.unwrap();
    let bytes = std::fs::read(&dump).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(r.verdict, "PASS", "{}: {text}", r.stop_reason);
    assert_eq!(
        r.stdout_sha256,
        sha256_hex(&bytes),
        "the dump is the output"
    );
    // It really looked: its environment, its token, its files.
    for seen in [
        "== env\n",
        "SLM_LOOP_RUN_TOKEN=",
        "HOME=",
        "== file ./check.sh",
        "== file ./src/app.txt",
        "version 1",
    ] {
        assert!(text.contains(seen), "{seen:?} missing from {text}");
    }
    let key = e.key();
    for (form, b) in key_forms(&key) {
        assert!(!contains(&bytes, &b), "admission key ({form}) visible");
    }
    assert!(!text.contains(&e.token), "operator token visible");
    assert!(
        !text.contains(&e.token.to_uppercase()),
        "operator token visible"
    );
    // Nor where the secrets live.
    let data = std::fs::canonicalize(e.data.path()).unwrap();
    for where_ in [
        data.display().to_string(),
        keys::KEY_DIR.to_string(),
        keys::TOKEN_FILE.to_string(),
        "SLM_OPERATOR_TOKEN".into(),
        "SLM_DATA_DIR".into(),
    ] {
        assert!(!text.contains(&where_), "{where_:?} visible to the check");
    }
}

// ------------------------------------------------------------------ escapes

/// A unique number usable as `sleep`'s argument: `<secs>.<12 digits>`.
fn marker(secs: u32) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let mix = (u64::from(std::process::id()) * 1_000_003
        + N.fetch_add(1, Ordering::Relaxed) * 7_919
        + nanos)
        % 1_000_000_000_000;
    format!("{secs}.{mix:012}")
}

/// Live (non-zombie) processes whose command line holds `marker`.
fn live_with_marker(marker: &str) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !cmdline.split(|&b| b == 0).any(|a| a == marker.as_bytes()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].chars().next())
            .unwrap_or('?');
        if state != 'Z' && state != 'X' {
            out.push((pid, stat));
        }
    }
    out
}

fn assert_no_marker(marker: &str) {
    let left = live_with_marker(marker);
    assert!(left.is_empty(), "survivors with marker {marker}: {left:?}");
}

/// `(name, pid)` from a survivor reason.
fn survivor(reason: &str) -> (String, i32) {
    let rest = reason
        .strip_prefix(SURVIVOR)
        .unwrap_or_else(|| panic!("not a survivor reason: {reason:?}"));
    let (name, pid) = rest.rsplit_once(" (").expect("name (pid)");
    (
        name.to_string(),
        pid.strip_suffix(')').unwrap().parse().unwrap(),
    )
}

/// The escape scripts; `{m}` is the marker.
fn uid_drop(m: &str) -> String {
    format!(
        "setpriv --reuid=65534 --regid=65534 --clear-groups -- sh -c 'id -u; id -g; sleep {m} &'; sleep 0.2; exit 0"
    )
}

fn python_setuid_daemon(m: &str) -> String {
    format!(
        "python3 -c 'import os, time\n\
         if os.fork() == 0:\n    os.setsid()\n    os.setgid(65534)\n    os.setuid(65534)\n    \
         if os.fork() == 0:\n        os.execvp(\"sleep\", [\"sleep\", \"{m}\"])\n    os._exit(0)\n\
         time.sleep(0.3)\n'; exit 0"
    )
}

/// Four detached forkers keep forking while the main process exits and the
/// kill runs; bounded (4 × 250) so a broken containment cannot exhaust pids.
fn fork_storm_exit(m: &str) -> String {
    format!(
        "for i in 1 2 3 4; do setsid sh -c 'i=0; while [ $i -lt 250 ]; do sleep {m} & i=$((i+1)); done; wait' & done; sleep 0.05; exit 0"
    )
}

/// The main process itself forks until the deadline kills it.
fn fork_storm_timeout(m: &str) -> String {
    format!(
        "i=0; while [ $i -lt 3000 ]; do sleep {m} & (setsid sleep {m} &); i=$((i+1)); done; wait"
    )
}

fn setsid_env_kept(m: &str) -> String {
    format!("setsid sh -c 'exec sleep {m}' & sleep 0.2; exit 0")
}

async fn escapes_fail_with_signed_reasons(backend: &str) {
    let mut e = env(backend).await;
    let started = now();
    type Case = (&'static str, fn(&str) -> String, f64, &'static str);
    let cases: [Case; 5] = [
        ("uiddrop", uid_drop, 10.0, SURVIVOR),
        ("pysetuid", python_setuid_daemon, 10.0, SURVIVOR),
        ("stormexit", fork_storm_exit, 10.0, SURVIVOR),
        (
            "stormtimeout",
            fork_storm_timeout,
            0.5,
            "Independent check timed out",
        ),
        ("setsidenv", setsid_env_kept, 10.0, SURVIVOR),
    ];
    for (watcher, script, timeout, want) in cases {
        let m = marker(30);
        let s = script(&m);
        let job = e.register(e.registration(watcher, &["sh", "-c", &s])).await;
        let r = e.run(&job.job_id, timeout).await.unwrap();
        assert_eq!((r.verdict.as_str(), r.exit_code), ("FAIL", -1), "{watcher}");
        assert!(
            r.stop_reason.starts_with(want),
            "{watcher}: {}",
            r.stop_reason
        );
        if want == SURVIVOR {
            let (name, pid) = survivor(&r.stop_reason);
            assert!(
                ["sleep", "sh", "python3", "setpriv"].contains(&name.as_str()),
                "{watcher}: {}",
                r.stop_reason
            );
            assert!(pid > 1, "{watcher}");
        } else {
            assert_eq!(r.stop_reason, "Independent check timed out");
        }
        assert_no_marker(&m);
        // The watcher's gate names exactly what the signed receipt found.
        assert_eq!(
            e.gate(&job.job_id, watcher, &started).await,
            r.stop_reason,
            "{watcher}"
        );
        eprintln!("{watcher}: {}", r.stop_reason);
    }
}

fn spec(
    mode: ContainmentChoice,
    script: &str,
    timeout: Duration,
) -> (tempfile::TempDir, CheckSpec) {
    let dir = tempfile::tempdir().unwrap();
    let spec = CheckSpec {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        cwd: dir.path().to_path_buf(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        timeout,
        containment: mode,
        sandbox: Default::default(),
    };
    (dir, spec)
}

async fn contained(mode: ContainmentChoice, script: &str, timeout: Duration) -> Execution {
    let (dir, spec) = spec(mode, script, timeout);
    let e = run_contained(spec).await;
    drop(dir);
    e
}

async fn uid_drop_survivor_is_killed(mode: ContainmentChoice) {
    let m = marker(30);
    let e = contained(mode, &uid_drop(&m), Duration::from_secs(10)).await;
    // The drop really happened (the grandchild ran as nobody).
    assert_eq!(e.stdout, b"65534\n65534\n", "{e:?}");
    assert_eq!(e.exit_code, -1, "{e:?}");
    let (name, _) = survivor(e.stop_reason.as_deref().unwrap());
    assert!(name == "sleep" || name == "sh", "{e:?}");
    assert_no_marker(&m);

    let m = marker(30);
    let e = contained(mode, &python_setuid_daemon(&m), Duration::from_secs(10)).await;
    assert_eq!(e.exit_code, -1, "{e:?}");
    survivor(e.stop_reason.as_deref().unwrap());
    assert_no_marker(&m);
}

async fn fork_storm_during_the_kill(mode: ContainmentChoice) {
    let m = marker(30);
    let t0 = std::time::Instant::now();
    let e = contained(mode, &fork_storm_exit(&m), Duration::from_secs(10)).await;
    assert_eq!(e.exit_code, -1, "{e:?}");
    survivor(e.stop_reason.as_deref().unwrap());
    assert_no_marker(&m);
    eprintln!("storm (exit): {:?} in {:?}", e.stop_reason, t0.elapsed());

    let m = marker(30);
    let t0 = std::time::Instant::now();
    let e = contained(mode, &fork_storm_timeout(&m), Duration::from_millis(500)).await;
    assert_eq!(e.exit_code, -1, "{e:?}");
    assert_eq!(
        e.stop_reason.as_deref(),
        Some("Independent check timed out")
    );
    assert_no_marker(&m);
    eprintln!("storm (timeout): done in {:?}", t0.elapsed());
}

async fn setsid_double_fork_keeping_env(mode: ContainmentChoice) {
    let m = marker(30);
    let e = contained(mode, &setsid_env_kept(&m), Duration::from_secs(10)).await;
    assert_eq!(e.exit_code, -1, "{e:?}");
    let (name, _) = survivor(e.stop_reason.as_deref().unwrap());
    assert!(name == "sleep" || name == "sh", "{e:?}");
    assert_no_marker(&m);
}

// ------------------------------------------------------------------ writes

/// With the sandbox off (or on a kernel without Landlock) the check can write
/// outside its copy; validation after the run still refuses every write that
/// touches what the receipt certifies or the key.
async fn writes_outside_the_private_copy(backend: &str) {
    let mut e = env_with(backend, SandboxChoice::Off).await;
    let started = now();
    let project: PathBuf = std::fs::canonicalize(e.project.path()).unwrap();
    let data: PathBuf = std::fs::canonicalize(e.data.path()).unwrap();

    // RECEIPT-32.2: the check writes into the live project's declared
    // artifact. No receipt is stored; the run is refused.
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "live",
            format!("printf tampered >> {}/src/app.txt\n", project.display()),
            msg::ARTIFACTS_CHANGED,
        ),
        // The same, keeping the size: rewritten in place, then through a
        // shared mapping (the post-run comparison may skip re-reading a
        // file only when its times prove it unchanged; these must not).
        (
            "live-same-size",
            format!(
                "printf 'version 2\\n' > {}/src/app.txt\n",
                project.display()
            ),
            msg::ARTIFACTS_CHANGED,
        ),
        (
            "live-mmap",
            format!(
                "python3 -c \"import mmap; f = open('{}/src/app.txt', 'r+b'); m = mmap.mmap(f.fileno(), 0); m[0:7] = b'VERSION'; m.flush()\"\n",
                project.display()
            ),
            msg::ARTIFACTS_CHANGED,
        ),
        // RECEIPT-32.4: the check edits or deletes its copied inputs.
        (
            "copy",
            "printf tampered >> src/app.txt\n".into(),
            msg::INPUTS_MODIFIED,
        ),
        ("deleted", "rm src/app.txt\n".into(), msg::INPUTS_MODIFIED),
        // RECEIPT-32.5: the check edits its copied definition.
        (
            "definition",
            "printf '# edited' >> check.sh\n".into(),
            msg::DEFINITION_MODIFIED_DURING,
        ),
        // RECEIPT-31: the check replaces the admission key (it runs as the
        // same user, GAP-04, so it can if it knows where the key lives).
        (
            "key",
            format!(
                "printf 0123456789abcdef0123456789abcdef > {}/loop-admission/admission.key\n",
                data.display()
            ),
            msg::KEY_CHANGED,
        ),
    ];
    for (watcher, script, refusal) in cases {
        write(&project, "src/app.txt", "version 1\n");
        write(&project, "check.sh", &script);
        // Older than the clock tick the copy starts in, so its stamp is
        // trusted and the post-run comparison relies on it.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let job = e
            .register(e.registration(watcher, &["sh", "check.sh"]))
            .await;
        let before = e.receipt_count().await;
        let err = e.run(&job.job_id, 10.0).await.unwrap_err();
        assert_eq!(
            (err.code(), err.message()),
            (Code::FailedPrecondition, refusal),
            "{watcher}"
        );
        assert_eq!(e.receipt_count().await, before, "{watcher}: no receipt");
        // Nothing was signed, so the watcher has nothing to pass on.
        assert_eq!(
            e.gate(&job.job_id, watcher, &started).await,
            msg::NO_RECEIPT,
            "{watcher}"
        );
    }
}

/// GAP-04 under the Landlock sandbox: the check may write only in its run
/// folder and may read neither the data root (key, databases) nor the live
/// project. Each attempt below must fail inside the check (the exit code
/// names the first one that got through), and nothing lands.
async fn the_sandbox_confines_writes_and_hides_secrets(backend: &str) {
    let mut e = env_with(backend, SandboxChoice::Landlock).await;
    let project: PathBuf = std::fs::canonicalize(e.project.path()).unwrap();
    let data: PathBuf = std::fs::canonicalize(e.data.path()).unwrap();
    if slm_receipt::exec::sandbox::landlock_abi() == 0 {
        // Required but impossible here: no run, and the reason says why.
        write(&project, "check.sh", "exit 0\n");
        let job = e
            .register(e.registration("nosandbox", &["sh", "check.sh"]))
            .await;
        let r = e.run(&job.job_id, 10.0).await.unwrap();
        assert_eq!(
            (r.verdict.as_str(), r.stop_reason.as_str()),
            (
                "FAIL",
                slm_receipt::exec::sandbox::REASON_SANDBOX_UNAVAILABLE
            )
        );
        return;
    }
    let outside = tempfile::tempdir().unwrap();
    let attempts = [
        format!("printf x > {}/undeclared.txt", project.display()),
        format!("printf x >> {}/src/app.txt", project.display()),
        format!("printf x > {}/planted.txt", data.display()),
        format!(
            "printf 0123456789abcdef > {}/loop-admission/admission.key",
            data.display()
        ),
        format!("printf x > {}/planted.txt", outside.path().display()),
        format!("mkdir {}/made", outside.path().display()),
        format!("rm -f {}/check.sh", project.display()),
        format!("cat {}/loop-admission/admission.key", data.display()),
        format!("ls {}", data.display()),
        format!("cat {}/src/app.txt", project.display()),
        format!("kill -0 {}", std::process::id()),
    ];
    let mut script = String::new();
    for (i, attempt) in attempts.iter().enumerate() {
        script += &format!("if {attempt} 2>/dev/null; then exit {}; fi\n", 10 + i);
    }
    // What the check may do: write in its folder, its own tmp, /dev/null,
    // /dev/stderr, read system files, take a multiprocessing lock (a POSIX
    // semaphore in /dev/shm).
    script += "printf ok > here.txt && printf ok > \"$TMPDIR/t\" && printf ok > /dev/null \
               && printf ok > /dev/stderr && cat /etc/passwd > /dev/null || exit 99\n\
               /usr/bin/python3 -c 'import multiprocessing as m; m.Lock()' || exit 98\n";
    write(&project, "check.sh", &script);
    let started = now();
    let job = e
        .register(e.registration("sandboxed", &["sh", "check.sh"]))
        .await;
    let key_before = std::fs::read(data.join("loop-admission/admission.key")).unwrap();
    // Past the clock tick of the folders just made, so the sandbox keeps the
    // grants it builds for the second run.
    std::thread::sleep(std::time::Duration::from_millis(30));
    // The second run gets the grants the sandbox kept from the first: they
    // must hide and confine as well.
    let mut runs = Vec::new();
    for round in ["first", "second"] {
        let r = e.run(&job.job_id, 10.0).await.unwrap();
        let escaped = usize::try_from(r.exit_code - 10)
            .ok()
            .and_then(|i| attempts.get(i));
        assert_eq!(
            (r.verdict.as_str(), r.exit_code),
            ("PASS", 0),
            "{round} run got through: {escaped:?} ({})",
            r.stop_reason
        );
        runs.push(r);
    }
    let r = runs.swap_remove(0);
    assert_eq!(
        r.sandbox,
        format!("landlock-v{}", slm_receipt::exec::sandbox::landlock_abi())
    );
    assert!(!project.join("undeclared.txt").exists());
    assert_eq!(
        std::fs::read_to_string(project.join("src/app.txt")).unwrap(),
        "version 1\n"
    );
    assert!(project.join("check.sh").exists());
    assert!(!data.join("planted.txt").exists());
    assert_eq!(
        std::fs::read(data.join("loop-admission/admission.key")).unwrap(),
        key_before
    );
    assert!(!outside.path().join("planted.txt").exists());
    assert!(!outside.path().join("made").exists());
    // The receipt is genuine and passes the gate like any other.
    assert_eq!(e.gate(&job.job_id, "sandboxed", &started).await, msg::PASS);

    // With the sandbox off the same script gets through at its first step:
    // the difference is the sandbox, not the script.
    let mut off = env_with(backend, SandboxChoice::Off).await;
    let project_off: PathBuf = std::fs::canonicalize(off.project.path()).unwrap();
    write(
        &project_off,
        "check.sh",
        &format!(
            "if printf x > {}/undeclared.txt; then exit 10; fi\n",
            project_off.display()
        ),
    );
    let job = off
        .register(off.registration("unsandboxed", &["sh", "check.sh"]))
        .await;
    let r = off.run(&job.job_id, 10.0).await.unwrap();
    assert_eq!((r.exit_code, r.sandbox.as_str()), (10, "none"));
    assert!(project_off.join("undeclared.txt").exists());
}

/// GAP-05, offline mode: the same check that reaches a local TCP listener
/// online cannot reach it offline, and the receipt says how it was cut off.
async fn offline_mode_cuts_the_network(backend: &str) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "exec /usr/bin/python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"\n"
    );
    // As root (CI) a network namespace; elsewhere a user namespace with one
    // (also "+netns"), or Landlock's TCP refusal ("+no-tcp").
    for (network, exit, suffixes) in [
        (NetworkChoice::On, 0, &[""][..]),
        (NetworkChoice::Off, 1, &["+netns", "+no-tcp"][..]),
    ] {
        let mut e = env_full(backend, SandboxChoice::Auto, network).await;
        write(e.project.path(), "check.sh", &script);
        let job = e.register(e.registration("net", &["sh", "check.sh"])).await;
        let r = e.run(&job.job_id, 10.0).await.unwrap();
        assert_eq!(r.exit_code, exit, "{network:?}: {}", r.stop_reason);
        assert!(
            suffixes.iter().any(|x| r.sandbox.ends_with(x)),
            "{network:?}: {}",
            r.sandbox
        );
        if network == NetworkChoice::On {
            assert!(!r.sandbox.contains('+'), "{}", r.sandbox);
        }
    }
    drop(listener);
}

// ------------------------------------------------------------------ wiring

macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name("sqlite").await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name("postgres").await })*
        }
    };
}

both_backends!(
    replayed_and_edited_receipts_never_pass,
    rows_signed_with_guessed_keys_never_pass,
    agent_as_producer_or_registrar_never_passes,
    secrets_are_not_in_the_checks_environment_or_folder,
    escapes_fail_with_signed_reasons,
    writes_outside_the_private_copy,
    the_sandbox_confines_writes_and_hides_secrets,
    offline_mode_cuts_the_network,
);

macro_rules! both_modes {
    ($($name:ident),* $(,)?) => {
        mod cgroup {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name(super::ContainmentChoice::CgroupV2).await })*
        }
        mod subreaper {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name(super::ContainmentChoice::Subreaper).await })*
        }
    };
}

both_modes!(
    uid_drop_survivor_is_killed,
    fork_storm_during_the_kill,
    setsid_double_fork_keeping_env,
);
