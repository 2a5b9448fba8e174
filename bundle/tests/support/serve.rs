//! One real `slm serve` process on a fresh data root (SQLite, or PostgreSQL
//! with `--database-url`), the operator's credential and gRPC clients to it.
//! Shared by `load.rs` and `forgery_watch.rs` (`#[path]` module).

#![allow(dead_code)]

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use slm_proto::v1 as pb;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_runtime::testing::TestDatabase;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

pub const OPERATOR_HEADER: &str = "x-slm-operator-token";

pub struct Server {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub data: PathBuf,
    pub log: PathBuf,
    pub url: String,
    pub token: String,
    pub pg: Option<TestDatabase>,
}

impl Drop for Server {
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

impl Server {
    /// Starts `slm serve` (every service in one process) and waits until it
    /// listens. `postgres`: a throwaway PostgreSQL database instead of SQLite.
    pub async fn start(postgres: bool) -> Server {
        let pg = if postgres {
            Some(TestDatabase::create("slm_load").await)
        } else {
            None
        };
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let log = dir.path().join("serve.log");
        let port = free_port();
        let mut c = Command::new(env!("CARGO_BIN_EXE_slm"));
        c.env("SLM_DATA_DIR", &data);
        for k in [
            "SLM_LOOP_KILL",
            "SLM_LEDGER_URL",
            "SLM_LOOP_ENGINE_URL",
            "SLM_RECEIPT_URL",
            "SLM_BRIDGE_URL",
            "SLM_PROFILE",
            "SLM_DATABASE_URL",
            "SLM_LEDGER_DATABASE_URL",
            "SLM_OPERATOR_TOKEN",
            "SLM_OPERATOR_TOKEN_FILE",
            "SLM_AGENT_ID",
        ] {
            c.env_remove(k);
        }
        c.args(["serve", "--grpc", &format!("127.0.0.1:{port}")]);
        if let Some(pg) = &pg {
            c.args(["--database-url", &pg.url]);
        }
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap());
        let mut child = c.spawn().unwrap();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "slm serve exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "slm serve never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        let token = std::fs::read_to_string(data.join("loop-admission/operator.token")).unwrap();
        Server {
            child,
            dir,
            data,
            log,
            url: format!("http://127.0.0.1:{port}"),
            token: token.trim().to_string(),
            pg,
        }
    }

    pub async fn channel(&self) -> Channel {
        tonic::transport::Endpoint::from_shared(self.url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    pub async fn receipt(&self) -> ReceiptClient<Channel> {
        ReceiptClient::new(self.channel().await)
    }

    pub async fn ledger(&self) -> LedgerClient<Channel> {
        LedgerClient::new(self.channel().await)
    }

    pub async fn engine(&self) -> LoopEngineClient<Channel> {
        LoopEngineClient::new(self.channel().await)
    }

    pub fn op<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut()
            .insert(OPERATOR_HEADER, self.token.parse().unwrap());
        r
    }

    /// Peak resident set of the server so far (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The admission key, as only the operator's user can read it.
    pub fn admission_key(&self) -> Vec<u8> {
        std::fs::read(self.data.join("loop-admission/admission.key")).unwrap()
    }
}

pub fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// A project with `src/app.txt` and a pinned `check.sh` whose exit code is
/// `exit` (0: PASS, otherwise FAIL).
pub fn project(root: &Path, exit: i32) -> PathBuf {
    std::fs::create_dir_all(root).unwrap();
    write(root, "src/app.txt", "ready\n");
    write(
        root,
        "check.sh",
        &format!("grep -q ready src/app.txt || exit 1\nexit {exit}\n"),
    );
    root.to_path_buf()
}

pub fn registration(project: &Path, watcher: &str, producer: &str) -> pb::RegisterJobRequest {
    pb::RegisterJobRequest {
        task_id: "build".into(),
        watcher_name: watcher.into(),
        producer: producer.into(),
        argv: vec!["sh".into(), "check.sh".into()],
        cwd: project.display().to_string(),
        artifact_paths: vec!["src/*.txt".into()],
        check_paths: vec!["check.sh".into()],
        ..Default::default()
    }
}

pub async fn register(
    s: &Server,
    rc: &mut ReceiptClient<Channel>,
    req: pb::RegisterJobRequest,
) -> pb::Job {
    rc.register_job(s.op(req)).await.unwrap().into_inner()
}

pub async fn run_check(
    s: &Server,
    rc: &mut ReceiptClient<Channel>,
    job_id: &str,
) -> Result<pb::ExecutionReceipt, tonic::Status> {
    let mut st = rc
        .run_check(s.op(pb::RunCheckRequest {
            job_id: job_id.into(),
            timeout_s: 30.0,
        }))
        .await?
        .into_inner();
    while let Some(ev) = st.next().await {
        if let Some(pb::run_check_event::Event::Receipt(r)) = ev?.event {
            return Ok(r);
        }
    }
    panic!("run ended without a receipt")
}

pub const LOCATOR: &str = "The build status for this task is checked in /srv/proj";
pub const QUERY: &str = "where is the build status";

pub async fn remember_locator(ledger: &mut LedgerClient<Channel>) {
    ledger
        .remember(pb::RememberRequest {
            content: LOCATOR.into(),
            ..Default::default()
        })
        .await
        .unwrap();
}

pub fn watch_spec(name: &str, job_id: &str, agent: &str, wall: f64, poll: f64) -> pb::WatchSpec {
    pb::WatchSpec {
        name: name.into(),
        gate_query: QUERY.into(),
        max_iterations: 200,
        max_wallclock_s: wall,
        poll_interval_s: poll,
        contract_json: format!(r#"{{"job_id": "{job_id}"}}"#),
        agent_id: agent.into(),
        ..Default::default()
    }
}

/// Starts a watcher; `first_lap` is sent once its first lap is recorded (it
/// is then waiting, its start time fixed); returns its outcome.
pub async fn watch(
    mut engine: LoopEngineClient<Channel>,
    spec: pb::WatchSpec,
    first_lap: tokio::sync::mpsc::Sender<()>,
) -> (Vec<pb::LapEntry>, pb::RunOutcome) {
    let mut s = engine
        .run_loop(pb::RunLoopRequest {
            profile_id: String::new(),
            kind: Some(pb::run_loop_request::Kind::Watch(spec)),
        })
        .await
        .unwrap()
        .into_inner();
    let mut laps = Vec::new();
    let mut signalled = false;
    while let Some(ev) = s.next().await {
        match ev.unwrap().event {
            Some(pb::run_event::Event::Lap(l)) => {
                laps.push(l);
                if !signalled {
                    signalled = true;
                    let _ = first_lap.send(()).await;
                }
            }
            Some(pb::run_event::Event::Outcome(o)) => {
                if !signalled {
                    let _ = first_lap.send(()).await;
                }
                return (laps, o);
            }
            None => {}
        }
    }
    panic!("no outcome")
}
