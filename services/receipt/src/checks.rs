//! The operator's side and the gate, put together from the domain rules, the
//! filesystem helpers, the contained runner and the store: register a job,
//! run its pinned check into a signed receipt, evaluate the gate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, broadcast};

use slm_runtime::events::EventHub;
use slm_runtime::time::{format_iso, now_iso};

use crate::domain::evidence::{self, Measurement, Receipt};
use crate::domain::gate::{self, Fault, GateRequest, GateWorld};
use crate::domain::job::{self, FileRecord, Job};
use crate::domain::{command, msg, selectors};
use crate::exec::{self, CheckSpec, ContainmentChoice};
use crate::fsys::select::expand;
use crate::fsys::stamp::Stamp;
use crate::fsys::tree::{self, Dir};
use crate::fsys::{keys, scratch};
use crate::store::{Store, StoreError};

/// The search path a check runs with, and bare executables resolve against.
pub const CHECK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
pub const STORE_DIR: &str = "loop-checks";
pub const DEFAULT_TIMEOUT_S: f64 = 30.0;
/// How long a run waits for another run on the same data root.
const LOCK_WAIT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// One of the spec's refusals; nothing was stored.
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

fn refused(s: impl Into<String>) -> CheckError {
    CheckError::Refused(s.into())
}

/// What the operator asks to register.
#[derive(Debug, Clone, Default)]
pub struct Registration {
    pub profile_id: String,
    pub task_id: String,
    pub watcher_name: String,
    pub producer: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub artifact_paths: Vec<String>,
    pub check_paths: Vec<String>,
    pub allow_prestart_evidence: bool,
    /// None means the default (3600 s).
    pub ttl_seconds: Option<i64>,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub receipt: Receipt,
    pub measurement: Measurement,
    pub revision_digest: String,
    pub definition_digest: String,
}

/// A new receipt, for event-driven watchers.
#[derive(Debug, Clone)]
pub struct ReceiptEvent {
    pub profile_id: String,
    pub job_id: String,
    pub receipt_id: String,
    pub verdict: String,
}

#[derive(Clone)]
pub struct Checks {
    store: Store,
    data_root: PathBuf,
    run_lock: Arc<Mutex<()>>,
    events: EventHub<ReceiptEvent>,
    containment: ContainmentChoice,
    sandbox: exec::SandboxChoice,
    network: exec::NetworkChoice,
}

impl ReceiptEvent {
    fn of(r: &Receipt) -> Self {
        Self {
            profile_id: r.profile_id.clone(),
            job_id: r.run_id.clone(),
            receipt_id: r.receipt_id.clone(),
            verdict: r.verdict.clone(),
        }
    }
}

fn now_us() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000) as i64
}

fn iso_of_us(us: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000)
        .map(format_iso)
        .unwrap_or_else(|_| now_iso())
}

/// Resolves a bare executable name against the check's search path.
fn resolve_executable(name: &str) -> Option<PathBuf> {
    CHECK_PATH
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// The executable is trusted: a regular file owned by root or the operator,
/// writable by nobody else (GAP-13).
fn trusted_executable(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(real) = std::fs::canonicalize(p) else {
        return false;
    };
    let Ok(m) = std::fs::metadata(&real) else {
        return false;
    };
    let euid = rustix::process::geteuid().as_raw();
    m.is_file()
        && (m.uid() == 0 || m.uid() == euid)
        && m.mode() & 0o022 == 0
        && m.mode() & 0o111 != 0
}

fn same_records(a: &[FileRecord], b: &[FileRecord]) -> bool {
    job::manifest(a) == job::manifest(b)
}

impl Checks {
    pub fn new(store: Store, data_root: &Path) -> Self {
        Self {
            store,
            data_root: data_root.to_path_buf(),
            run_lock: Arc::default(),
            events: EventHub::new(1024),
            containment: ContainmentChoice::from_env(),
            sandbox: exec::SandboxChoice::from_env(),
            network: exec::NetworkChoice::from_env(),
        }
    }

    /// Overrides the sandbox choice read from `SLM_CHECK_SANDBOX`.
    pub fn with_sandbox(mut self, sandbox: exec::SandboxChoice) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Overrides the network choice read from `SLM_CHECK_NETWORK`.
    pub fn with_network(mut self, network: exec::NetworkChoice) -> Self {
        self.network = network;
        self
    }

    /// The sandbox policy of a check on `job`: it may read neither the key
    /// and databases nor the live project, only its copies (GAP-04).
    fn policy(&self, job: &Job) -> exec::FsPolicy {
        exec::FsPolicy {
            choice: self.sandbox,
            network: self.network,
            hidden: vec![self.data_root.clone(), PathBuf::from(&job.cwd)],
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn data_root(&self) -> &Path {
        &self.data_root
    }

    /// New receipts, from this process and from any other process writing
    /// the same database (SQLite change feed or PostgreSQL LISTEN/NOTIFY).
    pub async fn subscribe(&self) -> broadcast::Receiver<ReceiptEvent> {
        let store = self.store.clone();
        let relay_store = self.store.clone();
        self.events
            .subscribe(
                self.store.db().change_source(crate::store::CHANGE_CHANNEL),
                async move { store.max_receipt_seq().await.ok() },
                move |after, limit| {
                    let s = relay_store.clone();
                    async move {
                        let rows = s.receipts_after(after, limit).await.ok()?;
                        Some(rows.iter().map(|r| (r.seq, ReceiptEvent::of(r))).collect())
                    }
                },
            )
            .await
    }

    /// Registers a job (spec RECEIPT-02..17). Everything is validated before
    /// anything is pinned, so a refused registration leaves nothing behind.
    pub async fn register(&self, r: Registration) -> Result<Job, CheckError> {
        let data_root = self.data_root.clone();
        let prepared = tokio::task::spawn_blocking(move || prepare(r, &data_root))
            .await
            .map_err(|e| CheckError::Internal(e.to_string()))??;
        let mut job = prepared;
        job.seq = self.store.insert_job(&job).await?;
        self.collect_garbage().await;
        Ok(job)
    }

    /// Removes pinned definitions no unexpired job references (GAP-11).
    async fn collect_garbage(&self) {
        let Ok(live) = self.store.live_definitions(now_us()).await else {
            return;
        };
        let defs = self.data_root.join(STORE_DIR).join("definitions");
        let Ok(entries) = std::fs::read_dir(&defs) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if !live.contains(&name) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    /// Runs a job's pinned check on copied inputs and stores a signed receipt
    /// (spec RECEIPT-20..37). `progress` hears what is happening.
    pub async fn run(
        &self,
        job_id: &str,
        timeout_s: f64,
        progress: impl Fn(String) + Send + Sync + 'static,
    ) -> Result<RunResult, CheckError> {
        let job = self
            .store
            .job(job_id)
            .await?
            .ok_or_else(|| CheckError::NotFound(msg::NO_SUCH_JOB.into()))?;
        let newest = self
            .store
            .newest_job(&job.profile_id, &job.watcher_name)
            .await?;
        if !job::is_current(newest.as_ref(), &job.job_id, now_us()) {
            return Err(refused(msg::NOT_CURRENT));
        }
        if !tree::platform_supported() {
            return Err(refused(msg::PLATFORM));
        }
        let timeout = Duration::from_secs_f64(if timeout_s.is_finite() && timeout_s != 0.0 {
            timeout_s.clamp(0.1, 60.0)
        } else {
            DEFAULT_TIMEOUT_S
        });
        // One run at a time per data root: in this process, then across
        // processes through the lock file.
        let _guard = self.run_lock.lock().await;
        let data_root = self.data_root.clone();
        let file_lock = tokio::task::spawn_blocking(move || lock_runs(&data_root))
            .await
            .map_err(|e| CheckError::Internal(e.to_string()))??;

        let data_root = self.data_root.clone();
        let job2 = job.clone();
        let progress = Arc::new(progress);
        let p2 = progress.clone();
        let staged = tokio::task::spawn_blocking(move || stage(&job2, &data_root, &*p2))
            .await
            .map_err(|e| CheckError::Internal(e.to_string()))??;
        let policy = self.policy(&job);
        progress(format!(
            "running {} (containment: {}, sandbox: {}, timeout {:.1} s)",
            staged.argv.first().map(String::as_str).unwrap_or(""),
            self.containment_name(),
            exec::sandbox::planned(&policy),
            timeout.as_secs_f64()
        ));
        let key_before = keys::admission_key(&self.data_root, false).map_err(refused)?;
        let execution = exec::run_contained(CheckSpec {
            argv: staged.argv.clone(),
            cwd: staged.run_dir.path().to_path_buf(),
            env: staged.env.clone(),
            timeout,
            containment: self.containment,
            sandbox: policy,
        })
        .await;
        progress(format!(
            "check exited {} after {:.0} ms; validating",
            execution.exit_code,
            execution.duration.as_secs_f64() * 1000.0
        ));
        let key_after = keys::admission_key(&self.data_root, false).map_err(refused)?;
        if key_before != key_after {
            return Err(refused(msg::KEY_CHANGED));
        }
        let data_root = self.data_root.clone();
        let job2 = job.clone();
        let staged = tokio::task::spawn_blocking(move || validate_after(&job2, &data_root, staged))
            .await
            .map_err(|e| CheckError::Internal(e.to_string()))??;
        // The copies are validated: remove the run folder while the receipt
        // is signed and stored (awaited below, so nothing is left behind).
        let Staged {
            run_dir,
            revision_digest,
            ..
        } = staged;
        let removal = tokio::task::spawn_blocking(move || drop(run_dir));
        let newest = self
            .store
            .newest_job(&job.profile_id, &job.watcher_name)
            .await?;
        if !job::is_current(newest.as_ref(), &job.job_id, now_us()) {
            return Err(refused(msg::EXPIRED_DURING));
        }
        let measurement = evidence::measure(
            i64::from(execution.exit_code),
            execution.stop_reason.clone(),
            &execution.stdout,
            &execution.stderr,
            &key_after,
            execution.containment.as_str(),
        )
        .with_sandbox(execution.sandbox.to_string());
        let produced_us = now_us();
        let unsigned = Receipt {
            seq: 0,
            receipt_id: job::new_job_id(),
            profile_id: job.profile_id.clone(),
            task_id: job.task_id.clone(),
            run_id: job.job_id.clone(),
            producer: job.producer.clone(),
            command_digest: job.command_digest.clone(),
            verdict: String::new(),
            exit_code: 0,
            produced_at: iso_of_us(produced_us),
            produced_us,
            evidence: String::new(),
            evidence_digest: String::new(),
        };
        let mut receipt = evidence::sign(
            unsigned,
            &measurement,
            evidence::admission(&job.job_id, &revision_digest, &job.definition_digest),
            &key_after,
        );
        receipt.seq = self.store.insert_receipt(&receipt).await?;
        drop(file_lock);
        self.events.publish(receipt.seq, ReceiptEvent::of(&receipt));
        progress(format!(
            "{} receipt {}",
            receipt.verdict, receipt.receipt_id
        ));
        let _ = removal.await;
        Ok(RunResult {
            receipt,
            measurement,
            revision_digest,
            definition_digest: job.definition_digest,
        })
    }

    pub fn containment_name(&self) -> &'static str {
        match self.containment {
            ContainmentChoice::Auto => exec::available_containment().as_str(),
            ContainmentChoice::CgroupV2 => exec::Containment::CgroupV2.as_str(),
            ContainmentChoice::Subreaper => exec::Containment::Subreaper.as_str(),
        }
    }

    /// The receipt gate (spec RECEIPT-39..44).
    pub async fn gate(&self, req: &GateRequest<'_>) -> (bool, String) {
        gate::evaluate(self, req).await
    }
}

impl GateWorld for Checks {
    fn platform_supported(&self) -> bool {
        tree::platform_supported()
    }

    fn now_us(&self) -> i64 {
        now_us()
    }

    async fn newest_job(&self, profile: &str, watcher: &str) -> Result<Option<Job>, Fault> {
        self.store
            .newest_job(profile, watcher)
            .await
            .map_err(|_| Fault::Database)
    }

    async fn newest_receipt(&self, job: &Job) -> Result<Option<Receipt>, Fault> {
        self.store
            .newest_receipt(job)
            .await
            .map_err(|_| Fault::Database)
    }

    fn key(&self) -> Result<Vec<u8>, Fault> {
        keys::admission_key(&self.data_root, false).map_err(|_| Fault::Invalid)
    }

    async fn live_revision(&self, job: &Job) -> Result<String, Fault> {
        let job = job.clone();
        tokio::task::spawn_blocking(move || live_revision(&job).map_err(|_| Fault::Invalid))
            .await
            .map_err(|_| Fault::Invalid)?
    }
}

/// The project folder and its declared artifacts as they are now.
fn live_selection(job: &Job) -> Result<(Dir, Vec<String>), String> {
    let root = Dir::open(Path::new(&job.cwd)).map_err(|_| msg::INPUT_IO.to_string())?;
    let files = expand(root.path(), &job.artifact_paths)?;
    Ok((root, files))
}

/// The declared artifacts as they are now in the project, hashed in place.
fn live_revision(job: &Job) -> Result<String, String> {
    let (root, files) = live_selection(job)?;
    Ok(job::revision_digest(&tree::hash_files(&root, &files)?))
}

/// [`live_revision`] after a run: the same selection, but a file that
/// provably did not change since it was copied keeps its hash (see
/// [`crate::fsys::stamp`]); anything else is hashed again.
fn live_revision_since(job: &Job, staged: &Staged) -> Result<String, String> {
    let (root, files) = live_selection(job)?;
    if files != staged.artifact_files {
        return Ok(job::revision_digest(&tree::hash_files(&root, &files)?));
    }
    let earlier: Vec<(&FileRecord, Option<Stamp>)> = staged
        .candidate
        .iter()
        .zip(staged.stamps.iter().copied())
        .collect();
    Ok(job::revision_digest(&tree::rehash_changed(
        &root, &earlier,
    )?))
}

/// Validation and pinning of a registration (blocking filesystem work).
fn prepare(r: Registration, data_root: &Path) -> Result<Job, CheckError> {
    job::validate_identity(&[&r.profile_id, &r.task_id, &r.watcher_name, &r.producer])
        .map_err(refused)?;
    command::validate_argv(&r.argv).map_err(refused)?;
    let ttl = job::ttl(r.ttl_seconds).map_err(refused)?;
    let cwd = std::fs::canonicalize(&r.cwd)
        .ok()
        .filter(|p| p.is_dir())
        .ok_or_else(|| refused(msg::INPUT_OUTSIDE))?;
    let resolve = |p: &Path| std::fs::canonicalize(p).ok();
    let mut argv = command::normalise(&r.argv, &cwd, &resolve).map_err(refused)?;
    if !Path::new(&argv[0]).is_absolute() {
        argv[0] = resolve_executable(&argv[0])
            .ok_or_else(|| refused(msg::EXECUTABLE))?
            .display()
            .to_string();
    }
    if !trusted_executable(Path::new(&argv[0])) {
        return Err(refused(msg::EXECUTABLE));
    }
    if !tree::platform_supported() {
        return Err(refused(msg::PLATFORM));
    }
    let data_root = std::fs::canonicalize(data_root).map_err(|_| refused(msg::PRIVATE_SYMLINK))?;
    if data_root.starts_with(&cwd) {
        return Err(refused(msg::DATA_ROOT_INSIDE));
    }
    let artifact_paths = selectors::normalise(&r.artifact_paths, &cwd).map_err(refused)?;
    let check_paths = selectors::normalise(&r.check_paths, &cwd).map_err(refused)?;
    let project = Dir::open(&cwd).map_err(|_| refused(msg::INPUT_IO))?;
    let artifact_files = expand(&cwd, &artifact_paths).map_err(refused)?;
    let check_files = expand(&cwd, &check_paths).map_err(refused)?;
    if check_files
        .iter()
        .any(|f| artifact_files.binary_search(f).is_ok())
    {
        return Err(refused(msg::DISTINCT));
    }
    let artifacts = tree::hash_files(&project, &artifact_files).map_err(refused)?;
    let revision_digest = job::revision_digest(&artifacts);
    let relative = command::rebase(&argv, &cwd, Path::new("")).map_err(refused)?;

    // Everything is valid: pin the check files.
    keys::admission_key(&data_root, true).map_err(refused)?;
    let root = Dir::open(&data_root).map_err(|_| refused(msg::PRIVATE_SYMLINK))?;
    let store = root
        .subdir(STORE_DIR, true)
        .map_err(|_| refused(msg::PRIVATE_SYMLINK))?;
    store
        .make_private()
        .map_err(|_| refused(msg::PRIVATE_NOT_DIR))?;
    let staging_name = format!("staging/{}", job::new_job_id());
    let staging = store
        .subdir(&staging_name, true)
        .map_err(|_| refused(msg::PRIVATE_SYMLINK))?;
    let pinned = tree::copy_files(&project, &check_files, &staging);
    let definition = match pinned {
        Ok(d) => d,
        Err(e) => {
            let _ = std::fs::remove_dir_all(staging.path());
            return Err(refused(e));
        }
    };
    let definition_digest = job::definition_digest(&relative, &definition, &artifact_paths);
    let final_rel = format!("definitions/{definition_digest}");
    store
        .subdir("definitions", true)
        .map_err(|_| refused(msg::PRIVATE_SYMLINK))?;
    let final_path = store.path().join(&final_rel);
    if std::fs::rename(staging.path(), &final_path).is_err() {
        // Already pinned (same digest): it must still hold the same bytes.
        let _ = std::fs::remove_dir_all(staging.path());
        let existing = store
            .subdir(&final_rel, false)
            .map_err(|_| refused(msg::DEFINITION_MODIFIED))?;
        let again = tree::hash_files(&existing, &check_files)
            .map_err(|_| refused(msg::DEFINITION_MODIFIED))?;
        if !same_records(&again, &definition) {
            return Err(refused(msg::DEFINITION_MODIFIED));
        }
    }
    let registered_us = now_us();
    let expires_us = registered_us + ttl * 1_000_000;
    let cwd_s = cwd.display().to_string();
    Ok(Job {
        seq: 0,
        job_id: job::new_job_id(),
        profile_id: r.profile_id,
        task_id: r.task_id,
        watcher_name: r.watcher_name,
        producer: r.producer,
        command_digest: job::command_digest(&argv, &cwd_s),
        argv,
        cwd: cwd_s,
        artifacts,
        revision_digest,
        registered_at: iso_of_us(registered_us),
        expires_at: iso_of_us(expires_us),
        registered_us,
        expires_us,
        allow_prestart_evidence: r.allow_prestart_evidence,
        artifact_paths,
        check_paths,
        definition,
        definition_digest,
    })
}

/// Holds the per-data-root run lock until dropped.
struct RunLock {
    _file: std::fs::File,
}

fn lock_runs(data_root: &Path) -> Result<RunLock, CheckError> {
    let root = Dir::open(data_root).map_err(|_| refused(msg::PRIVATE_SYMLINK))?;
    let store = root
        .subdir(STORE_DIR, true)
        .map_err(|_| refused(msg::PRIVATE_SYMLINK))?;
    let path = store.path().join("execution.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(
            rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32,
        )
        .mode(0o600)
        .open(&path)
        .map_err(|_| refused(msg::LOCK_NOT_FILE))?;
    if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
        return Err(refused(msg::LOCK_NOT_FILE));
    }
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(RunLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => return Err(refused(msg::LOCK_BUSY)),
        }
    }
}

use std::os::unix::fs::OpenOptionsExt;

/// A run folder with the pinned definition and the copied artifacts.
struct Staged {
    run_dir: tempfile::TempDir,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    artifact_files: Vec<String>,
    candidate: Vec<FileRecord>,
    /// The live sources as they were before they were copied.
    stamps: Vec<Option<Stamp>>,
    revision_digest: String,
}

fn stage(
    job: &Job,
    data_root: &Path,
    progress: &(dyn Fn(String) + Send + Sync),
) -> Result<Staged, CheckError> {
    let cwd = PathBuf::from(&job.cwd);
    let artifact_files = expand(&cwd, &job.artifact_paths).map_err(refused)?;
    // Sizes only steer where the run folder goes; a file that vanishes here
    // fails later, in the copy.
    let input_bytes: u64 = artifact_files
        .iter()
        .filter_map(|f| std::fs::symlink_metadata(cwd.join(f)).ok())
        .map(|m| m.len())
        .sum();
    let temp = std::fs::canonicalize(scratch::run_folder_parent(input_bytes))
        .map_err(|_| refused(msg::TEMP_INSIDE))?;
    let data_root = std::fs::canonicalize(data_root).map_err(|_| refused(msg::PRIVATE_SYMLINK))?;
    if temp.starts_with(&cwd) || temp.starts_with(&data_root) {
        return Err(refused(msg::TEMP_INSIDE));
    }
    let run_dir = tempfile::Builder::new()
        .prefix("slm-check-")
        .tempdir_in(&temp)
        .map_err(|e| CheckError::Internal(format!("cannot create a run folder: {e}")))?;
    let run = Dir::open(run_dir.path()).map_err(|_| refused(msg::PRIVATE_SYMLINK))?;
    run.make_private()
        .map_err(|_| refused(msg::PRIVATE_NOT_DIR))?;

    progress(format!(
        "materialising {} pinned check file(s)",
        job.definition.len()
    ));
    let def_dir = Dir::open(&data_root)
        .and_then(|r| {
            r.subdir(
                &format!("{STORE_DIR}/definitions/{}", job.definition_digest),
                false,
            )
        })
        .map_err(|_| refused(msg::DEFINITION_UNAVAILABLE))?;
    let def_paths: Vec<String> = job.definition.iter().map(|r| r.path.clone()).collect();
    let copied = tree::copy_files(&def_dir, &def_paths, &run)
        .map_err(|_| refused(msg::DEFINITION_UNAVAILABLE))?;
    let relative = command::rebase(&job.argv, &cwd, Path::new("")).map_err(refused)?;
    if !same_records(&copied, &job.definition)
        || job::definition_digest(&relative, &copied, &job.artifact_paths) != job.definition_digest
    {
        return Err(refused(msg::DEFINITION_MODIFIED));
    }

    let project = Dir::open(&cwd).map_err(|_| refused(msg::INPUT_IO))?;
    progress(format!(
        "copying {} declared artifact(s)",
        artifact_files.len()
    ));
    let (candidate, stamps): (Vec<FileRecord>, Vec<Option<Stamp>>) =
        tree::copy_files_stamped(&project, &artifact_files, &run)
            .map_err(refused)?
            .into_iter()
            .unzip();
    let revision_digest = job::revision_digest(&candidate);
    let argv = command::rebase(&job.argv, &cwd, run_dir.path()).map_err(refused)?;

    let runtime = run_dir.path().join(".slm-runtime");
    for sub in ["home", "tmp", "cache", "config", "data"] {
        run.subdir(&format!(".slm-runtime/{sub}"), true)
            .map_err(|_| refused(msg::PRIVATE_SYMLINK))?;
    }
    let rt = |s: &str| runtime.join(s).display().to_string();
    let token = crate::domain::canon::hex(uuid::Uuid::new_v4().as_bytes())
        + &crate::domain::canon::hex(uuid::Uuid::new_v4().as_bytes());
    let env = vec![
        ("HOME".into(), rt("home")),
        ("USERPROFILE".into(), rt("home")),
        ("TMPDIR".into(), rt("tmp")),
        ("TMP".into(), rt("tmp")),
        ("TEMP".into(), rt("tmp")),
        ("XDG_CACHE_HOME".into(), rt("cache")),
        ("XDG_CONFIG_HOME".into(), rt("config")),
        ("XDG_DATA_HOME".into(), rt("data")),
        ("PATH".into(), CHECK_PATH.into()),
        ("PYTHONNOUSERSITE".into(), "1".into()),
        ("PYTEST_DISABLE_PLUGIN_AUTOLOAD".into(), "1".into()),
        ("SLM_LOOP_RUN_TOKEN".into(), token),
    ];
    Ok(Staged {
        run_dir,
        argv,
        env,
        artifact_files,
        candidate,
        stamps,
        revision_digest,
    })
}

/// RECEIPT-32: nothing the receipt certifies changed while the check ran.
fn validate_after(job: &Job, _data_root: &Path, staged: Staged) -> Result<Staged, CheckError> {
    let live = live_revision_since(job, &staged).map_err(|_| refused(msg::ARTIFACTS_CHANGED))?;
    if live != staged.revision_digest {
        return Err(refused(msg::ARTIFACTS_CHANGED));
    }
    let run = Dir::open(staged.run_dir.path()).map_err(|_| refused(msg::INPUTS_MODIFIED))?;
    let copies = tree::hash_files(&run, &staged.artifact_files)
        .map_err(|_| refused(msg::INPUTS_MODIFIED))?;
    if !same_records(&copies, &staged.candidate) {
        return Err(refused(msg::INPUTS_MODIFIED));
    }
    let def_paths: Vec<String> = job.definition.iter().map(|r| r.path.clone()).collect();
    let defs =
        tree::hash_files(&run, &def_paths).map_err(|_| refused(msg::DEFINITION_MODIFIED_DURING))?;
    if !same_records(&defs, &job.definition) {
        return Err(refused(msg::DEFINITION_MODIFIED_DURING));
    }
    Ok(staged)
}
