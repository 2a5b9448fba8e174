//! cgroup v2 containment: the check runs in a fresh child cgroup of ours.
//!
//! The launched child moves itself into `slm-check-<hex>` *before* `exec`
//! (in a `pre_exec` hook, together with `setsid()`), so every process the check
//! ever starts is born inside the cgroup, whatever it does to its session,
//! process group, parent or environment. Membership is kernel-maintained, so
//! after the main process has exited and been reaped, `cgroup.procs` is an
//! exact, race-free list of what the check left running (survivors). The
//! whole subtree is then killed atomically with `cgroup.kill` (fork-safe: the
//! kernel stops new forks in the cgroup during the kill), we wait for
//! `cgroup.events` to say `populated 0`, and remove the directory.
//!
//! Limits: a process the check asks *another* service to start (a system
//! daemon, a container engine, `systemd-run`) is not in the cgroup; that needs
//! a sandbox (SPEC GAP-04), not containment.

use std::ffi::CString;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::procfs;

/// Bound for waiting until a killed cgroup is empty.
const EMPTY_WAIT: Duration = Duration::from_secs(2);

/// Where check cgroups are created: the cgroup v2 directory of this process.
#[derive(Debug)]
pub(crate) struct CgroupBase {
    dir: PathBuf,
}

static BASE: OnceLock<Option<CgroupBase>> = OnceLock::new();

/// The cgroup v2 base, when cgroup containment works on this host. Probed
/// once (mount lookup, a `mkdir` + `rmdir` of a test cgroup) and cached.
pub(crate) fn base() -> Option<&'static CgroupBase> {
    BASE.get_or_init(|| match probe() {
        Ok(base) => {
            tracing::debug!(dir = %base.dir.display(), "cgroup v2 containment available");
            Some(base)
        }
        Err(err) => {
            tracing::info!(%err, "cgroup v2 containment unavailable");
            None
        }
    })
    .as_ref()
}

fn probe() -> io::Result<CgroupBase> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
    let own = fs::read_to_string("/proc/self/cgroup")?;
    let own = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim_end)
        .ok_or_else(|| other("no cgroup v2 entry in /proc/self/cgroup"))?;
    let dir = base_dir(&mountinfo, own).ok_or_else(|| other("no usable cgroup2 mount"))?;
    if !dir.join("cgroup.procs").exists() {
        return Err(other("own cgroup directory not visible"));
    }
    rustix::fs::access(
        dir.join("cgroup.procs").as_path(),
        rustix::fs::Access::WRITE_OK,
    )?;
    let base = CgroupBase { dir };
    let test = base.mkdir_unique("slm-probe-")?;
    let has_kill = test.join("cgroup.kill").exists();
    fs::remove_dir(&test)?;
    if !has_kill {
        return Err(other("cgroup.kill not supported (kernel < 5.14)"));
    }
    Ok(base)
}

fn other(msg: &str) -> io::Error {
    io::Error::other(msg.to_owned())
}

/// Finds the directory of cgroup `own` (a path from `/proc/self/cgroup`) from
/// the text of `/proc/self/mountinfo`.
pub(crate) fn base_dir(mountinfo: &str, own: &str) -> Option<PathBuf> {
    if !own.starts_with('/') || own.split('/').any(|c| c == "..") {
        return None;
    }
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        if post.split_ascii_whitespace().next() != Some("cgroup2") {
            continue;
        }
        let mut f = pre.split(' ');
        let (Some(root), Some(mount)) = (f.nth(3), f.next()) else {
            continue;
        };
        let (root, mount) = (unescape(root), unescape(mount));
        let rel = if root == "/" {
            own
        } else if let Some(rest) = own.strip_prefix(root.as_str()) {
            if !(rest.is_empty() || rest.starts_with('/')) {
                continue;
            }
            rest
        } else {
            continue;
        };
        let mut dir = PathBuf::from(mount);
        for comp in rel.split('/').filter(|c| !c.is_empty()) {
            dir.push(comp);
        }
        return Some(dir);
    }
    None
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl CgroupBase {
    fn mkdir_unique(&self, prefix: &str) -> io::Result<PathBuf> {
        let mut last = None;
        for _ in 0..8 {
            let path = self.dir.join(format!("{prefix}{}", super::random_hex()));
            match fs::create_dir(&path) {
                Ok(()) => return Ok(path),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| other("could not create a cgroup")))
    }

    /// Creates the fresh cgroup for one run.
    pub fn create_check(&self) -> io::Result<CheckCgroup> {
        let dir = self.mkdir_unique("slm-check-")?;
        let procs = dir.join("cgroup.procs");
        let procs_c = CString::new(procs.as_os_str().as_bytes()).map_err(io::Error::other);
        let procs_c = match procs_c {
            Ok(c) => c,
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                return Err(e);
            }
        };
        let rel = cgroup_rel_path();
        Ok(CheckCgroup {
            own_path: rel.map(|r| format!("{}/{}", r.trim_end_matches('/'), leaf(&dir))),
            dir,
            procs_c: Some(procs_c),
            removed: false,
        })
    }
}

fn leaf(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// This process's own cgroup v2 path (as `/proc/<pid>/cgroup` shows it).
fn cgroup_rel_path() -> Option<String> {
    procfs::cgroup_v2_path("self")
}

/// One run's cgroup. Dropping it without [`CheckCgroup::kill_and_remove`]
/// still kills its processes and removes it (in a helper thread).
#[derive(Debug)]
pub(crate) struct CheckCgroup {
    dir: PathBuf,
    /// The cgroup's path as `/proc/<pid>/cgroup` names it, for recognising
    /// zombies of ours that belonged to the check.
    own_path: Option<String>,
    procs_c: Option<CString>,
    removed: bool,
}

impl CheckCgroup {
    /// The `pre_exec` hook: runs in the forked child before `exec`. Joins the
    /// cgroup, then starts a new session. Async-signal-safe: the path was
    /// prepared before the fork; only raw syscalls, no allocation.
    pub fn pre_exec_hook(&mut self) -> impl FnMut() -> io::Result<()> + Send + Sync + 'static {
        let procs = self.procs_c.take().unwrap_or_default();
        move || {
            use rustix::fs::{Mode, OFlags};
            let fd = rustix::fs::open(
                procs.as_c_str(),
                OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let n = rustix::io::write(&fd, b"0")?;
            if n != 1 {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::IO.raw_os_error(),
                ));
            }
            drop(fd);
            rustix::process::setsid()?;
            Ok(())
        }
    }

    /// Pids currently in the cgroup (live processes only; zombies have left).
    /// The cgroup's directory name.
    #[cfg(test)]
    pub fn leaf_name(&self) -> String {
        leaf(&self.dir)
    }

    /// The cgroup directory, opened for `clone3(CLONE_INTO_CGROUP)`.
    pub fn open_dir(&self) -> io::Result<std::os::fd::OwnedFd> {
        use rustix::fs::{Mode, OFlags};
        Ok(rustix::fs::open(
            &self.dir,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    pub fn procs(&self) -> Vec<i32> {
        let mut out = Vec::new();
        if let Ok(text) = fs::read_to_string(self.dir.join("cgroup.procs")) {
            procfs::parse_pids(&text, &mut out);
        }
        out
    }

    fn populated(&self) -> bool {
        populated(&self.dir)
    }

    /// Kills everything in the cgroup (`cgroup.kill`) without waiting.
    pub fn kill(&self) {
        kill(&self.dir);
    }

    /// Kills everything, waits (bounded) until the cgroup is empty, reaps any
    /// of its processes that were reparented to us, and removes it.
    pub async fn kill_and_remove(mut self) {
        let deadline = Instant::now() + EMPTY_WAIT;
        let mut pause = Duration::from_micros(200);
        if self.populated() {
            self.kill();
            while self.populated() {
                if Instant::now() >= deadline {
                    tracing::warn!(cgroup = %self.dir.display(), "check cgroup still populated after cgroup.kill");
                    break;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(10));
            }
        }
        self.reap_our_zombies(deadline).await;
        loop {
            match fs::remove_dir(&self.dir) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) => {
                    if Instant::now() >= deadline {
                        tracing::warn!(cgroup = %self.dir.display(), %e, "could not remove check cgroup; leaving it to a helper thread");
                        // Drop hands it to the background cleaner.
                        return;
                    }
                    self.kill();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        self.removed = true;
    }

    /// When this process is a child subreaper (another run used the subreaper
    /// mode), orphans of the check were reparented to us, and once killed they
    /// are *our* zombies. Reap exactly those: children of ours whose cgroup is
    /// this check's cgroup. Never touches other children. A process leaves the
    /// cgroup (`populated 0`) slightly before it becomes a zombie, so the ones
    /// still finishing their exit are waited for (bounded).
    async fn reap_our_zombies(&self, deadline: Instant) {
        if !super::subreaper::is_active() {
            return;
        }
        let Some(own_path) = self.own_path.as_deref() else {
            return;
        };
        loop {
            let mut exiting = false;
            for pid in procfs::children("self").unwrap_or_default() {
                if procfs::cgroup_v2_path(&pid.to_string()).as_deref() != Some(own_path) {
                    continue;
                }
                match procfs::stat(pid) {
                    Some(st) if st.is_dead() => super::subreaper::reap_nohang(pid),
                    Some(_) => exiting = true,
                    None => {}
                }
            }
            if !exiting || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

fn kill(dir: &Path) {
    if let Ok(mut f) = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.kill"))
    {
        let _ = f.write_all(b"1");
    }
}

fn populated(dir: &Path) -> bool {
    let mut text = String::new();
    match fs::File::open(dir.join("cgroup.events")).and_then(|mut f| f.read_to_string(&mut text)) {
        Ok(_) => text.lines().any(|l| l.trim() == "populated 1"),
        Err(_) => false,
    }
}

impl Drop for CheckCgroup {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        kill(&self.dir);
        if fs::remove_dir(&self.dir).is_ok() {
            return;
        }
        let dir = self.dir.clone();
        let spawned = std::thread::Builder::new()
            .name("slm-cgroup-cleanup".into())
            .spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    kill(&dir);
                    match fs::remove_dir(&dir) {
                        Ok(()) => return,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                        Err(e) if Instant::now() >= deadline => {
                            tracing::warn!(cgroup = %dir.display(), %e, "leaked check cgroup");
                            return;
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(cgroup = %self.dir.display(), %e, "leaked check cgroup");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
        32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    #[test]
    fn finds_hybrid_mount() {
        assert_eq!(
            base_dir(HYBRID, "/").unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified")
        );
        assert_eq!(
            base_dir(HYBRID, "/a/b.service").unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified/a/b.service")
        );
        assert!(base_dir(HYBRID, "/../x").is_none());
    }

    #[test]
    fn handles_non_root_mount_and_escapes() {
        let mi = "41 31 0:38 /user.slice /sys/fs/my\\040cg rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            base_dir(mi, "/user.slice/x").unwrap(),
            PathBuf::from("/sys/fs/my cg/x")
        );
        assert!(base_dir(mi, "/user.slicex").is_none());
        assert!(base_dir("1 2 0:1 / /x rw - tmpfs t rw\n", "/").is_none());
    }
}
