//! The receipt service end to end through its gRPC client, on SQLite and on a
//! real PostgreSQL: registration refusals, contained runs, signed receipts,
//! every gate reason, the operator credential and tampering.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use slm_proto::v1 as pb;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_receipt::checks::Checks;
use slm_receipt::domain::msg;
use slm_receipt::exec::SandboxChoice;
use slm_receipt::fsys::keys;
use slm_receipt::grpc::{OPERATOR_HEADER, ReceiptService};
use slm_receipt::store::Store;
use slm_runtime::testing::TestDatabase;
use slm_runtime::transport::{Transport, in_process};
use tokio_stream::StreamExt;
use tonic::Code;

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
    let project = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (url, pg) = if backend == "sqlite" {
        (
            slm_runtime::config::sqlite_url(&data.path().join("receipt.db")),
            None,
        )
    } else {
        let pg = TestDatabase::create("slm_rtest").await;
        (pg.url.clone(), Some(pg))
    };
    let store = Store::open(&url).await.unwrap();
    let token = keys::operator_token(data.path(), true).unwrap();
    let checks = Checks::new(store.clone(), data.path()).with_sandbox(sandbox);
    let service = ReceiptService::new(checks, token.clone());
    let client = ReceiptClient::new(in_process(service.into_server()));
    // A small project: sources the agent may change, a pinned check.
    write(project.path(), "src/app.txt", "version 1\n");
    write(project.path(), "src/lib/util.txt", "util\n");
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

impl Env {
    fn cwd(&self) -> String {
        self.project.path().display().to_string()
    }

    fn registration(&self, watcher: &str, argv: &[&str]) -> pb::RegisterJobRequest {
        pb::RegisterJobRequest {
            task_id: "build".into(),
            watcher_name: watcher.into(),
            producer: "operator-checker".into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: self.cwd(),
            artifact_paths: vec!["src/**/*.txt".into()],
            check_paths: vec!["check.sh".into()],
            ..Default::default()
        }
    }

    async fn register(&mut self, req: pb::RegisterJobRequest) -> Result<pb::Job, tonic::Status> {
        self.client
            .register_job(op(&self.token, req))
            .await
            .map(|r| r.into_inner())
    }

    async fn run(
        &mut self,
        job_id: &str,
        timeout_s: f64,
    ) -> Result<(Vec<String>, pb::ExecutionReceipt), tonic::Status> {
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
        let mut progress = Vec::new();
        while let Some(ev) = s.next().await {
            match ev?.event {
                Some(pb::run_check_event::Event::Progress(p)) => progress.push(p),
                Some(pb::run_check_event::Event::Receipt(r)) => return Ok((progress, r)),
                None => {}
            }
        }
        panic!("run ended without a receipt")
    }

    async fn gate(
        &mut self,
        job_id: &str,
        watcher: &str,
        agent: &str,
        started: &str,
    ) -> (bool, String) {
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
        (r.passed, r.reason)
    }
}

fn now() -> String {
    slm_runtime::time::now_iso()
}

async fn pass_then_every_gate_reason(backend: &str) {
    let mut e = env(backend).await;
    let started = now();
    let job = e
        .register(e.registration("build", &["sh", "check.sh"]))
        .await
        .unwrap();
    assert_eq!(job.job_id.len(), 32);
    assert!(job.current);
    assert_eq!(
        job.argv[0], "/usr/bin/sh",
        "bare names resolve at registration"
    );
    assert_eq!(job.artifact_paths, vec!["src/**/*.txt"]);

    assert_eq!(
        e.gate(&job.job_id, "build", "agent", &started).await,
        (false, msg::NO_RECEIPT.into())
    );
    let (progress, receipt) = e.run(&job.job_id, 10.0).await.unwrap();
    assert!(
        progress.iter().any(|p| p.starts_with("running ")),
        "{progress:?}"
    );
    assert_eq!(receipt.verdict, "PASS");
    assert_eq!(receipt.exit_code, 0);
    assert_eq!(receipt.containment, "cgroup-v2");
    assert_eq!(receipt.definition_digest, job.definition_digest);
    // Output hashes only: sha256 of empty output.
    assert_eq!(
        receipt.stdout_sha256,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        e.gate(&job.job_id, "build", "agent", &started).await,
        (true, msg::PASS.into())
    );

    // Contract, watcher and producer rules.
    let r = e
        .client
        .gate_status(pb::GateStatusRequest {
            contract_json: format!(r#"{{"job_id": "{}"}}"#, job.job_id.to_uppercase()),
            watcher_name: "build".into(),
            running_agent: "agent".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.reason, msg::CONTRACT_REQUIRED);
    assert_eq!(
        e.gate(&job.job_id, "other", "agent", &started).await.1,
        msg::JOB_NOT_CURRENT
    );
    assert_eq!(
        e.gate(&job.job_id, "build", "operator-checker", &started)
            .await
            .1,
        msg::PRODUCER_IS_AGENT
    );
    // A watcher that started after the receipt: stale.
    let later = now();
    assert_eq!(
        e.gate(&job.job_id, "build", "agent", &later).await.1,
        msg::STALE
    );

    // The agent edits a declared artifact: the receipt no longer certifies it.
    write(e.project.path(), "src/lib/util.txt", "util 2\n");
    assert_eq!(
        e.gate(&job.job_id, "build", "agent", &started).await.1,
        msg::REVISION_CHANGED
    );
    write(e.project.path(), "src/lib/util.txt", "util\n");
    assert!(e.gate(&job.job_id, "build", "agent", &started).await.0);

    // A change that makes the pinned check fail: FAIL with its exit code.
    write(e.project.path(), "src/app.txt", "version 2\n");
    let (_, failed) = e.run(&job.job_id, 10.0).await.unwrap();
    assert_eq!((failed.verdict.as_str(), failed.exit_code), ("FAIL", 1));
    assert_eq!(
        e.gate(&job.job_id, "build", "agent", &started).await.1,
        "check FAILED (exit 1)"
    );

    // Editing the project's copy of the check changes nothing: it is pinned.
    write(e.project.path(), "check.sh", "exit 0\n");
    let (_, still) = e.run(&job.job_id, 10.0).await.unwrap();
    assert_eq!(still.verdict, "FAIL");

    // A newer registration for the same watcher supersedes the old job.
    write(e.project.path(), "src/app.txt", "version 1\n");
    let newer = e
        .register(e.registration("build", &["sh", "check.sh"]))
        .await
        .unwrap();
    assert_eq!(
        e.gate(&job.job_id, "build", "agent", &started).await.1,
        msg::JOB_NOT_CURRENT
    );
    let err = e.run(&job.job_id, 10.0).await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::FailedPrecondition, msg::NOT_CURRENT)
    );
    let (_, ok) = e.run(&newer.job_id, 10.0).await.unwrap();
    assert_eq!(
        ok.verdict, "PASS",
        "the new registration pins the edited check"
    );
    assert_eq!(
        e.gate(&newer.job_id, "build", "agent", &started).await.1,
        msg::PASS
    );

    let listed = e
        .client
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .jobs;
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].job.as_ref().unwrap().job_id, newer.job_id);
    assert!(listed[0].job.as_ref().unwrap().current && !listed[1].job.as_ref().unwrap().current);
    assert_eq!(listed[0].latest.as_ref().unwrap().verdict, "PASS");
    let err = e.run("0".repeat(32).as_str(), 1.0).await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::NotFound, msg::NO_SUCH_JOB)
    );
}

async fn operator_credential_is_required(backend: &str) {
    let mut e = env(backend).await;
    let err = e
        .client
        .register_job(e.registration("w", &["sh", "check.sh"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    let err = e
        .client
        .register_job(op(
            &"0".repeat(64),
            e.registration("w", &["sh", "check.sh"]),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    let job = e
        .register(e.registration("w", &["sh", "check.sh"]))
        .await
        .unwrap();
    let err = e
        .client
        .run_check(pb::RunCheckRequest {
            job_id: job.job_id.clone(),
            timeout_s: 1.0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert_eq!(e.gate(&job.job_id, "w", "a", "").await.1, msg::NO_RECEIPT);
}

async fn registration_refusals_leave_nothing_behind(backend: &str) {
    let mut e = env(backend).await;
    let p = e.project.path().to_path_buf();
    std::fs::create_dir(p.join("other")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", p.join("other/link.txt")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    std::fs::write(p.join("run.sh"), "exit 0").unwrap();
    std::fs::set_permissions(p.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();

    let base = e.registration("w", &["sh", "check.sh"]);
    let with = |f: &dyn Fn(&mut pb::RegisterJobRequest)| {
        let mut r = base.clone();
        f(&mut r);
        r
    };
    let cases: Vec<(pb::RegisterJobRequest, String)> = vec![
        (with(&|r| r.producer = " ".into()), msg::IDENTITY.into()),
        (with(&|r| r.argv = vec![]), msg::ARGV.into()),
        (with(&|r| r.ttl_seconds = Some(0)), msg::LIFETIME.into()),
        (with(&|r| r.ttl_seconds = Some(-1)), msg::LIFETIME.into()),
        (
            with(&|r| r.ttl_seconds = Some(86_401)),
            msg::LIFETIME.into(),
        ),
        (
            with(&|r| r.argv = vec![p.join("run.sh").display().to_string()]),
            msg::EXECUTABLE.into(),
        ),
        (
            with(&|r| r.argv = vec!["./run.sh".into()]),
            msg::EXECUTABLE.into(),
        ),
        (
            with(&|r| r.argv = vec!["sh".into(), "../escape.sh".into()]),
            msg::TRAVERSAL.into(),
        ),
        (
            with(&|r| r.artifact_paths = vec!["../x".into()]),
            msg::INPUT_CONFINED.into(),
        ),
        (
            with(&|r| r.artifact_paths = vec![".slm-runtime/x".into()]),
            msg::INPUT_CONFINED.into(),
        ),
        (
            with(&|r| r.artifact_paths = vec!["/etc/passwd".into()]),
            msg::INPUT_OUTSIDE.into(),
        ),
        (
            with(&|r| r.artifact_paths = vec!["nothing/*.txt".into()]),
            "No declared input matches nothing/*.txt".into(),
        ),
        (
            with(&|r| r.artifact_paths = vec!["other".into()]),
            msg::INPUT_TREE_SYMLINK.into(),
        ),
        (
            with(&|r| r.artifact_paths = vec!["other/link.txt".into()]),
            msg::INPUT_SYMLINK.into(),
        ),
        (
            with(&|r| r.artifact_paths = vec!["fifo".into()]),
            msg::INPUT_SPECIAL.into(),
        ),
        (
            with(&|r| r.check_paths = vec!["check.sh".into(), "src/app.txt".into()]),
            msg::DISTINCT.into(),
        ),
    ];
    for (i, (req, want)) in cases.into_iter().enumerate() {
        let err = e.register(req).await.unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "case {i}");
        assert_eq!(err.message(), want, "case {i}");
    }
    // Data root inside the project.
    let inside = p.join("data");
    std::fs::create_dir(&inside).unwrap();
    let checks = Checks::new(e.store.clone(), &inside);
    let err = checks
        .register(slm_receipt::checks::Registration {
            profile_id: "default".into(),
            task_id: "t".into(),
            watcher_name: "w".into(),
            producer: "p".into(),
            argv: vec!["sh".into(), "check.sh".into()],
            cwd: e.cwd(),
            artifact_paths: vec!["src/app.txt".into()],
            check_paths: vec!["check.sh".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), msg::DATA_ROOT_INSIDE);
    // No orphan definitions, no job rows.
    let defs = e.data.path().join("loop-checks/definitions");
    assert!(!defs.exists() || std::fs::read_dir(&defs).unwrap().count() == 0);
    let jobs = e
        .client
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .jobs;
    assert!(jobs.is_empty());
}

async fn escapes_and_timeouts_fail_the_check(backend: &str) {
    let mut e = env(backend).await;
    let started = now();
    let cases: [(&str, &[&str], f64, &str); 3] = [
        (
            "bg",
            &["sh", "-c", "sleep 30 & exit 0"],
            10.0,
            "a process started by the check is still running: sleep (",
        ),
        (
            "detach",
            &[
                "sh",
                "-c",
                "setsid sh -c 'exec env -i sleep 30' & sleep 0.2; exit 0",
            ],
            10.0,
            "a process started by the check is still running: ",
        ),
        ("slow", &["sleep", "5"], 0.3, "Independent check timed out"),
    ];
    for (watcher, argv, timeout, reason) in cases {
        let job = e.register(e.registration(watcher, argv)).await.unwrap();
        let (_, r) = e.run(&job.job_id, timeout).await.unwrap();
        assert_eq!(r.verdict, "FAIL", "{watcher}");
        assert_eq!(r.exit_code, -1, "{watcher}");
        assert!(
            r.stop_reason.starts_with(reason),
            "{watcher}: {}",
            r.stop_reason
        );
        let (passed, why) = e.gate(&job.job_id, watcher, "agent", &started).await;
        assert!(!passed);
        assert_eq!(why, r.stop_reason);
    }
}

async fn forgery_and_tampering_never_pass(backend: &str) {
    let mut e = env(backend).await;
    let started = now();
    let job = e
        .register(e.registration("build", &["sh", "check.sh"]))
        .await
        .unwrap();
    let (_, r) = e.run(&job.job_id, 10.0).await.unwrap();
    assert_eq!(r.verdict, "PASS");
    let pool = e.store.pool().clone();
    // Receipts and registrations are append-only in the database itself.
    let err = sqlx::query("UPDATE loop_execution_receipts SET verdict = 'PASS'")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(msg::APPEND_ONLY), "{err}");
    let err = sqlx::query("DELETE FROM loop_execution_receipts")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(msg::APPEND_ONLY), "{err}");
    let err = sqlx::query("UPDATE loop_gate_jobs SET producer = 'x'")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(msg::IMMUTABLE), "{err}");

    // An agent with database access appends a newer receipt signed with a
    // guessed key: the newest receipt is not authentic, so nothing passes.
    let forged_evidence = r#"{"admission":{"definition_digest":"x","job_id":"x","revision_digest":"x","signature":"00","validation":"hermetic-copy-v1"},"exit_code":0}"#;
    let digest = slm_receipt::domain::canon::sha256_hex(forged_evidence.as_bytes());
    let produced_us = (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000) as i64;
    sqlx::query(
        "INSERT INTO loop_execution_receipts (receipt_id, profile_id, task_id, run_id, producer, command_digest, verdict, exit_code, produced_at, produced_us, evidence_digest, evidence) \
         SELECT 'forged', profile_id, task_id, run_id, producer, command_digest, 'PASS', 0, produced_at, $1, $2, $3 FROM loop_execution_receipts LIMIT 1",
    )
    .bind(produced_us)
    .bind(&digest)
    .bind(forged_evidence)
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(
        e.gate(&job.job_id, "build", "agent", &started).await.1,
        msg::STALE
    );

    // A fresh genuine run restores the pass; then the key is weakened.
    let (_, again) = e.run(&job.job_id, 10.0).await.unwrap();
    assert_eq!(again.verdict, "PASS");
    assert!(e.gate(&job.job_id, "build", "agent", &started).await.0);
    let key = e.data.path().join("loop-admission/admission.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        e.gate(&job.job_id, "build", "agent", &started).await.1,
        msg::INPUTS_INVALID
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(e.gate(&job.job_id, "build", "agent", &started).await.0);
    // A different key of the right shape: not authentic.
    let original = std::fs::read(&key).unwrap();
    std::fs::write(&key, [0x42u8; 32]).unwrap();
    assert_eq!(
        e.gate(&job.job_id, "build", "agent", &started).await.1,
        msg::STALE
    );
    std::fs::write(&key, &original[..31]).unwrap();
    assert_eq!(
        e.gate(&job.job_id, "build", "agent", &started).await.1,
        msg::INPUTS_INVALID
    );
    std::fs::write(&key, &original).unwrap();
    assert!(e.gate(&job.job_id, "build", "agent", &started).await.0);
}

async fn a_check_that_prints_the_key_fails(backend: &str) {
    // The operator (wrongly) points the check at the key. Without the
    // sandbox, printing it (here base64-encoded) fails the run even with exit
    // status 0 (RECEIPT-33); under the sandbox the key cannot even be read.
    for (sandbox, reason) in [
        (SandboxChoice::Off, msg::KEY_EXPOSED),
        (SandboxChoice::Auto, ""),
    ] {
        if sandbox == SandboxChoice::Auto && slm_receipt::exec::sandbox::landlock_abi() == 0 {
            continue;
        }
        let mut e = env_with(backend, sandbox).await;
        let key_path: PathBuf = e.data.path().join("loop-admission/admission.key");
        let job = e
            .register(e.registration(
                "leak2",
                &["/usr/bin/base64", "-w0", key_path.to_str().unwrap()],
            ))
            .await
            .unwrap();
        let (_, r) = e.run(&job.job_id, 10.0).await.unwrap();
        assert_eq!(r.verdict, "FAIL", "{sandbox:?}");
        assert_eq!(r.stop_reason, reason, "{sandbox:?}");
        assert_ne!(r.exit_code, 0, "{sandbox:?}");
    }
}

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

/// A job superseded while its check runs gets no receipt: the run ends
/// with "expired or superseded during verification", and nothing is stored.
async fn superseded_during_the_run_gets_no_receipt(backend: &str) {
    let mut e = env(backend).await;
    write(e.project.path(), "src/app.txt", "version 1\n");
    write(e.project.path(), "check.sh", "sleep 1\n");
    let job = e
        .register(e.registration("build", &["sh", "check.sh"]))
        .await
        .unwrap();
    let mut runner = e.client.clone();
    let mut run = runner
        .run_check(op(
            &e.token,
            pb::RunCheckRequest {
                job_id: job.job_id.clone(),
                timeout_s: 10.0,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    // Once the check is running, the operator registers the job again.
    loop {
        match run.next().await.unwrap().unwrap().event {
            Some(pb::run_check_event::Event::Progress(p)) if p.starts_with("running") => break,
            Some(pb::run_check_event::Event::Receipt(r)) => panic!("receipt too early: {r:?}"),
            _ => {}
        }
    }
    e.register(e.registration("build", &["sh", "check.sh"]))
        .await
        .unwrap();
    let err = loop {
        match run.next().await.unwrap() {
            Ok(ev) => assert!(
                !matches!(ev.event, Some(pb::run_check_event::Event::Receipt(_))),
                "a superseded job got a receipt"
            ),
            Err(err) => break err,
        }
    };
    assert_eq!(
        (err.code(), err.message()),
        (Code::FailedPrecondition, msg::EXPIRED_DURING)
    );
    assert!(e.store.receipts_after(0, 10).await.unwrap().is_empty());
}

both_backends!(
    pass_then_every_gate_reason,
    operator_credential_is_required,
    registration_refusals_leave_nothing_behind,
    escapes_and_timeouts_fail_the_check,
    forgery_and_tampering_never_pass,
    a_check_that_prints_the_key_fails,
    superseded_during_the_run_gets_no_receipt,
);
