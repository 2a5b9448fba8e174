//! The services as separate processes on PostgreSQL, talking gRPC over
//! loopback: ledger, receipt and loop engine each in its own `slm serve
//! --only`, the gateway in a fourth, the CLI as the operator in a fifth.
//! A watcher waiting in the loop-engine process ends DONE when the operator
//! runs the registered check through the receipt process.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slm_proto::v1 as pb;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_runtime::testing::TestDatabase;
use tokio_stream::StreamExt;

struct Proc {
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn slm(data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slm"));
    c.env("SLM_DATA_DIR", data);
    for k in [
        "SLM_LOOP_KILL",
        "SLM_LEDGER_URL",
        "SLM_LOOP_ENGINE_URL",
        "SLM_RECEIPT_URL",
        "SLM_BRIDGE_URL",
        "SLM_PROFILE",
        "SLM_DATABASE_URL",
        "SLM_OPERATOR_TOKEN",
        "SLM_OPERATOR_TOKEN_FILE",
        "SLM_AGENT_ID",
    ] {
        c.env_remove(k);
    }
    c
}

fn start(dir: &Path, name: &str, args: &[&str], env: &[(&str, String)], port: u16) -> Proc {
    let data = dir.join(name);
    let log = dir.join(format!("{name}.log"));
    let mut c = slm(&data);
    c.args(args)
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut p = Proc {
        child: c.spawn().unwrap(),
        log,
    };
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Some(status) = p.child.try_wait().unwrap() {
            panic!(
                "{name} exited ({status}): {}",
                std::fs::read_to_string(&p.log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "{name} never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    p
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

fn run(c: &mut Command) -> (i32, String, String) {
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
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
    let url = |p: u16| format!("http://127.0.0.1:{p}");
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
    let mut client = LoopEngineClient::connect(url(pe)).await.unwrap();
    let contract = json!({"job_id": job}).to_string();
    let watcher = tokio::spawn(async move {
        let mut s = client
            .run_loop(pb::RunLoopRequest {
                profile_id: String::new(),
                kind: Some(pb::run_loop_request::Kind::Watch(pb::WatchSpec {
                    name: "build".into(),
                    gate_query: "build status".into(),
                    max_iterations: 100,
                    max_wallclock_s: 60.0,
                    poll_interval_s: 30.0,
                    contract_json: contract,
                    agent_id: "agent-7".into(),
                    ..Default::default()
                })),
            })
            .await
            .unwrap()
            .into_inner();
        while let Some(ev) = s.next().await {
            if let Some(pb::run_event::Event::Outcome(o)) = ev.unwrap().event {
                return o;
            }
        }
        panic!("no outcome")
    });
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
    let o = tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .expect("DONE well before the 30 s poll")
        .unwrap();
    assert_eq!(
        (o.status.as_str(), o.reason.as_str()),
        ("DONE", "gate-passed")
    );
    drop((ledger, receipt, engine, gateway));
}
