//! The check's filesystem sandbox (SPEC GAP-04), with Landlock.
//!
//! A check runs as the operator's user. Without a sandbox it can read the
//! admission key and the databases in the data root (and forge receipts with
//! the key), read undeclared files of the live project (a verdict the receipt
//! does not cover), and write anywhere the user can. Under the sandbox:
//!
//! * it writes only inside its run folder (and to `/dev/null` and friends);
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
//! The ruleset is built in the parent (it allocates); the child only calls
//! `prctl` and `landlock_restrict_self` on the prepared descriptor, which is
//! async-signal-safe (see [`enforce`]).

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use landlock::{
    ABI, Access, AccessFs, BitFlags, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};

/// Environment variable selecting the sandbox (`auto`, `landlock`, `off`).
pub const SANDBOX_ENV: &str = "SLM_CHECK_SANDBOX";
/// Reason when `landlock` was required and this kernel cannot provide it.
pub const REASON_SANDBOX_UNAVAILABLE: &str =
    "Independent check not started: the Landlock sandbox is unavailable on this host";

/// The Landlock ABI whose rights are asked for; older kernels get what they
/// support (best effort). Not newer on purpose: later ABIs restrict
/// connecting to Unix sockets by path, which would cut checks off from local
/// test databases and is a network question (GAP-05), not a file one.
const NEWEST: ABI = ABI::V6;

/// Device files a check may write: output sinks every shell script uses.
const WRITABLE_DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/random",
    "/dev/urandom",
];

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
        match std::env::var(SANDBOX_ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse().unwrap_or_else(|err| {
                tracing::warn!(%err, "{SANDBOX_ENV}: requiring the Landlock sandbox");
                SandboxChoice::Landlock
            }),
            _ => SandboxChoice::Auto,
        }
    }
}

/// What the check may touch.
#[derive(Debug, Clone, Default)]
pub struct FsPolicy {
    pub choice: SandboxChoice,
    /// Trees the check may neither read nor write: the data root (key,
    /// databases) and the live project. Absolute paths.
    pub hidden: Vec<PathBuf>,
}

/// The sandbox a run really had, as the receipt records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sandbox {
    Landlock(i32),
    None,
}

impl fmt::Display for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sandbox::Landlock(v) => write!(f, "landlock-v{v}"),
            Sandbox::None => f.write_str("none"),
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

/// What the sandbox of a run will be under `choice` on this host.
pub fn planned(choice: SandboxChoice) -> Sandbox {
    match (choice, landlock_abi()) {
        (SandboxChoice::Off, _) | (_, 0) => Sandbox::None,
        (_, v) => Sandbox::Landlock(v),
    }
}

/// A ruleset ready for the child to enforce.
pub(crate) struct Prepared {
    fd: Option<OwnedFd>,
    pub sandbox: Sandbox,
}

impl Prepared {
    /// The descriptor the child passes to [`enforce`] (−1: nothing to do).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }
}

/// Why no run may start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SandboxError {
    #[error("{REASON_SANDBOX_UNAVAILABLE}")]
    Unavailable,
    #[error("cannot build the check sandbox: {0}")]
    Build(String),
}

/// Builds the ruleset for a check whose run folder is `writable`.
pub(crate) fn prepare(policy: &FsPolicy, writable: &Path) -> Result<Prepared, SandboxError> {
    let none = Prepared {
        fd: None,
        sandbox: Sandbox::None,
    };
    match planned(policy.choice) {
        Sandbox::None if policy.choice == SandboxChoice::Landlock => Err(SandboxError::Unavailable),
        Sandbox::None => Ok(none),
        Sandbox::Landlock(v) => {
            let fd = build(policy, writable).map_err(|e| SandboxError::Build(e.to_string()))?;
            match fd {
                Some(fd) => Ok(Prepared {
                    fd: Some(fd),
                    sandbox: Sandbox::Landlock(v),
                }),
                None if policy.choice == SandboxChoice::Landlock => Err(SandboxError::Unavailable),
                None => Ok(none),
            }
        }
    }
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

fn build(policy: &FsPolicy, writable: &Path) -> LandlockResult<Option<OwnedFd>> {
    let hidden: Vec<PathBuf> = policy
        .hidden
        .iter()
        .map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.clone()))
        // Hiding "/" would leave nothing to run; refusing it is the caller's job.
        .filter(|h| h.parent().is_some())
        .collect();
    let mut rules: Vec<(OwnedFd, BitFlags<AccessFs>)> = Vec::new();
    grant_complement(Path::new("/"), &hidden, &mut rules)?;
    let run = open_path(writable)?.ok_or("the run folder is not a directory")?;
    rules.push((run.0, handled()));
    for dev in WRITABLE_DEVICES {
        if let Ok(Some((fd, false))) = open_path(Path::new(dev)) {
            let rw = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
            rules.push((fd, rw & handled()));
        }
    }
    let mut ruleset = Ruleset::default()
        .handle_access(handled())?
        .scope(Scope::Signal)?
        .create()?;
    for (fd, access) in rules {
        ruleset = ruleset.add_rule(PathBeneath::new(fd, access))?;
    }
    Ok(ruleset.into())
}

/// Grants read access to everything under `dir` except the `hidden` trees.
fn grant_complement(
    dir: &Path,
    hidden: &[PathBuf],
    rules: &mut Vec<(OwnedFd, BitFlags<AccessFs>)>,
) -> io::Result<()> {
    if !hidden.iter().any(|h| h.starts_with(dir) && h != dir) {
        if let Some((fd, is_dir)) = open_path(dir)? {
            rules.push((fd, read_rights(is_dir)));
        }
        return Ok(());
    }
    // A directory we may not list leaves its other entries unreadable:
    // less access, never more.
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry?.path();
        if hidden.contains(&path) {
            continue;
        }
        // Symbolic links are skipped: what they point to is granted (or
        // not) under its own real path.
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => continue,
            Ok(m) if m.is_dir() => grant_complement(&path, hidden, rules)?,
            Ok(_) => {
                if let Some((fd, is_dir)) = open_path(&path)? {
                    rules.push((fd, read_rights(is_dir)));
                }
            }
            Err(_) => continue,
        }
    }
    Ok(())
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

/// The child's side, between fork/clone and exec: `no_new_privs`, then the
/// ruleset. Only raw system calls on a descriptor opened before the fork.
///
/// # Safety
/// Async-signal-safe; meant for a freshly forked child. `fd` is −1 (nothing
/// to do) or a Landlock ruleset descriptor.
pub(crate) unsafe fn enforce(fd: RawFd) -> io::Result<()> {
    if fd < 0 {
        return Ok(());
    }
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
            return Err(io::Error::last_os_error());
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
        assert_eq!(planned(SandboxChoice::Off), Sandbox::None);
        assert_eq!(Sandbox::Landlock(7).to_string(), "landlock-v7");
        assert_eq!(Sandbox::None.to_string(), "none");
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
        let mut rules = Vec::new();
        grant_complement(&base, &hidden, &mut rules).unwrap();
        let granted: Vec<PathBuf> = rules
            .iter()
            .map(|(fd, _)| std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap())
            .collect();
        let mut names: Vec<String> = granted
            .iter()
            .map(|p| p.strip_prefix(&base).unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["a/file", "a/open", "b"]);
    }
}
