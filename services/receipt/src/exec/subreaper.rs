//! Subreaper containment: the fallback when no writable cgroup v2 exists.
//!
//! This process becomes a *child subreaper* (`PR_SET_CHILD_SUBREAPER`, set
//! once, process-wide), so every process orphaned inside the check's process
//! tree is reparented to us instead of to init. The check starts in its own
//! session (`setsid`: sid = pgid = main pid).
//!
//! Tracking never lists the process table. While the main process runs, every
//! [`super::TICK`] we walk `/proc/<pid>/task/<tid>/children` from the main pid
//! down and accumulate `(pid, start time)` pairs (start time = `/proc/<pid>/stat`
//! field 22, so a recycled pid is never confused with a tracked one). After the
//! main process has exited *and been reaped* (by then the kernel has already
//! reparented all of its children to us), the roots of whatever the check left
//! behind are among *our own* children, read from `/proc/self/task/*/children`.
//! A child of ours is the check's when it was not our child before the launch
//! (compared by `(pid, start)`), is not the main process, and any of these
//! holds:
//!
//! * it was seen in the check's tree while the main process ran (tracked);
//! * its session id is the check's (the main pid);
//! * it started at or after the main process (cumulative attribution as in
//!   RECEIPT-29: the only way a process that started during the run becomes
//!   our child is by being reparented to us out of the check's tree, or by
//!   being spawned by some other part of this process).
//!
//! Every descendant of an attributed process is attributed too (the parent
//! chain, as RECEIPT-29). Anything attributed and not yet exited is a survivor;
//! it is killed through a pidfd (`pidfd_open` + `pidfd_send_signal(SIGKILL)`
//! after re-checking its start time, so a recycled pid is never signalled),
//! together with `kill(-pgid, SIGKILL)`. Killing repeats until the walk finds
//! nothing alive (a process that forks while being killed hands its new child
//! to us), then the zombies that were reparented to us are reaped by pid.
//!
//! # Limits of this mode
//!
//! * **Double fork before the first poll.** A process can fork a grandchild and
//!   let the intermediate parent die faster than one poll interval, before it
//!   was ever observed; then neither of them is in the tracked set, and after a
//!   `setsid` and `env -i` neither sid nor environment tells us anything. What
//!   closes the hole is the subreaper bit: the grandchild is reparented to *us*
//!   (not to init), and the "started during the run" rule above attributes
//!   every new child of ours. That rule is only sound while nothing else in
//!   this process spawns children during a run, so subreaper runs are
//!   serialised process-wide (`super::RUN_LOCK`, exclusive), matching the
//!   product's one-check-at-a-time lock. A child spawned concurrently by some
//!   unrelated part of this process would be attributed to the check, counted
//!   as a survivor and killed.
//! * **Being a subreaper is process-wide and permanent.** Orphans of *any*
//!   child of this process (not only checks) are reparented to us from then
//!   on; those not attributed to a check are not reaped here.
//! * **Requires `CONFIG_PROC_CHILDREN`** (the `/proc/.../children` files; on
//!   in every mainstream kernel).
//! * A process started *for* the check by an unrelated service (a system
//!   daemon, `systemd-run`, a container engine) is not our descendant and is
//!   not seen, exactly as in the cgroup mode.
//! * If the run future is dropped mid-run, tracked processes are SIGKILLed
//!   best-effort, but their zombies are not reaped.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

use super::procfs::{self, ProcStat};

/// Bound for the kill-until-nothing-is-alive loop.
const SWEEP_BOUND: Duration = Duration::from_secs(2);

static SUBREAPER: OnceLock<bool> = OnceLock::new();

/// Makes this process a child subreaper (once). Returns whether it is one.
pub(crate) fn ensure() -> bool {
    *SUBREAPER.get_or_init(|| {
        let me = rustix::process::getpid();
        match rustix::process::set_child_subreaper(Some(me)) {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(%err, "PR_SET_CHILD_SUBREAPER failed: a check's orphans go to init");
                false
            }
        }
    })
}

/// Whether this process has been made a child subreaper.
pub(crate) fn is_active() -> bool {
    SUBREAPER.get() == Some(&true)
}

/// `waitpid(pid, WNOHANG)`: reaps `pid` if it is an exited child of ours.
pub(crate) fn reap_nohang(pid: i32) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = rustix::process::waitpid(Some(p), WaitOptions::NOHANG);
    }
}

/// SIGKILLs `pid` only if it is still the process that started at `start`.
pub(crate) fn kill_verified(pid: i32, start: u64) {
    let Some(p) = Pid::from_raw(pid) else { return };
    match rustix::process::pidfd_open(p, PidfdFlags::empty()) {
        Ok(fd) => {
            // The pidfd pins the process; if the start time still matches, the
            // pidfd names the process we mean.
            if procfs::stat(pid).is_some_and(|s| s.start == start) {
                let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
            }
        }
        Err(rustix::io::Errno::NOSYS) => {
            // Kernel without pidfds (< 5.3): best effort.
            if procfs::stat(pid).is_some_and(|s| s.start == start) {
                let _ = rustix::process::kill_process(p, Signal::KILL);
            }
        }
        Err(_) => {}
    }
}

/// A process the check left running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Survivor {
    pub pid: i32,
    pub name: String,
}

/// Tracks one check's process tree.
#[derive(Debug)]
pub(crate) struct Tracker {
    /// Our children before the launch, by `(pid, start)`.
    before: HashSet<(i32, u64)>,
    /// The main process: pid (= sid = pgid) and start time.
    main: Option<(i32, u64)>,
    /// Every process seen in the check's tree: pid → start time.
    known: HashMap<i32, u64>,
    finished: bool,
}

impl Tracker {
    /// Snapshots our own children; call right before spawning.
    pub fn before_launch() -> Tracker {
        let before = procfs::children("self")
            .unwrap_or_default()
            .into_iter()
            .filter_map(procfs::stat)
            .map(|s| (s.pid, s.start))
            .collect();
        Tracker {
            before,
            main: None,
            known: HashMap::new(),
            finished: false,
        }
    }

    /// Records the main process (not yet reaped, so its stat is readable).
    pub fn launched(&mut self, pid: i32) {
        let start = procfs::stat(pid).map_or(0, |s| s.start);
        self.main = Some((pid, start));
    }

    fn main_pid(&self) -> i32 {
        self.main.map_or(0, |m| m.0)
    }

    fn main_start(&self) -> u64 {
        self.main.map_or(0, |m| m.1)
    }

    /// One poll while the main process runs: accumulate its descendants.
    pub fn scan(&mut self) {
        let Some((main, main_start)) = self.main else {
            return;
        };
        let mut seen = HashSet::new();
        let mut queue = vec![main];
        while let Some(pid) = queue.pop() {
            let Ok(kids) = procfs::children(&pid.to_string()) else {
                continue;
            };
            for kid in kids {
                if !seen.insert(kid) {
                    continue;
                }
                if let Some(st) = procfs::stat(kid) {
                    if st.start >= main_start {
                        self.known.insert(kid, st.start);
                    }
                    queue.push(kid);
                }
            }
        }
    }

    /// Whether a child of ours belongs to the check (see the module docs).
    fn owns_child(&self, st: &ProcStat) -> bool {
        if self.main.is_none()
            || st.pid == self.main_pid()
            || self.before.contains(&(st.pid, st.start))
        {
            return false;
        }
        self.known.get(&st.pid) == Some(&st.start)
            || st.session == self.main_pid()
            || st.start >= self.main_start()
    }

    /// Every process currently attributed to the check (zombies included).
    fn collect(&self) -> Vec<ProcStat> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut queue = Vec::new();
        for pid in procfs::children("self").unwrap_or_default() {
            if let Some(st) = procfs::stat(pid)
                && self.owns_child(&st)
                && seen.insert(pid)
            {
                out.push(st);
                queue.push(pid);
            }
        }
        // Tracked processes that are somehow not below one of our children
        // (e.g. under a subreaper of the check's own making).
        for (&pid, &start) in &self.known {
            if pid == self.main_pid() || seen.contains(&pid) {
                continue;
            }
            if let Some(st) = procfs::stat(pid)
                && st.start == start
            {
                seen.insert(pid);
                out.push(st);
                queue.push(pid);
            }
        }
        while let Some(pid) = queue.pop() {
            for kid in procfs::children(&pid.to_string()).unwrap_or_default() {
                if seen.insert(kid)
                    && let Some(st) = procfs::stat(kid)
                {
                    out.push(st);
                    queue.push(kid);
                }
            }
        }
        out
    }

    /// On timeout, before the main process is reaped: kill everything tracked.
    pub fn kill_tree(&mut self) {
        self.scan();
        for (&pid, &start) in &self.known {
            kill_verified(pid, start);
        }
        self.kill_group();
    }

    fn kill_group(&self) {
        if let Some(p) = Pid::from_raw(self.main_pid()) {
            let _ = rustix::process::kill_process_group(p, Signal::KILL);
        }
    }

    /// After the main process was reaped: finds what the check left running,
    /// kills it all (until nothing attributed is alive, bounded), and reaps the
    /// zombies reparented to us. Returns the first survivor (earliest started)
    /// when `record` is set.
    pub async fn sweep(&mut self, record: bool) -> Option<Survivor> {
        let deadline = Instant::now() + SWEEP_BOUND;
        let mut first = None;
        let mut pause = Duration::from_micros(200);
        loop {
            let alive: Vec<ProcStat> = self
                .collect()
                .into_iter()
                .filter(|s| !s.is_dead())
                .collect();
            if alive.is_empty() {
                break;
            }
            if record
                && first.is_none()
                && let Some(s) = alive.iter().min_by_key(|s| (s.start, s.pid))
            {
                first = Some(Survivor {
                    pid: s.pid,
                    name: procfs::comm(s.pid),
                });
            }
            for st in &alive {
                self.known.insert(st.pid, st.start);
                kill_verified(st.pid, st.start);
            }
            self.kill_group();
            if Instant::now() >= deadline {
                tracing::warn!(
                    pids = ?alive.iter().map(|s| s.pid).collect::<Vec<_>>(),
                    "check processes still alive after SIGKILL"
                );
                break;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(10));
        }
        self.reap();
        self.finished = true;
        first
    }

    /// Reaps exited children of ours that belonged to the check.
    fn reap(&self) {
        for pid in procfs::children("self").unwrap_or_default() {
            if let Some(st) = procfs::stat(pid)
                && st.is_dead()
                && self.owns_child(&st)
            {
                reap_nohang(pid);
            }
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if !self.finished && self.main.is_some() {
            // The run was abandoned (future dropped): best-effort kill.
            self.kill_tree();
            for st in self.collect() {
                if !st.is_dead() {
                    kill_verified(st.pid, st.start);
                }
            }
        }
    }
}
