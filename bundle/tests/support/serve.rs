//! Starting the real `slm` binary in tests: the command with a clean
//! environment ([`slm`], [`run`]), a server process waited on until it
//! listens and killed on drop ([`serve`], [`spawn_and_wait`], [`Proc`]), and
//! one whole `slm serve` on a fresh data root (SQLite, or PostgreSQL with
//! `--database-url`) with the operator's credential and gRPC clients to it
//! ([`Server`]). Shared by the tests in this folder (`#[path]` module).

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

// ---------------------------------------------------------------- processes

/// Variables that would point `slm` at other services, databases, a
/// credential or a log filter: removed so every test starts from the same
/// environment.
pub const ENV_CLEARED: &[&str] = &[
    "SLM_LOOP_KILL",
    "SLM_LEDGER_URL",
    "SLM_LOOP_ENGINE_URL",
    "SLM_RECEIPT_URL",
    "SLM_BRIDGE_URL",
    "SLM_PROFILE",
    "SLM_DATABASE_URL",
    "SLM_LEDGER_DATABASE_URL",
    "SLM_RECEIPT_DATABASE_URL",
    "SLM_OPERATOR_TOKEN",
    "SLM_OPERATOR_TOKEN_FILE",
    "SLM_AGENT_ID",
    "SLM_LOG",
];

/// The binary with a clean environment for the data root `data`.
pub fn slm(data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slm"));
    c.env("SLM_DATA_DIR", data).stdin(Stdio::null());
    for k in ENV_CLEARED {
        c.env_remove(k);
    }
    c
}

/// Exit code (-1 when killed by a signal), stdout, stderr.
pub fn run(c: &mut Command) -> (i32, String, String) {
    let o = c.output().expect("the command runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// A server process, killed on drop if still running (a failing test must
/// not leak it).
pub struct Proc {
    child: Option<Child>,
    pub log: PathBuf,
    pub name: String,
}

impl Proc {
    /// The running child.
    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("still running")
    }

    /// Panics with the log when the process has exited.
    pub fn assert_alive(&mut self) {
        if let Some(status) = self.child().try_wait().unwrap() {
            panic!("{} died ({status}): {}", self.name, self.log_text());
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `kill -9`, and wait for it to be gone.
    pub fn sigkill(&mut self) {
        let mut c = self.child.take().expect("running");
        let pid = c.id() as i32;
        // SAFETY: signalling our own child by pid.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let status = c.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{}", self.name);
    }

    /// SIGTERM and wait (a clean stop, so the databases can be checked).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child by pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(15);
            while c.try_wait().unwrap().is_none() {
                if Instant::now() > deadline {
                    let _ = c.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Spawns `c` (stdout discarded, stderr appended to `log`) and waits until
/// it listens on `port` of 127.0.0.1.
pub fn spawn_and_wait(mut c: Command, name: &str, log: PathBuf, port: u16) -> Proc {
    c.stdout(Stdio::null()).stderr(
        File::options()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap(),
    );
    let mut p = Proc {
        child: Some(c.spawn().expect("slm starts")),
        log,
        name: name.into(),
    };
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Some(status) = p.child().try_wait().unwrap() {
            panic!("{name} exited ({status}): {}", p.log_text());
        }
        assert!(Instant::now() < deadline, "{name} never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    p
}

/// `slm serve [extra]` on `data` with `env`, gRPC on `port`; its stderr in
/// `<name>.log` beside `data`.
pub fn serve(data: &Path, name: &str, port: u16, extra: &[&str], env: &[(&str, String)]) -> Proc {
    let mut c = slm(data);
    c.args(["serve", "--grpc", &format!("127.0.0.1:{port}")])
        .args(extra);
    for (k, v) in env {
        c.env(k, v);
    }
    let log = data.parent().unwrap().join(format!("{name}.log"));
    spawn_and_wait(c, name, log, port)
}

// ------------------------------------------------------- one whole server

pub struct Server {
    /// First, so the process is gone before its folder and database.
    pub process: Proc,
    pub dir: tempfile::TempDir,
    pub data: PathBuf,
    pub log: PathBuf,
    pub url: String,
    pub token: String,
    pub pg: Option<TestDatabase>,
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
        let port = free_port();
        let extra = match &pg {
            Some(pg) => vec!["--database-url", pg.url.as_str()],
            None => vec![],
        };
        let process = serve(&data, "serve", port, &extra, &[]);
        let log = process.log.clone();
        let token = std::fs::read_to_string(data.join("loop-admission/operator.token")).unwrap();
        Server {
            process,
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
        let pid = self.process.child.as_ref().expect("running").id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
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

pub type WatchResult = (Vec<pb::LapEntry>, Result<pb::RunOutcome, String>);

/// Starts a watcher `build` (gate query "build status", agent `agent-7`, at
/// most 200 laps) on the engine at `engine_url` for `job`; the task ends
/// with its laps and outcome, or with the stream error when the engine dies
/// under it.
pub fn start_watch(
    engine_url: String,
    job: &str,
    wall_s: f64,
    poll_s: f64,
) -> tokio::task::JoinHandle<WatchResult> {
    let contract = serde_json::json!({"job_id": job}).to_string();
    tokio::spawn(async move {
        let mut client = LoopEngineClient::connect(engine_url).await.unwrap();
        let mut s = client
            .run_loop(pb::RunLoopRequest {
                profile_id: String::new(),
                kind: Some(pb::run_loop_request::Kind::Watch(pb::WatchSpec {
                    name: "build".into(),
                    gate_query: "build status".into(),
                    max_iterations: 200,
                    max_wallclock_s: wall_s,
                    poll_interval_s: poll_s,
                    contract_json: contract,
                    agent_id: "agent-7".into(),
                    ..Default::default()
                })),
            })
            .await
            .unwrap()
            .into_inner();
        let mut laps = Vec::new();
        while let Some(ev) = s.next().await {
            match ev {
                Ok(ev) => match ev.event {
                    Some(pb::run_event::Event::Lap(l)) => laps.push(l),
                    Some(pb::run_event::Event::Outcome(o)) => return (laps, Ok(o)),
                    None => {}
                },
                Err(e) => return (laps, Err(e.to_string())),
            }
        }
        (laps, Err("the stream ended without an outcome".into()))
    })
}
