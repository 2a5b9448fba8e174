//! Small, allocation-light readers for the few `/proc` files containment needs.
//!
//! Nothing here lists `/proc` itself: every read is for a pid we already know
//! (the check's own descendants, or this process's own children).

use std::fs;
use std::io;

/// The parts of `/proc/<pid>/stat` that containment uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub pid: i32,
    /// Field 3: `R`, `S`, `D`, `Z`, `X`, ...
    pub state: u8,
    /// Field 4.
    pub ppid: i32,
    /// Field 5.
    pub pgrp: i32,
    /// Field 6.
    pub session: i32,
    /// Field 22: start time in clock ticks since boot. `(pid, start)` names a
    /// process without PID-reuse ambiguity.
    pub start: u64,
}

impl ProcStat {
    /// Zombie or dead: exited, only its process-table entry remains.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted from the *last* `)`.
pub(crate) fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    let close = text.rfind(')')?;
    let mut fields = text[close + 1..].split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    // Fields 7..=21 are skipped; field 22 is the start time.
    let start = fields.nth(15)?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        session,
        start,
    })
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone.
pub(crate) fn stat(pid: i32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// `/proc/<pid>/comm`, trimmed; `"?"` when it cannot be read.
pub(crate) fn comm(pid: i32) -> String {
    match fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(name) => {
            let name = name.trim();
            if name.is_empty() {
                "?".to_owned()
            } else {
                name.to_owned()
            }
        }
        Err(_) => "?".to_owned(),
    }
}

/// Parses a whitespace-separated list of pids (`children`, `cgroup.procs`).
pub(crate) fn parse_pids(text: &str, out: &mut Vec<i32>) {
    out.extend(
        text.split_ascii_whitespace()
            .filter_map(|s| s.parse::<i32>().ok())
            .filter(|&p| p > 0),
    );
}

/// The children of every thread of `pid` (`pid` may be `"self"`), from
/// `/proc/<pid>/task/<tid>/children`. A child belongs to the *thread* that
/// forked it (or, after reparenting, to whichever thread the kernel picked),
/// so all threads are read.
pub(crate) fn children(pid: &str) -> io::Result<Vec<i32>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(entry) = entry else { continue };
        let mut path = entry.path();
        path.push("children");
        if let Ok(text) = fs::read_to_string(&path) {
            parse_pids(&text, &mut out);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The unified-hierarchy (cgroup v2) path of `pid`, from the `0::<path>` line
/// of `/proc/<pid>/cgroup`. Works for zombies too (they keep their cgroup).
pub(crate) fn cgroup_v2_path(pid: &str) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|p| p.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        let text =
            "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let st = parse_stat(1234, text).unwrap();
        assert_eq!(st.state, b'S');
        assert_eq!(st.ppid, 1);
        assert_eq!(st.pgrp, 1234);
        assert_eq!(st.session, 1234);
        assert_eq!(st.start, 987654);
        assert!(!st.is_dead());
    }

    #[test]
    fn reads_own_stat() {
        let me = std::process::id() as i32;
        let st = stat(me).unwrap();
        assert_eq!(st.pid, me);
        assert!(st.start > 0);
        assert!(!comm(me).is_empty());
    }
}
