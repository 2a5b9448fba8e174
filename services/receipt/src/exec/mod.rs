//! Running an operator's check contained, so that nothing it starts outlives it
//! (SPEC RECEIPT-26..30, GAP-01, GAP-03, GAP-06).
//!
//! [`run_contained`] launches the check without a shell, with exactly the
//! given environment and working directory, stdin from `/dev/null`, stdout and
//! stderr drained concurrently (see [`MAX_CAPTURED_OUTPUT`]), in a new session
//! (sid = pgid = child pid). The verdict on leftovers is *deterministic*: after
//! the main process has exited and been reaped, any process the check started
//! that is still alive makes the run fail, and is named in the reason before
//! it is killed (unlike the reference, which kills the process group first and
//! looks afterwards, GAP-03). Nothing on the hot path lists the process table
//! (GAP-01).
//!
//! Two containment mechanisms, the strongest available is used by default:
//!
//! * [`Containment::CgroupV2`] (see `cgroup.rs`): the check is born inside a
//!   fresh cgroup v2; survivors are `cgroup.procs`; `cgroup.kill` stops them
//!   all. No polling at all while the check runs.
//! * [`Containment::Subreaper`] (see `subreaper.rs`): this process is a child
//!   subreaper, so the check's orphans are reparented to us; the check's tree is
//!   walked through `/proc/<pid>/task/<tid>/children` every [`TICK`]; survivors
//!   are killed through pidfds. Runs in this mode are serialised process-wide.
//!
//! Both catch a plain `sleep 30 &`, a `setsid` double fork with a scrubbed
//! environment, and background processes with closed stdio (GAP-06).
//!
//! Deliberate choices:
//!
//! * The timeout is used as given; clamping it (RECEIPT-27) is the caller's job.
//! * On a timeout every process of the check is killed as part of the timeout
//!   and the reason stays `Independent check timed out` (no survivor reason:
//!   "still running after the main process exited" has no meaning when the main
//!   process itself had to be killed).
//! * A forced [`ContainmentChoice::CgroupV2`] on a host without a writable
//!   cgroup v2 falls back to the subreaper mode (with a warning); the
//!   [`Execution::containment`] field always says what was really used.

mod cgroup;
mod output;
mod procfs;
pub mod sandbox;
mod spawn;
mod subreaper;

use std::fmt;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::RwLock;

pub use output::MAX_CAPTURED_OUTPUT;
pub use sandbox::{FsPolicy, NetworkChoice, Sandbox, SandboxChoice};

/// Reason when the check could not be launched or waited for (RECEIPT-28).
pub const REASON_DID_NOT_COMPLETE: &str = "Independent check did not complete";
/// Reason when the deadline passed (RECEIPT-30).
pub const REASON_TIMED_OUT: &str = "Independent check timed out";
/// Prefix of the survivor reason, followed by `<name> (<pid>)` (RECEIPT-30).
pub const REASON_SURVIVOR_PREFIX: &str = "a process started by the check is still running: ";
/// Environment variable selecting the containment (`auto`, `cgroup`, `subreaper`).
pub const CONTAINMENT_ENV: &str = "SLM_CHECK_CONTAINMENT";

/// Poll interval of the subreaper mode while the main process runs.
pub const TICK: Duration = Duration::from_millis(20);
/// How long output is still drained after everything was killed (RECEIPT-30).
const DRAIN_GRACE: Duration = Duration::from_millis(200);
/// Bound for reaping the main process after SIGKILL.
const REAP_BOUND: Duration = Duration::from_secs(5);
/// `PATH` used when the given environment has none (Python's `os.defpath`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Cgroup runs share it (they cannot disturb each other); subreaper runs take
/// it exclusively, because they attribute *every* new child of this process
/// to the running check (see `subreaper.rs`).
static RUN_LOCK: RwLock<()> = RwLock::const_new(());

/// The containment mechanism a run used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Containment {
    /// A fresh cgroup v2 per run, killed with `cgroup.kill`.
    CgroupV2,
    /// Child subreaper + own session/process group + pidfd kills.
    Subreaper,
}

impl Containment {
    pub fn as_str(self) -> &'static str {
        match self {
            Containment::CgroupV2 => "cgroup-v2",
            Containment::Subreaper => "subreaper+pgid+pidfd",
        }
    }
}

impl fmt::Display for Containment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContainmentChoice {
    /// The strongest mechanism available on this host.
    #[default]
    Auto,
    CgroupV2,
    Subreaper,
}

/// An unknown containment name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown check containment {0:?} (expected auto, cgroup or subreaper)")]
pub struct ParseContainmentError(pub String);

impl FromStr for ContainmentChoice {
    type Err = ParseContainmentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(ContainmentChoice::Auto),
            "cgroup" | "cgroup2" | "cgroupv2" | "cgroup-v2" => Ok(ContainmentChoice::CgroupV2),
            "subreaper" => Ok(ContainmentChoice::Subreaper),
            _ => Err(ParseContainmentError(s.to_owned())),
        }
    }
}

impl ContainmentChoice {
    /// Reads [`CONTAINMENT_ENV`]. Unset or empty → `Auto`; an unknown value is
    /// logged and also gives `Auto` (the strongest available).
    pub fn from_env() -> ContainmentChoice {
        env_choice(
            CONTAINMENT_ENV,
            ContainmentChoice::Auto,
            (ContainmentChoice::Auto, "auto"),
        )
    }
}

/// A choice read from the environment variable `name`: unset or empty gives
/// `unset`; a value that does not parse is logged and gives `unknown.0`
/// (described as `unknown.1`).
pub(crate) fn env_choice<T: FromStr>(name: &str, unset: T, unknown: (T, &str)) -> T
where
    T::Err: fmt::Display,
{
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.parse().unwrap_or_else(|err| {
            tracing::warn!(%err, "ignoring {name}; using {}", unknown.1);
            unknown.0
        }),
        _ => unset,
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct CheckSpec {
    /// `argv[0]` is an absolute path, a path relative to `cwd` (with a `/`),
    /// or a bare name resolved against the `PATH` in `env` (not ours).
    pub argv: Vec<String>,
    /// The private run directory.
    pub cwd: PathBuf,
    /// The complete environment; nothing is inherited.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub containment: ContainmentChoice,
    /// The filesystem sandbox; `cwd` is the one place it lets the check write.
    pub sandbox: FsPolicy,
}

/// What happened.
#[derive(Debug, Clone)]
pub struct Execution {
    /// Exit code; killed by signal N → −N; −1 on spawn failure, timeout, or
    /// whenever a reason exists and the code would otherwise be 0.
    pub exit_code: i32,
    /// Raw stdout, at most [`MAX_CAPTURED_OUTPUT`] bytes (the first ones).
    pub stdout: Vec<u8>,
    /// Raw stderr, at most [`MAX_CAPTURED_OUTPUT`] bytes (the first ones).
    pub stderr: Vec<u8>,
    /// Product-written reason (never taken from the check's output).
    pub stop_reason: Option<String>,
    pub containment: Containment,
    /// The filesystem sandbox the run really had.
    pub sandbox: Sandbox,
    pub duration: Duration,
}

/// What [`ContainmentChoice::Auto`] picks on this host (probed once, cached).
pub fn available_containment() -> Containment {
    if cgroup::base().is_some() {
        Containment::CgroupV2
    } else {
        Containment::Subreaper
    }
}

/// Runs the check contained and reports how it ended. Never panics on a
/// misbehaving check; never blocks the runtime for more than a few syscalls.
pub async fn run_contained(spec: CheckSpec) -> Execution {
    // Decide the mechanism; a cgroup that cannot be created degrades to the
    // subreaper mode for this run.
    let wants_cgroup = match spec.containment {
        ContainmentChoice::Auto => available_containment() == Containment::CgroupV2,
        ContainmentChoice::CgroupV2 => {
            let ok = cgroup::base().is_some();
            if !ok {
                tracing::warn!(
                    "cgroup v2 containment requested but unavailable; using the subreaper mode"
                );
            }
            ok
        }
        ContainmentChoice::Subreaper => false,
    };
    let cg = if wants_cgroup {
        match cgroup::base().map(cgroup::CgroupBase::create_check) {
            Some(Ok(cg)) => Some(cg),
            Some(Err(err)) => {
                tracing::warn!(%err, "cannot create the check cgroup; using the subreaper mode");
                None
            }
            None => None,
        }
    } else {
        None
    };
    match cg {
        Some(cg) => {
            let _shared = RUN_LOCK.read().await;
            run(spec, Mode::Cgroup(cg)).await
        }
        None => {
            let _exclusive = RUN_LOCK.write().await;
            subreaper::ensure();
            let tracker = subreaper::Tracker::before_launch();
            run(spec, Mode::Subreaper(tracker)).await
        }
    }
}

enum Mode {
    Cgroup(cgroup::CheckCgroup),
    Subreaper(subreaper::Tracker),
}

impl Mode {
    fn containment(&self) -> Containment {
        match self {
            Mode::Cgroup(_) => Containment::CgroupV2,
            Mode::Subreaper(_) => Containment::Subreaper,
        }
    }
}

enum Waited {
    Exited(ExitStatus),
    TimedOut,
    Failed(std::io::Error),
}

async fn run(spec: CheckSpec, mut mode: Mode) -> Execution {
    let containment = mode.containment();
    let started = Instant::now();
    let failed_with = |started: Instant, reason: &str| Execution {
        exit_code: -1,
        stdout: Vec::new(),
        stderr: Vec::new(),
        stop_reason: Some(reason.to_owned()),
        containment,
        sandbox: Sandbox::NONE,
        duration: started.elapsed(),
    };
    let failed = |started: Instant| failed_with(started, REASON_DID_NOT_COMPLETE);

    let Some(program) = resolve_program(&spec) else {
        tracing::debug!(argv0 = ?spec.argv.first(), "check executable not found");
        if let Mode::Cgroup(cg) = mode {
            cg.kill_and_remove().await;
        }
        return failed(started);
    };
    // Building the ruleset lists directories and opens dozens of paths:
    // blocking work, kept off the async workers the watchers run on.
    let (policy, cwd) = (spec.sandbox.clone(), spec.cwd.clone());
    let prepared = tokio::task::spawn_blocking(move || sandbox::prepare(&policy, &cwd))
        .await
        .unwrap_or_else(|e| Err(sandbox::SandboxError::Build(e.to_string())));
    let prepared = match prepared {
        Ok(p) => p,
        Err(err) => {
            tracing::warn!(%err, "check not started");
            if let Mode::Cgroup(cg) = mode {
                cg.kill_and_remove().await;
            }
            return failed_with(started, err.reason());
        }
    };

    // Born inside its cgroup when the kernel allows (no migration, see
    // spawn.rs); otherwise fork + pre_exec.
    let raw = match &mode {
        Mode::Cgroup(cg) => spawn_in_cgroup(cg, &program, &spec, &prepared.plan),
        Mode::Subreaper(_) => None,
    };
    let (mut child, stdout, stderr) = match raw {
        Some(Ok(mut raw)) => {
            let out = output::Drain::start(raw.stdout.take());
            let err = output::Drain::start(raw.stderr.take());
            (Proc::Raw(raw), out, err)
        }
        Some(Err(err)) => {
            tracing::debug!(%err, program = %program.display(), "check spawn failed");
            if let Mode::Cgroup(cg) = mode {
                cg.kill_and_remove().await;
            }
            return failed(started);
        }
        None => {
            let mut child = match portable_spawn(&program, &spec, &mut mode, prepared.plan) {
                Ok(child) => child,
                Err(err) => {
                    tracing::debug!(%err, program = %program.display(), "check spawn failed");
                    if let Mode::Cgroup(cg) = mode {
                        cg.kill_and_remove().await;
                    }
                    return failed(started);
                }
            };
            let out = output::Drain::start(child.stdout.take());
            let err = output::Drain::start(child.stderr.take());
            (Proc::Tokio(child), out, err)
        }
    };
    let pid = child.id();
    if let Mode::Subreaper(tracker) = &mut mode {
        tracker.launched(pid);
    }

    // Wait for the main process, the deadline, and (subreaper mode) poll.
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let waited = {
        let wait = child.wait();
        tokio::pin!(wait);
        let sleep = tokio::time::sleep_until(deadline);
        tokio::pin!(sleep);
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let tracker = match &mut mode {
            Mode::Subreaper(t) => Some(t),
            Mode::Cgroup(_) => None,
        };
        let polling = tracker.is_some();
        let mut tracker = tracker;
        loop {
            tokio::select! {
                biased;
                r = &mut wait => break match r {
                    Ok(status) => Waited::Exited(status),
                    Err(err) => Waited::Failed(err),
                },
                _ = &mut sleep => break Waited::TimedOut,
                _ = ticker.tick(), if polling => {
                    if let Some(t) = tracker.as_deref_mut() {
                        t.scan();
                    }
                }
            }
        }
    };

    let (mut exit_code, mut reason) = match &waited {
        Waited::Exited(status) => (exit_code_of(*status), None),
        Waited::TimedOut => (-1, Some(REASON_TIMED_OUT.to_owned())),
        Waited::Failed(err) => {
            tracing::warn!(%err, pid, "waiting for the check failed");
            (-1, Some(REASON_DID_NOT_COMPLETE.to_owned()))
        }
    };

    // If the main process did not exit by itself: kill everything, reap it.
    if !matches!(waited, Waited::Exited(_)) {
        match &mut mode {
            Mode::Cgroup(cg) => cg.kill(),
            Mode::Subreaper(t) => t.kill_tree(),
        }
        child.start_kill();
        if tokio::time::timeout(REAP_BOUND, child.wait())
            .await
            .is_err()
        {
            tracing::warn!(pid, "check process not reaped after SIGKILL");
        }
    }

    // The main process is reaped. Decide on survivors, then kill them all.
    let record = matches!(waited, Waited::Exited(_));
    let survivor = match mode {
        Mode::Cgroup(cg) => {
            let survivor = if record {
                first_survivor(&cg.procs())
            } else {
                None
            };
            let survivor = match survivor {
                Some(s) => Some(settle_name(s).await),
                None => None,
            };
            cg.kill_and_remove().await;
            survivor
        }
        Mode::Subreaper(mut tracker) => tracker.sweep(record).await,
    };
    if let Some(s) = survivor {
        tracing::info!(pid = s.pid, name = %s.name, "check left a process running");
        reason = Some(format!("{REASON_SURVIVOR_PREFIX}{} ({})", s.name, s.pid));
    }
    if reason.is_some() && exit_code == 0 {
        exit_code = -1;
    }

    let (stdout, stderr) = tokio::join!(stdout.finish(DRAIN_GRACE), stderr.finish(DRAIN_GRACE));
    Execution {
        exit_code,
        stdout,
        stderr,
        stop_reason: reason,
        containment,
        sandbox: prepared.sandbox,
        duration: started.elapsed(),
    }
}

/// A survivor caught between fork and exec still carries its parent's name
/// (`sh` for `sleep 30 &`). Which processes survived is already decided;
/// this only waits a moment (at most 25 ms) for the name to become the
/// program the check started, so the reason names it.
/// The check's main process, however it was started.
enum Proc {
    Tokio(tokio::process::Child),
    Raw(spawn::RawChild),
}

impl Proc {
    fn id(&self) -> i32 {
        match self {
            Proc::Tokio(c) => c.id().map_or(0, |p| p as i32),
            Proc::Raw(c) => c.id(),
        }
    }

    async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            Proc::Tokio(c) => c.wait().await,
            Proc::Raw(c) => c.wait().await,
        }
    }

    fn start_kill(&mut self) {
        match self {
            Proc::Tokio(c) => {
                let _ = c.start_kill();
            }
            Proc::Raw(c) => c.start_kill(),
        }
    }
}

/// `clone3(CLONE_INTO_CGROUP)`; `None` when this kernel or sandbox cannot
/// (the caller then forks portably), `Some(Err)` when the check itself
/// cannot be started.
fn spawn_in_cgroup(
    cg: &cgroup::CheckCgroup,
    program: &Path,
    spec: &CheckSpec,
    plan: &sandbox::ChildPlan,
) -> Option<std::io::Result<spawn::RawChild>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    static UNSUPPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return None;
    }
    let dir = cg.open_dir().ok()?;
    let (Ok(prog), Ok(cwd)) = (
        std::ffi::CString::new(program.as_os_str().as_bytes()),
        std::ffi::CString::new(spec.cwd.as_os_str().as_bytes()),
    ) else {
        return Some(Err(std::io::Error::from_raw_os_error(libc::EINVAL)));
    };
    match spawn::spawn_into(dir.as_raw_fd(), &prog, &spec.argv, &spec.env, &cwd, plan) {
        Err(spawn::SpawnError::Clone(e)) => {
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOSYS | libc::EPERM | libc::E2BIG | libc::EINVAL | libc::EOPNOTSUPP)
            ) {
                tracing::info!(%e, "clone3 into a cgroup unavailable; forking portably");
                UNSUPPORTED.store(true, Ordering::Relaxed);
            }
            None
        }
        Err(spawn::SpawnError::Start(e)) => Some(Err(e)),
        Ok(child) => Some(Ok(child)),
    }
}

/// fork + `pre_exec` (the cgroup move, or setsid), through tokio.
fn portable_spawn(
    program: &Path,
    spec: &CheckSpec,
    mode: &mut Mode,
    plan: sandbox::ChildPlan,
) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.arg0(&spec.argv[0])
        .args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match mode {
        Mode::Cgroup(cg) => {
            let mut hook = cg.pre_exec_hook();
            // SAFETY: the hook only makes raw syscalls (open/write/close on a
            // path prepared before the fork, setsid, the sandbox's prctl and
            // landlock_restrict_self); it does not allocate.
            unsafe {
                cmd.pre_exec(move || {
                    hook()?;
                    sandbox::enforce(&plan)
                })
            };
        }
        Mode::Subreaper(_) => {
            // SAFETY: setsid, prctl and landlock_restrict_self are
            // async-signal-safe system calls.
            unsafe {
                cmd.pre_exec(move || {
                    rustix::process::setsid()?;
                    sandbox::enforce(&plan)
                })
            };
        }
    }
    cmd.spawn()
}

async fn settle_name(mut s: subreaper::Survivor) -> subreaper::Survivor {
    let forked_as = s.name.clone();
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let now = procfs::comm(s.pid);
        if now != forked_as {
            // A process that vanished keeps the name it was seen with.
            if now != "?" {
                s.name = now;
            }
            break;
        }
    }
    s
}

/// The earliest-started process among `pids` (still named if it vanished).
fn first_survivor(pids: &[i32]) -> Option<subreaper::Survivor> {
    let first = pids
        .iter()
        .filter_map(|&p| procfs::stat(p))
        .min_by_key(|s| (s.start, s.pid))
        .map(|s| s.pid)
        .or_else(|| pids.first().copied())?;
    Some(subreaper::Survivor {
        pid: first,
        name: procfs::comm(first),
    })
}

fn exit_code_of(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => -sig,
        (None, None) => -1,
    }
}

/// Resolves `argv[0]`: with a `/` it is a path (relative ones against `cwd`);
/// a bare name is searched in the `PATH` of the check's own environment.
fn resolve_program(spec: &CheckSpec) -> Option<PathBuf> {
    let name = spec.argv.first()?;
    if name.is_empty() || name.contains('\0') {
        return None;
    }
    if name.contains('/') {
        let p = Path::new(name);
        return Some(if p.is_absolute() {
            p.to_path_buf()
        } else {
            spec.cwd.join(p)
        });
    }
    let path = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    path.split(':').find_map(|dir| {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(dir)
        };
        let dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            spec.cwd.join(dir)
        };
        let candidate = dir.join(name);
        is_executable_file(&candidate).then_some(candidate)
    })
}

fn is_executable_file(p: &Path) -> bool {
    match std::fs::metadata(p) {
        Ok(m) => {
            m.is_file()
                && m.permissions().mode() & 0o111 != 0
                && rustix::fs::access(p, rustix::fs::Access::EXEC_OK).is_ok()
        }
        Err(_) => false,
    }
}

/// 16 random hex characters for cgroup names (uniqueness, not secrecy).
pub(crate) fn random_hex() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 8];
    let from_urandom = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    if !from_urandom {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        bytes = h.finish().to_be_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(argv: &[&str], env: &[(&str, &str)]) -> CheckSpec {
        CheckSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: PathBuf::from("/tmp"),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            timeout: Duration::from_secs(1),
            containment: ContainmentChoice::Auto,
            sandbox: FsPolicy::default(),
        }
    }

    #[test]
    fn parses_choices() {
        assert_eq!("auto".parse(), Ok(ContainmentChoice::Auto));
        assert_eq!(" Cgroup ".parse(), Ok(ContainmentChoice::CgroupV2));
        assert_eq!("subreaper".parse(), Ok(ContainmentChoice::Subreaper));
        assert!("jail".parse::<ContainmentChoice>().is_err());
        assert_eq!(Containment::CgroupV2.as_str(), "cgroup-v2");
        assert_eq!(Containment::Subreaper.as_str(), "subreaper+pgid+pidfd");
    }

    #[test]
    fn resolves_against_given_path() {
        let s = spec(&["sh"], &[("PATH", "/nonexistent:/bin:/usr/bin")]);
        assert!(resolve_program(&s).unwrap().ends_with("sh"));
        assert!(resolve_program(&spec(&["sh"], &[("PATH", "/nonexistent")])).is_none());
        assert_eq!(
            resolve_program(&spec(&["/x/y"], &[])).unwrap(),
            PathBuf::from("/x/y")
        );
        assert_eq!(
            resolve_program(&spec(&["./y"], &[])).unwrap(),
            PathBuf::from("/tmp/./y")
        );
        assert!(resolve_program(&spec(&[], &[])).is_none());
    }

    #[test]
    fn hex_is_random_enough() {
        let a = random_hex();
        assert_eq!(a.len(), 16);
        assert_ne!(a, random_hex());
    }
}
