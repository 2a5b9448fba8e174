//! The services as separate processes on PostgreSQL, talking gRPC over
//! loopback: ledger, receipt and loop engine each in its own `slm serve
//! --only`, the gateway in a fourth, the CLI as the operator in a fifth.
//! A watcher waiting in the loop-engine process ends DONE when the operator
//! runs the registered check through the receipt process.

#[path = "support/serve.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use slm_runtime::testing::TestDatabase;

use support::{Proc, free_port, run, slm, spawn_and_wait, start_watch, url};

/// `slm <args>` on `dir/<name>` with `env`, its log in `dir/<name>.log`,
/// waited on until it listens on `port`.
fn start(dir: &Path, name: &str, args: &[&str], env: &[(&str, String)], port: u16) -> Proc {
    let mut c = slm(&dir.join(name));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    spawn_and_wait(c, name, dir.join(format!("{name}.log")), port)
}

/// The operator's CLI: its own empty data root, every service remote.
#[derive(Clone)]
struct Operator {
    dir: PathBuf,
    token_file: PathBuf,
    env: Vec<(&'static str, String)>,
}

impl Operator {
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let mut c = slm(&self.dir);
        c.args(args)
            .env("SLM_OPERATOR_TOKEN_FILE", &self.token_file);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        run(&mut c)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_in_separate_processes_on_postgres() {
    let db = TestDatabase::create("slm_mp").await;
    let dir = tempfile::tempdir().unwrap();
    let (pl, pr, pe, pg_grpc, pg_http) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let ledger = start(
        dir.path(),
        "ledger",
        &[
            "serve",
            "--only",
            "ledger",
            "--grpc",
            &format!("127.0.0.1:{pl}"),
            "--database-url",
            &db.url,
        ],
        &[],
        pl,
    );
    let receipt = start(
        dir.path(),
        "receipt",
        &[
            "serve",
            "--only",
            "receipt",
            "--grpc",
            &format!("127.0.0.1:{pr}"),
            "--database-url",
            &db.url,
        ],
        &[],
        pr,
    );
    let peers = vec![("SLM_LEDGER_URL", url(pl)), ("SLM_RECEIPT_URL", url(pr))];
    let engine = start(
        dir.path(),
        "engine",
        &[
            "serve",
            "--only",
            "loop-engine",
            "--grpc",
            &format!("127.0.0.1:{pe}"),
        ],
        &peers,
        pe,
    );
    let mut all = peers.clone();
    all.push(("SLM_LOOP_ENGINE_URL", url(pe)));
    let gateway = start(
        dir.path(),
        "gateway",
        &[
            "serve",
            "--only",
            "gateway",
            "--grpc",
            &format!("127.0.0.1:{pg_grpc}"),
            "--http",
            &format!("127.0.0.1:{pg_http}"),
        ],
        &all,
        pg_http,
    );

    // Health checking answers per service.
    let channel = tonic::transport::Endpoint::from_shared(url(pl))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let h = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "slm.v1.Ledger".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        h.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    assert!(
        health
            .check(tonic_health::pb::HealthCheckRequest {
                service: "slm.v1.Receipt".into()
            })
            .await
            .is_err(),
        "the ledger process does not serve the receipt service"
    );

    // The operator CLI, its own (empty) data root, every service remote.
    let operator_dir = dir.path().join("operator");
    let token_file = dir.path().join("receipt/loop-admission/operator.token");
    let op = Operator {
        dir: operator_dir.clone(),
        token_file: token_file.clone(),
        env: all.clone(),
    };
    let cli = |args: &[&str]| op.run(args);
    let (code, out, err) = cli(&["loop", "demo", "--json"]);
    assert_eq!(code, 0, "{err}");
    let demo: Value = serde_json::from_str(&out).unwrap();
    let (code, out, _) = cli(&["loop", "history", "--json"]);
    assert_eq!(code, 0);
    let history: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(history["runs"][0]["run_id"], demo["run_id"]);
    assert!(
        !operator_dir.join("memory.db").exists(),
        "nothing was stored locally"
    );

    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("src/app.txt"), "ready\n").unwrap();
    std::fs::write(project.join("check.sh"), "grep -q ready src/app.txt\n").unwrap();
    let (code, out, err) = cli(&[
        "check",
        "register",
        "--task",
        "build",
        "--watcher",
        "build",
        "--producer",
        "operator-checker",
        "--cwd",
        project.to_str().unwrap(),
        "--check",
        "check.sh",
        "--artifact",
        "src/*.txt",
        "--json",
        "--",
        "sh",
        "check.sh",
    ]);
    assert_eq!(code, 0, "{err}");
    let job = serde_json::from_str::<Value>(&out).unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Without the operator credential the remote receipt service refuses.
    let mut c = slm(&operator_dir);
    c.args(["check", "run", &job]);
    for (k, v) in &all {
        c.env(k, v);
    }
    let (code, _, err) = run(&mut c);
    assert_eq!(code, 1);
    assert!(err.contains("SLM_OPERATOR_TOKEN"), "{err}");

    assert_eq!(
        cli(&[
            "remember",
            "The build status is the operator's registered check"
        ])
        .0,
        0
    );
    let watcher = start_watch(url(pe), &job, 60.0, 30.0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!watcher.is_finished());
    let op2 = op.clone();
    let (code, out, err) =
        tokio::task::spawn_blocking(move || op2.run(&["check", "run", &job, "--json"]))
            .await
            .unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["verdict"],
        "PASS"
    );
    let (_, o) = tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .expect("DONE well before the 30 s poll")
        .unwrap();
    let o = o.unwrap();
    assert_eq!(
        (o.status.as_str(), o.reason.as_str()),
        ("DONE", "gate-passed")
    );
    drop((ledger, receipt, engine, gateway));
}
