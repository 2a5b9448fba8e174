//! Starting a check directly inside its cgroup: `clone3(CLONE_INTO_CGROUP)`.
//!
//! The portable way (fork, write our pid to `cgroup.procs` in a `pre_exec`
//! hook, exec) migrates the child between cgroups, and a migration waits for
//! an RCU grace period: after a burst of file work (copying a thousand
//! inputs) that was 16–18 ms of a 60 ms check run. A process born in its
//! cgroup is never migrated. Kernels before 5.7 (or a sandbox that refuses
//! `clone3`) make [`spawn_into`] fail with `ENOSYS`/`EPERM`/…; the caller then
//! uses the portable way.
//!
//! On x86-64 the child shares this address space until it execs
//! (`CLONE_VM | CLONE_VFORK`, what `posix_spawn` does): copying the page
//! tables of a server with dozens of threads, tearing the copy down again at
//! exec and the copy-on-write faults it leaves in the parent cost about a
//! fifth of a small check run. The calling thread waits in `clone3` until the
//! child has exec'd or exited; the child runs on a stack of its own. Other
//! architectures clone a copy of the address space.
//!
//! Between `clone3` and `execve` the child only makes async-signal-safe
//! system calls on memory prepared before the clone (no allocation): the
//! same rules as a `pre_exec` hook.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use super::sandbox::ChildPlan;

/// `struct clone_args` up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_PIDFD: u64 = 0x1000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// A check process started by [`spawn_into`]: its pidfd, and the read ends
/// of its stdout and stderr.
pub(crate) struct RawChild {
    pid: i32,
    pidfd: AsyncFd<OwnedFd>,
    reaped: bool,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

/// Why [`spawn_into`] failed: `Clone` means nothing was started (the caller
/// may fall back to forking), `Start` that the check itself could not start.
#[derive(Debug)]
pub(crate) enum SpawnError {
    Clone(io::Error),
    Start(io::Error),
}

impl From<io::Error> for SpawnError {
    fn from(e: io::Error) -> Self {
        SpawnError::Start(e)
    }
}

impl From<rustix::io::Errno> for SpawnError {
    fn from(e: rustix::io::Errno) -> Self {
        SpawnError::Start(e.into())
    }
}

fn cstring(s: impl Into<Vec<u8>>) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Starts `program` (argv, exact environment, working directory) as a new
/// session leader inside the cgroup whose directory `cgroup` is open, with
/// stdin from `/dev/null` and stdout/stderr piped.
pub(crate) fn spawn_into(
    cgroup: RawFd,
    program: &CStr,
    argv: &[String],
    env: &[(String, String)],
    cwd: &CStr,
    plan: &ChildPlan,
) -> Result<RawChild, SpawnError> {
    let argv: Vec<CString> = argv
        .iter()
        .map(|a| cstring(a.as_bytes()))
        .collect::<io::Result<_>>()?;
    let envp: Vec<CString> = env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}")))
        .collect::<io::Result<_>>()?;
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());

    let devnull = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let (out_r, out_w) = pipe_pair()?;
    let (err_r, err_w) = pipe_pair()?;
    // The child reports a failed exec through this pipe; a successful exec
    // closes it (CLOEXEC) and the parent reads end-of-file.
    let (status_r, status_w) = pipe_pair()?;

    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: CLONE_PIDFD | CLONE_INTO_CGROUP,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup as u64,
        ..CloneArgs::default()
    };
    let fds = [
        (devnull.as_raw_fd(), 0),
        (out_w.as_raw_fd(), 1),
        (err_w.as_raw_fd(), 2),
    ];
    let child = ChildSetup {
        fds,
        cwd,
        program,
        argv: &argv_ptrs,
        envp: &envp_ptrs,
        status_fd: status_w.as_raw_fd(),
        plan,
    };
    let ret = if SHARES_MEMORY {
        let stack = ChildStack::new()?;
        args.flags |= CLONE_VM | CLONE_VFORK;
        args.stack = stack.base as u64;
        args.stack_size = stack.len as u64;
        // A signal caught between the clone and the child's reset below
        // would run this process's handler in the child; block them all
        // here, the child unblocks them once its handlers are the defaults.
        let _blocked = BlockedSignals::all();
        // SAFETY: the child runs `child_entry` on its own stack, and only
        // reads `child` (alive: this thread is suspended until it execs).
        unsafe { clone3_shared(&args, &child) }
    } else {
        // SAFETY: a plain clone3 without CLONE_VM: the child gets a copy of
        // this address space and, below, only makes async-signal-safe calls
        // on data prepared above before it execs or exits.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &args as *const CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        };
        if ret == 0 {
            // SAFETY: the child side, see the module comment.
            unsafe { child_exec(&child) }
        }
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(ret)
        }
    };
    let ret = ret.map_err(SpawnError::Clone)?;
    let pid = ret as i32;
    // SAFETY: the kernel handed us this new descriptor (CLONE_PIDFD).
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop((devnull, out_w, err_w, status_w));

    // SAFETY: an OwnedFd always answers the same descriptor until dropped.
    let pidfd = match unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) } {
        Ok(fd) => fd,
        Err(e) => {
            let (fd, cause) = e.into_parts();
            let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            return Err(SpawnError::Start(cause));
        }
    };
    // From here on the child is owned: dropping it kills it.
    let mut child = RawChild {
        pid,
        pidfd,
        reaped: false,
        stdout: None,
        stderr: None,
    };
    child.stdout = Some(pipe::Receiver::from_owned_fd(out_r)?);
    child.stderr = Some(pipe::Receiver::from_owned_fd(err_r)?);
    let mut errno = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match rustix::io::read(&status_r, &mut errno[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(SpawnError::Start(e.into())),
        }
    }
    if got == 4 {
        // The exec failed: reap the child, report why.
        child.start_kill();
        let _ = child.reap_blocking();
        return Err(SpawnError::Start(io::Error::from_raw_os_error(
            i32::from_ne_bytes(errno),
        )));
    }
    Ok(child)
}

/// What the child needs between clone3 and exec, prepared before the clone.
struct ChildSetup<'a> {
    fds: [(RawFd, RawFd); 3],
    cwd: &'a CStr,
    program: &'a CStr,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    status_fd: RawFd,
    plan: &'a ChildPlan,
}

/// The kernel's `struct sigaction`; all zeroes is `SIG_DFL`, no flags.
#[repr(C)]
#[derive(Default)]
struct KernelSigaction {
    handler: usize,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// The child between clone3 and exec. Never returns.
unsafe fn child_exec(c: &ChildSetup<'_>) -> ! {
    unsafe {
        let fail = || -> ! {
            let errno = *libc::__errno_location();
            let bytes = errno.to_ne_bytes();
            libc::write(c.status_fd, bytes.as_ptr().cast(), 4);
            libc::_exit(127)
        };
        // What a fresh process expects: every signal at its default before
        // anything is unblocked (a handler of this process must never run in
        // the child, and an ignored signal survives exec: Rust ignores
        // SIGPIPE, a `posix_spawn`ed server inherits glibc's SIG_IGN for its
        // internal signals), then no blocked signals. The raw call, because
        // glibc refuses to touch its internal signals.
        let default = KernelSigaction::default();
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &default as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8usize,
                );
            }
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        if libc::setsid() < 0 {
            fail();
        }
        for &(from, to) in &c.fds {
            if from == to {
                // dup2 onto itself keeps CLOEXEC: clear it instead.
                if libc::fcntl(to, libc::F_SETFD, 0) < 0 {
                    fail();
                }
            } else if libc::dup2(from, to) < 0 {
                fail();
            }
        }
        if libc::chdir(c.cwd.as_ptr()) < 0 {
            fail();
        }
        if super::sandbox::enforce(c.plan).is_err() {
            fail();
        }
        libc::execve(c.program.as_ptr(), c.argv.as_ptr(), c.envp.as_ptr());
        fail()
    }
}

/// Whether this architecture has [`clone3_shared`].
const SHARES_MEMORY: bool = cfg!(target_arch = "x86_64");
const CLONE_VM: u64 = libc::CLONE_VM as u64;
const CLONE_VFORK: u64 = libc::CLONE_VFORK as u64;

/// The entry point of a child that shares our memory, on its own stack.
extern "C" fn child_entry(setup: *const ChildSetup<'_>) -> ! {
    // SAFETY: `clone3_shared` passes the setup its caller keeps alive.
    unsafe { child_exec(&*setup) }
}

/// `clone3` with `CLONE_VM`: the child starts on `args.stack`, where no
/// frame of this function exists, so it must not return through Rust code;
/// it calls [`child_entry`] instead, which never returns. In the parent it
/// returns the child's pid.
///
/// # Safety
/// `args` must carry a valid stack and `CLONE_VFORK`, and `setup` must stay
/// valid until the child has exec'd or exited.
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_shared(args: &CloneArgs, setup: &ChildSetup<'_>) -> io::Result<libc::c_long> {
    let ret: libc::c_long;
    // SAFETY: see above; the kernel keeps every register but rax, rcx and
    // r11 across `syscall`, and the child starts with the new (16-byte
    // aligned) stack pointer, so `call` gives the ABI's entry alignment.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") setup as *const ChildSetup<'_>,
            in("r13") child_entry as extern "C" fn(*const ChildSetup<'_>) -> !,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    if ret < 0 {
        // The raw syscall returns -errno.
        return Err(io::Error::from_raw_os_error(-ret as i32));
    }
    Ok(ret)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn clone3_shared(_: &CloneArgs, _: &ChildSetup<'_>) -> io::Result<libc::c_long> {
    unreachable!("SHARES_MEMORY is false on this architecture")
}

/// The stack of a child sharing our memory: mapped, with a guard page below
/// it so that an overflow faults instead of writing into our heap.
struct ChildStack {
    map: *mut libc::c_void,
    base: *mut u8,
    len: usize,
}

impl ChildStack {
    const GUARD: usize = 4096;
    /// Far more than the child's few calls need.
    const LEN: usize = 128 * 1024;

    fn new() -> io::Result<ChildStack> {
        // SAFETY: a fresh anonymous mapping, owned by the returned value.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                Self::GUARD + Self::LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if map == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let stack = ChildStack {
                map,
                base: map.cast::<u8>().add(Self::GUARD),
                len: Self::LEN,
            };
            if libc::mprotect(map, Self::GUARD, libc::PROT_NONE) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(stack)
        }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the child no longer runs on it
        // (it exec'd or exited before clone3 returned: CLONE_VFORK).
        unsafe { libc::munmap(self.map, Self::GUARD + self.len) };
    }
}

/// Every signal blocked in this thread until dropped.
struct BlockedSignals(libc::sigset_t);

impl BlockedSignals {
    fn all() -> BlockedSignals {
        // SAFETY: plain sigset manipulation on this thread's mask.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            BlockedSignals(old)
        }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restoring the mask saved in `all`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

impl RawChild {
    pub fn id(&self) -> i32 {
        self.pid
    }

    /// SIGKILL through the pidfd (never a recycled pid).
    pub fn start_kill(&self) {
        let _ =
            rustix::process::pidfd_send_signal(self.pidfd.get_ref(), rustix::process::Signal::KILL);
    }

    /// Waits until the process exits and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_reap()? {
                return Ok(status);
            }
            let mut ready = self.pidfd.readable().await?;
            ready.clear_ready();
        }
    }

    fn try_reap(&mut self) -> io::Result<Option<ExitStatus>> {
        self.reap(libc::WNOHANG)
    }

    fn reap_blocking(&mut self) -> io::Result<Option<ExitStatus>> {
        self.reap(0)
    }

    fn reap(&mut self, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
        let mut status = 0;
        loop {
            // SAFETY: waitpid on our own child with a valid out pointer.
            let r = unsafe { libc::waitpid(self.pid, &mut status, flags) };
            if r == self.pid {
                self.reaped = true;
                return Ok(Some(ExitStatus::from_raw(status)));
            }
            if r == 0 {
                return Ok(None);
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(err);
            }
        }
    }
}

impl Drop for RawChild {
    fn drop(&mut self) {
        // Like tokio's kill_on_drop: never leave the check running unowned.
        if !self.reaped {
            self.start_kill();
            let _ = self.try_reap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// What one spawned check did: its exit code and stdout, and the leaf
    /// name of the cgroup it ran in.
    struct Ran {
        code: Option<i32>,
        out: String,
        leaf: String,
    }

    /// Spawns `argv` (program `program`) in a fresh check cgroup with a
    /// fresh working folder, `env` and `plan`, and waits for it; `None` when
    /// this host has no writable cgroup v2.
    async fn spawn_and_wait(
        program: &CStr,
        argv: &[&str],
        env: &[(String, String)],
        plan: &ChildPlan,
        cwd: &std::path::Path,
    ) -> Option<Result<Ran, SpawnError>> {
        let Some(base) = super::super::cgroup::base() else {
            eprintln!("no writable cgroup v2 here: nothing to test");
            return None;
        };
        let cg = base.create_check().unwrap();
        let dir = cg.open_dir().unwrap();
        let cwd_c = CString::new(cwd.to_str().unwrap()).unwrap();
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let ran = match spawn_into(dir.as_raw_fd(), program, &argv, env, &cwd_c, plan) {
            Ok(mut child) => {
                let mut out = String::new();
                let mut stdout = child.stdout.take().unwrap();
                stdout.read_to_string(&mut out).await.unwrap();
                let code = child.wait().await.unwrap().code();
                Ok(Ran {
                    code,
                    out,
                    leaf: cg.leaf_name(),
                })
            }
            Err(e) => Err(e),
        };
        cg.kill_and_remove().await;
        Some(ran)
    }

    /// The child is a member of the check cgroup from its first instruction
    /// (it reads its own /proc/self/cgroup), gets exactly the environment
    /// given, runs in the given folder, and its exit status comes back.
    #[tokio::test]
    async fn born_inside_the_cgroup() {
        let cwd = tempfile::tempdir().unwrap();
        let argv = [
            "sh",
            "-c",
            "cat /proc/self/cgroup; pwd; echo \"$ONLY\"; exit 7",
        ];
        let env = vec![("ONLY".to_string(), "this".to_string())];
        let nothing = ChildPlan::NOTHING;
        let Some(ran) = spawn_and_wait(c"/bin/sh", &argv, &env, &nothing, cwd.path()).await else {
            return;
        };
        let Ran { code, out, leaf } = ran.unwrap();
        assert_eq!(code, Some(7));
        let v2 = out.lines().find(|l| l.starts_with("0::")).unwrap();
        assert!(v2.ends_with(&leaf), "{out}");
        assert!(out.contains(cwd.path().file_name().unwrap().to_str().unwrap()));
        assert!(out.ends_with("this\n"), "{out}");

        // A program that cannot be executed is an error, not exit 127.
        let err = spawn_and_wait(c"/nonexistent/prog", &argv, &env, &nothing, cwd.path())
            .await
            .unwrap()
            .err()
            .unwrap();
        assert!(
            matches!(&err, SpawnError::Start(e) if e.raw_os_error() == Some(libc::ENOENT)),
            "{err:?}"
        );
    }

    /// The check starts like a fresh process even though this thread blocks
    /// signals and ignores SIGPIPE: nothing blocked, nothing ignored (the
    /// mask and ignored signals survive exec). Also true of the child that
    /// shares our memory until exec, which starts with every signal blocked.
    #[tokio::test]
    async fn starts_with_default_signals() {
        // SAFETY: this test thread's own mask and SIGPIPE disposition.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        };
        let cwd = tempfile::tempdir().unwrap();
        let argv = ["cat", "/proc/self/status"];
        let plan = ChildPlan::NOTHING;
        let Some(ran) = spawn_and_wait(c"/bin/cat", &argv, &[], &plan, cwd.path()).await else {
            return;
        };
        let Ran { code, out, .. } = ran.unwrap();
        assert_eq!(code, Some(0));
        let field = |name: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_else(|| panic!("no {name} in {out}"))
                .to_string()
        };
        assert_eq!(field("SigBlk:"), "0000000000000000", "{out}");
        assert_eq!(field("SigIgn:"), "0000000000000000", "{out}");
    }

    /// The offline plan of a user who is not root: the child enters a user
    /// namespace (allowed to a process sharing our memory: it is alone in
    /// its thread group) and gets its own network namespace, with only our
    /// ids mapped.
    #[tokio::test]
    async fn user_namespace_plan_starts() {
        let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap_or_default();
        if max.trim() == "0" || max.is_empty() {
            eprintln!("user namespaces are disabled here: nothing to test");
            return;
        }
        let cwd = tempfile::tempdir().unwrap();
        let argv = [
            "sh",
            "-c",
            "readlink /proc/self/ns/net; cat /proc/self/uid_map",
        ];
        let uid = rustix::process::geteuid().as_raw();
        let plan = ChildPlan::user_netns(uid, rustix::process::getegid().as_raw());
        let Some(ran) = spawn_and_wait(c"/bin/sh", &argv, &[], &plan, cwd.path()).await else {
            return;
        };
        let Ran { code, out, .. } = ran.unwrap();
        assert_eq!(code, Some(0), "{out}");
        let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
        let mut lines = out.lines();
        assert_ne!(lines.next(), Some(ours.to_str().unwrap()), "{out}");
        let map: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(map, [uid.to_string(), uid.to_string(), "1".into()], "{out}");
    }
}
