//! The check's filesystem sandbox (SPEC GAP-04), with Landlock.
//!
//! A check runs as the operator's user. Without a sandbox it can read the
//! admission key and the databases in the data root (and forge receipts with
//! the key), read undeclared files of the live project (a verdict the receipt
//! does not cover), and write anywhere the user can. Under the sandbox:
//!
//! * it writes only inside its run folder (and to `/dev/null` and friends,
//!   pseudo-terminals, and `/dev/shm` for semaphores and shared memory);
//! * it cannot read the data root or the live project at all;
//! * it cannot signal a process outside the sandbox (Landlock ABI 6), and
//!   Landlock never lets it ptrace one or open its `/proc/<pid>/mem` (the
//!   server's memory holds the key). `/proc/<pid>/environ` stays readable,
//!   which is why no secret is ever passed in an environment variable;
//! * setuid programs do not raise its privileges (`no_new_privs`).
//!
//! A write the sandbox refuses fails in the check with `EACCES`: nothing
//! lands, and a check that notices fails by itself. The kernel does not tell
//! us that it refused, so a check that ignores the error can still pass, but
//! it passed on its copied inputs without having changed anything else.
//!
//! Landlock grants, it cannot deny inside a grant, so "everything but the data
//! root and the project" is built as the complement: each directory on the way
//! down to a hidden tree is listed, and every sibling of that way is granted
//! read access. Entries created later in those directories stay unreadable,
//! which errs on the safe side.
//!
//! Offline mode (`SLM_CHECK_NETWORK=off`, SPEC GAP-05): the check gets its
//! own network namespace with nothing but a downed loopback, so a verdict
//! cannot depend on a remote answer. As root that is a plain `unshare`; as
//! another user, a user namespace mapping only the user's own ids comes with
//! it. Where neither is allowed, Landlock (ABI 4) refuses TCP `connect` and
//! `bind` instead (UDP and Unix sockets stay open: the receipt says which).
//!
//! The ruleset is built in the parent (it allocates); the child only makes
//! raw system calls on what was prepared, which is async-signal-safe (see
//! [`enforce`]).

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::fsys::stamp::{self, Stamp};
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

/// Environment variable selecting the sandbox (`auto`, `landlock`, `off`).
pub const SANDBOX_ENV: &str = "SLM_CHECK_SANDBOX";
/// Environment variable selecting the network (`on`, `off`).
pub const NETWORK_ENV: &str = "SLM_CHECK_NETWORK";
/// Reason when offline mode was asked for and nothing here can provide it.
pub const REASON_OFFLINE_UNAVAILABLE: &str =
    "Independent check not started: offline mode (no network) is unavailable on this host";
/// Reason when `landlock` was required and this kernel cannot provide it.
pub const REASON_SANDBOX_UNAVAILABLE: &str =
    "Independent check not started: the Landlock sandbox is unavailable on this host";

/// The Landlock ABI whose rights are asked for; older kernels get what they
/// support (best effort). Not newer on purpose: later ABIs restrict
/// connecting to Unix sockets by path, which would cut checks off from local
/// test databases and is a network question (GAP-05), not a file one.
const NEWEST: ABI = ABI::V6;

/// Device files a check may write: output sinks every shell script uses.
/// Device files a check may open for writing: output sinks every shell
/// script uses, and the pseudo-terminals of tests that drive a terminal.
const WRITABLE_DEVICES: [&str; 8] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/random",
    "/dev/urandom",
    "/dev/ptmx",
    "/dev/pts",
];
/// Where POSIX semaphores and shared memory live (`sem_open`, `shm_open`):
/// Python's multiprocessing locks need it. Runs on one data root are
/// serialised, so no other check's folder is there to tamper with.
const SHARED_MEMORY: &str = "/dev/shm";

/// What the operator asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxChoice {
    /// Landlock when the kernel has it, otherwise run unsandboxed (the
    /// receipt says `none`).
    #[default]
    Auto,
    /// Landlock or no run at all.
    Landlock,
    /// No sandbox (the receipt says `none`).
    Off,
}

/// An unknown sandbox name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown check sandbox {0:?} (expected auto, landlock or off)")]
pub struct ParseSandboxError(pub String);

impl FromStr for SandboxChoice {
    type Err = ParseSandboxError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(SandboxChoice::Auto),
            "landlock" | "on" | "required" => Ok(SandboxChoice::Landlock),
            "off" | "none" => Ok(SandboxChoice::Off),
            _ => Err(ParseSandboxError(s.to_owned())),
        }
    }
}

impl SandboxChoice {
    /// Reads [`SANDBOX_ENV`]. Unset or empty → `Auto`; an unknown value is
    /// logged and gives `Landlock` (the strict reading of a typo).
    pub fn from_env() -> SandboxChoice {
        super::env_choice(
            SANDBOX_ENV,
            SandboxChoice::Auto,
            (SandboxChoice::Landlock, "the required Landlock sandbox"),
        )
    }
}

/// Whether the check has the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkChoice {
    #[default]
    On,
    Off,
}

/// An unknown network choice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown check network {0:?} (expected on or off)")]
pub struct ParseNetworkError(pub String);

impl FromStr for NetworkChoice {
    type Err = ParseNetworkError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" | "host" => Ok(NetworkChoice::On),
            "off" | "none" | "offline" => Ok(NetworkChoice::Off),
            _ => Err(ParseNetworkError(s.to_owned())),
        }
    }
}

impl NetworkChoice {
    /// Reads [`NETWORK_ENV`]. Unset or empty → `On`; an unknown value is
    /// logged and gives `Off` (the strict reading of a typo).
    pub fn from_env() -> NetworkChoice {
        super::env_choice(
            NETWORK_ENV,
            NetworkChoice::On,
            (NetworkChoice::Off, "offline"),
        )
    }
}

/// How an offline check is cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offline {
    /// Online.
    No,
    /// A new network namespace (as root).
    NetNs,
    /// A new user namespace with a new network namespace.
    UserNetNs,
    /// Landlock refuses TCP connect and bind.
    NoTcp,
}

/// What the check may touch.
#[derive(Debug, Clone, Default)]
pub struct FsPolicy {
    pub choice: SandboxChoice,
    pub network: NetworkChoice,
    /// Trees the check may neither read nor write: the data root (key,
    /// databases) and the live project. Absolute paths.
    pub hidden: Vec<PathBuf>,
}

/// The sandbox a run really had, as the receipt records it:
/// `landlock-v<abi>` or `none`, then `+netns` or `+no-tcp` when offline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sandbox {
    /// The Landlock ABI enforced, if any.
    pub landlock: Option<i32>,
    pub offline: Offline,
}

impl Sandbox {
    pub const NONE: Sandbox = Sandbox {
        landlock: None,
        offline: Offline::No,
    };
}

impl fmt::Display for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.landlock {
            Some(v) => write!(f, "landlock-v{v}")?,
            None => f.write_str("none")?,
        }
        match self.offline {
            Offline::No => Ok(()),
            Offline::NetNs | Offline::UserNetNs => f.write_str("+netns"),
            Offline::NoTcp => f.write_str("+no-tcp"),
        }
    }
}

/// The Landlock ABI version of this kernel, 0 without Landlock (probed once).
pub fn landlock_abi() -> i32 {
    static ABI_VERSION: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
        // SAFETY: the documented version query: NULL attributes, size 0.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        i32::try_from(v).unwrap_or(0).max(0)
    })
}

/// Whether this process may create namespaces: as root (network namespace
/// alone) or through an unprivileged user namespace. Probed once: it reads
/// `/proc/sys` files, and runs ask for every offline check.
fn namespaces() -> Offline {
    static PROBED: std::sync::OnceLock<Offline> = std::sync::OnceLock::new();
    *PROBED.get_or_init(probe_namespaces)
}

fn probe_namespaces() -> Offline {
    if rustix::process::geteuid().is_root() {
        return Offline::NetNs;
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    // Debian/Ubuntu switches; absent elsewhere (then only the limit counts).
    let clone_ok = read("/proc/sys/kernel/unprivileged_userns_clone").is_none_or(|v| v != 0);
    let apparmor_ok =
        read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").is_none_or(|v| v == 0);
    if clone_ok && apparmor_ok && read("/proc/sys/user/max_user_namespaces").unwrap_or(0) > 0 {
        Offline::UserNetNs
    } else {
        Offline::No
    }
}

/// What the sandbox of a run will be under `policy` on this host (offline
/// `No` when offline mode cannot be had).
pub fn planned(policy: &FsPolicy) -> Sandbox {
    let landlock = match (policy.choice, landlock_abi()) {
        (SandboxChoice::Off, _) | (_, 0) => None,
        (_, v) => Some(v),
    };
    let offline = match policy.network {
        NetworkChoice::On => Offline::No,
        NetworkChoice::Off => match namespaces() {
            Offline::No if landlock_abi() >= 4 => Offline::NoTcp,
            ns => ns,
        },
    };
    Sandbox { landlock, offline }
}

/// What the child does between fork and exec; plain data, so that a
/// `pre_exec` hook may carry it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildPlan {
    /// A Landlock ruleset descriptor, −1 for none.
    ruleset: RawFd,
    offline: Offline,
    /// `"<uid> <uid> 1"` and `"<gid> <gid> 1"` (NUL-padded) for a user
    /// namespace.
    uid_map: [u8; 24],
    gid_map: [u8; 24],
}

impl ChildPlan {
    /// Offline in a user namespace of its own, mapping only our ids.
    #[cfg(test)]
    pub fn user_netns(uid: u32, gid: u32) -> ChildPlan {
        ChildPlan {
            ruleset: -1,
            offline: Offline::UserNetNs,
            uid_map: id_map(uid),
            gid_map: id_map(gid),
        }
    }

    /// No sandbox at all.
    #[cfg(test)]
    pub const NOTHING: ChildPlan = ChildPlan {
        ruleset: -1,
        offline: Offline::No,
        uid_map: [0; 24],
        gid_map: [0; 24],
    };
}

/// A ruleset ready for the child to enforce.
pub(crate) struct Prepared {
    _ruleset: Option<OwnedFd>,
    pub plan: ChildPlan,
    pub sandbox: Sandbox,
}

/// Why no run may start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SandboxError {
    #[error("{REASON_SANDBOX_UNAVAILABLE}")]
    Unavailable,
    #[error("{REASON_OFFLINE_UNAVAILABLE}")]
    OfflineUnavailable,
    #[error("cannot build the check sandbox: {0}")]
    Build(String),
}

impl SandboxError {
    /// The run's stop reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SandboxError::Unavailable => REASON_SANDBOX_UNAVAILABLE,
            SandboxError::OfflineUnavailable => REASON_OFFLINE_UNAVAILABLE,
            SandboxError::Build(_) => super::REASON_DID_NOT_COMPLETE,
        }
    }
}

fn id_map(id: u32) -> [u8; 24] {
    let mut out = [0u8; 24];
    let text = format!("{id} {id} 1");
    out[..text.len()].copy_from_slice(text.as_bytes());
    out
}

/// Prepares the sandbox for a check whose run folder is `writable`.
pub(crate) fn prepare(policy: &FsPolicy, writable: &Path) -> Result<Prepared, SandboxError> {
    let mut sandbox = planned(policy);
    if policy.choice == SandboxChoice::Landlock && sandbox.landlock.is_none() {
        return Err(SandboxError::Unavailable);
    }
    if policy.network == NetworkChoice::Off && sandbox.offline == Offline::No {
        return Err(SandboxError::OfflineUnavailable);
    }
    let ruleset = if sandbox.landlock.is_some() || sandbox.offline == Offline::NoTcp {
        build(policy, writable, sandbox).map_err(|e| SandboxError::Build(e.to_string()))?
    } else {
        None
    };
    if ruleset.is_none() {
        // The kernel took nothing (a best-effort ruleset came back empty).
        if policy.choice == SandboxChoice::Landlock {
            return Err(SandboxError::Unavailable);
        }
        if sandbox.offline == Offline::NoTcp {
            return Err(SandboxError::OfflineUnavailable);
        }
        sandbox.landlock = None;
    }
    Ok(Prepared {
        plan: ChildPlan {
            ruleset: ruleset.as_ref().map_or(-1, AsRawFd::as_raw_fd),
            offline: sandbox.offline,
            uid_map: id_map(rustix::process::geteuid().as_raw()),
            gid_map: id_map(rustix::process::getegid().as_raw()),
        },
        _ruleset: ruleset,
        sandbox,
    })
}

/// Every file-system right this code handles. `IoctlDev` stays out: it would
/// only turn a harmless `isatty()` on an inherited descriptor into `EACCES`.
fn handled() -> BitFlags<AccessFs> {
    AccessFs::from_all(NEWEST) & !AccessFs::IoctlDev
}

fn read_rights(is_dir: bool) -> BitFlags<AccessFs> {
    let r = AccessFs::from_read(NEWEST);
    if is_dir {
        r
    } else {
        r & AccessFs::from_file(NEWEST)
    }
}

type LandlockResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn build(policy: &FsPolicy, writable: &Path, plan: Sandbox) -> LandlockResult<Option<OwnedFd>> {
    let mut ruleset = Ruleset::default();
    if plan.offline == Offline::NoTcp {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    if plan.landlock.is_none() {
        // Offline through Landlock only: files stay as they are.
        return Ok(ruleset.create()?.into());
    }
    let hidden: Vec<PathBuf> = policy
        .hidden
        .iter()
        .map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.clone()))
        // Hiding "/" would leave nothing to run; refusing it is the caller's job.
        .filter(|h| h.parent().is_some())
        .collect();
    let complement = Complement::current(hidden);
    let mut rules: Vec<(OwnedFd, BitFlags<AccessFs>)> = Vec::new();
    let run = open_path(writable)?.ok_or("the run folder is not a directory")?;
    rules.push((run.0, handled()));
    for dev in WRITABLE_DEVICES {
        if let Ok(Some((fd, _))) = open_path(Path::new(dev)) {
            let rw = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
            rules.push((fd, rw & handled()));
        }
    }
    if let Ok(Some((fd, true))) = open_path(Path::new(SHARED_MEMORY)) {
        rules.push((fd, handled() & !AccessFs::Execute));
    }
    let mut ruleset = ruleset
        .handle_access(handled())?
        .scope(Scope::Signal)?
        .create()?;
    for (fd, access) in &complement.rules {
        ruleset = ruleset.add_rule(PathBeneath::new(fd.as_fd(), *access))?;
    }
    for (fd, access) in rules {
        ruleset = ruleset.add_rule(PathBeneath::new(fd, access))?;
    }
    Ok(ruleset.into())
}

/// The read grants of "everything but the hidden trees", with the
/// directories listed to find them. Building them opens every entry of each
/// directory on the way down to a hidden tree (0.3–0.4 ms of a 2 ms check
/// here, more with a crowded `/tmp`), so they are kept between runs for as
/// long as none of those directories changed.
struct Complement {
    hidden: Vec<PathBuf>,
    /// Each listed directory with its identity from just before it was
    /// listed; `None` when that identity proves nothing (see [`Complement::build`]).
    listed: Vec<(PathBuf, Option<Stamp>)>,
    rules: Vec<(OwnedFd, BitFlags<AccessFs>)>,
}

impl Complement {
    /// The complement for `hidden` (canonical paths): the one kept from an
    /// earlier run when it is still exact, otherwise a new one (kept for
    /// later runs when it can be checked).
    fn current(hidden: Vec<PathBuf>) -> std::sync::Arc<Complement> {
        use std::sync::{Arc, Mutex, PoisonError};
        static KEPT: Mutex<Option<Arc<Complement>>> = Mutex::new(None);
        let kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(kept) = kept.filter(|k| k.still_exact(&hidden)) {
            return kept;
        }
        let built = Arc::new(Complement::build(Path::new("/"), hidden));
        if built.listed.iter().all(|(_, id)| id.is_some()) {
            *KEPT.lock().unwrap_or_else(PoisonError::into_inner) = Some(built.clone());
        }
        built
    }

    /// Lists the directories on the way down from `root` to the hidden trees
    /// and grants the rest. A directory's identity is taken before it is
    /// listed, and only kept when its ctime is older than the coarse clock
    /// tick read before that: a change later in the same tick could leave
    /// the times as they were ("racily clean"), so such a listing is never
    /// trusted again.
    fn build(root: &Path, hidden: Vec<PathBuf>) -> Complement {
        let mut c = Complement {
            hidden,
            listed: Vec::new(),
            rules: Vec::new(),
        };
        grant_complement(root, &c.hidden, &mut c.rules, &mut c.listed);
        c
    }

    /// Whether these grants are still exactly what [`Complement::build`]
    /// would make for `hidden` now. A change it can miss (an entry made in
    /// the same clock tick as the listing) cannot happen: such listings are
    /// not kept. What a kept grant names by descriptor is the file or folder
    /// that was there; one replaced since would have changed its directory.
    fn still_exact(&self, hidden: &[PathBuf]) -> bool {
        self.hidden == hidden
            && self
                .listed
                .iter()
                .all(|(dir, id)| id.is_some() && Stamp::at(dir) == *id)
    }
}

/// Grants read access to everything under `dir` except the `hidden` trees,
/// recording each directory it lists (see [`Complement::build`]).
/// Whatever cannot be listed or opened stays unreadable: less access, never
/// more, and never a reason not to run.
fn grant_complement(
    dir: &Path,
    hidden: &[PathBuf],
    rules: &mut Vec<(OwnedFd, BitFlags<AccessFs>)>,
    listed: &mut Vec<(PathBuf, Option<Stamp>)>,
) {
    fn grant(p: &Path, rules: &mut Vec<(OwnedFd, BitFlags<AccessFs>)>) {
        if let Ok(Some((fd, is_dir))) = open_path(p) {
            rules.push((fd, read_rights(is_dir)));
        }
    }
    if !hidden.iter().any(|h| h.starts_with(dir) && h != dir) {
        grant(dir, rules);
        return;
    }
    let tick = stamp::coarse_now();
    let id = Stamp::at(dir).filter(|s| s.settled_before(tick));
    listed.push((dir.to_path_buf(), id));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        if hidden.contains(&path) {
            continue;
        }
        // Symbolic links are skipped: what they point to is granted (or
        // not) under its own real path.
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {}
            Ok(m) if m.is_dir() => grant_complement(&path, hidden, rules, listed),
            Ok(_) => grant(&path, rules),
            Err(_) => {}
        }
    }
}

/// `O_PATH | O_NOFOLLOW`: a descriptor naming `p` itself (never what a link
/// swapped in meanwhile points to) and whether it is a directory. `None` for
/// a symbolic link or a path that vanished.
fn open_path(p: &Path) -> io::Result<Option<(OwnedFd, bool)>> {
    use rustix::fs::{FileType, Mode, OFlags};
    let fd = match rustix::fs::open(
        p,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    Ok(match kind {
        FileType::Symlink => None,
        k => Some((fd, k == FileType::Directory)),
    })
}

fn check(r: libc::c_long) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Writes `text` (up to its first NUL) into a `/proc/self` file.
///
/// # Safety
/// Async-signal-safe: open, write, close.
unsafe fn write_proc(path: &std::ffi::CStr, text: &[u8]) -> io::Result<()> {
    let len = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        check(fd.into())?;
        let n = libc::write(fd, text.as_ptr().cast(), len);
        libc::close(fd);
        check(n as libc::c_long)
    }
}

/// The child's side, between fork/clone and exec: the network namespace,
/// `no_new_privs`, then the ruleset. Only raw system calls on what was
/// prepared before the fork.
///
/// # Safety
/// Async-signal-safe; meant for a freshly forked child.
pub(crate) unsafe fn enforce(plan: &ChildPlan) -> io::Result<()> {
    unsafe {
        match plan.offline {
            Offline::NetNs => check(libc::unshare(libc::CLONE_NEWNET).into())?,
            Offline::UserNetNs => {
                check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET).into())?;
                write_proc(c"/proc/self/setgroups", b"deny")?;
                write_proc(c"/proc/self/uid_map", &plan.uid_map)?;
                write_proc(c"/proc/self/gid_map", &plan.gid_map)?;
            }
            Offline::No | Offline::NoTcp => {}
        }
        if plan.ruleset >= 0 {
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
            check(libc::syscall(
                libc::SYS_landlock_restrict_self,
                plan.ruleset,
                0u32,
            ))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse() {
        assert_eq!("auto".parse(), Ok(SandboxChoice::Auto));
        assert_eq!(" Landlock ".parse(), Ok(SandboxChoice::Landlock));
        assert_eq!("off".parse(), Ok(SandboxChoice::Off));
        assert!("chroot".parse::<SandboxChoice>().is_err());
    }

    #[test]
    fn off_is_none_and_labels_read_well() {
        let off = FsPolicy {
            choice: SandboxChoice::Off,
            ..FsPolicy::default()
        };
        assert_eq!(planned(&off), Sandbox::NONE);
        let ll = |offline| Sandbox {
            landlock: Some(7),
            offline,
        };
        assert_eq!(ll(Offline::No).to_string(), "landlock-v7");
        assert_eq!(ll(Offline::NetNs).to_string(), "landlock-v7+netns");
        assert_eq!(ll(Offline::UserNetNs).to_string(), "landlock-v7+netns");
        assert_eq!(ll(Offline::NoTcp).to_string(), "landlock-v7+no-tcp");
        assert_eq!(Sandbox::NONE.to_string(), "none");
        assert_eq!(id_map(1000)[..11], *b"1000 1000 1");
        assert_eq!(id_map(1000)[11], 0);
    }

    /// The complement never grants a hidden tree nor anything inside it, and
    /// grants every sibling on the way down.
    #[test]
    fn complement_skips_hidden_trees() {
        let root = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        for d in ["a/secret/inner", "a/open", "b"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::fs::write(base.join("a/file"), "x").unwrap();
        std::os::unix::fs::symlink(base.join("a/secret"), base.join("a/link")).unwrap();
        let hidden = vec![base.join("a/secret")];
        let c = Complement::build(&base, hidden);
        assert_eq!(granted(&c, &base), ["a/file", "a/open", "b"]);
    }

    fn granted(c: &Complement, base: &Path) -> Vec<String> {
        let mut names: Vec<String> = c
            .rules
            .iter()
            .map(|(fd, _)| std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap())
            .map(|p| p.strip_prefix(base).unwrap().display().to_string())
            .collect();
        names.sort();
        names
    }

    /// Kept grants stay exact: any entry made, removed or renamed in a
    /// listed directory, or another hidden list, makes them stale; a listing
    /// taken in the same clock tick as a change is never kept.
    #[test]
    fn kept_complement_goes_stale_on_any_change() {
        let root = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        for d in ["a/secret", "a/open", "b"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        let hidden = vec![base.join("a/secret")];
        // A listing right after a change is racy: not trusted.
        let racy = Complement::build(&base, hidden.clone());
        let settled = || {
            // Let the coarse clock move past the folders' ctimes.
            std::thread::sleep(std::time::Duration::from_millis(30));
            Complement::build(&base, hidden.clone())
        };
        let tick = stamp::coarse_now();
        if !Stamp::at(&base.join("a")).unwrap().settled_before(tick) {
            assert!(!racy.still_exact(&hidden));
        }
        let c = settled();
        assert!(c.still_exact(&hidden));
        assert!(!c.still_exact(&[base.join("b")]));

        std::fs::write(base.join("a/new"), "x").unwrap();
        assert!(!c.still_exact(&hidden));
        let c = settled();
        assert_eq!(granted(&c, &base), ["a/new", "a/open", "b"]);
        assert!(c.still_exact(&hidden));

        std::fs::rename(base.join("b"), base.join("c")).unwrap();
        assert!(!c.still_exact(&hidden));
        let c = settled();
        assert_eq!(granted(&c, &base), ["a/new", "a/open", "c"]);

        std::fs::remove_file(base.join("a/new")).unwrap();
        assert!(!c.still_exact(&hidden));
        // Changes inside a granted folder do not matter: its grant covers
        // whatever it holds.
        let c = settled();
        std::fs::write(base.join("a/open/inner"), "x").unwrap();
        assert!(c.still_exact(&hidden));
    }

    /// Offline for a user who may create no namespace: Landlock refuses TCP
    /// connect (and bind), UDP stays open, as the receipt's "+no-tcp" says.
    /// The same script without the ruleset connects, so the test can fail.
    #[test]
    fn no_tcp_refuses_tcp_connect_but_not_udp() {
        use std::os::unix::process::CommandExt;
        if landlock_abi() < 4 {
            eprintln!(
                "Landlock ABI {} has no network rights: nothing to test",
                landlock_abi()
            );
            return;
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = format!(
            "import socket\n\
             try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5); print('tcp:open')\n\
             except PermissionError:\n    print('tcp:refused')\n\
             u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             u.sendto(b'x', ('127.0.0.1', {port})); print('udp:open')\n"
        );
        let run = |plan: Option<ChildPlan>| {
            let mut cmd = std::process::Command::new("python3");
            cmd.arg("-c").arg(&script);
            if let Some(plan) = plan {
                // SAFETY: enforce only makes raw system calls.
                unsafe { cmd.pre_exec(move || enforce(&plan)) };
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(run(None), "tcp:open\nudp:open\n");

        let folder = tempfile::tempdir().unwrap();
        let policy = FsPolicy {
            choice: SandboxChoice::Off,
            network: NetworkChoice::Off,
            hidden: Vec::new(),
        };
        let plan = Sandbox {
            landlock: None,
            offline: Offline::NoTcp,
        };
        let ruleset = build(&policy, folder.path(), plan).unwrap().unwrap();
        let child = ChildPlan {
            ruleset: ruleset.as_raw_fd(),
            offline: Offline::NoTcp,
            uid_map: [0; 24],
            gid_map: [0; 24],
        };
        assert_eq!(run(Some(child)), "tcp:refused\nudp:open\n");
        assert_eq!(plan.to_string(), "none+no-tcp");
    }
}
