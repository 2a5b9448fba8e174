//! Knowing a live file is unchanged without reading it again.
//!
//! RECEIPT-32 asks, after the check ran, whether the live artifacts still
//! hash to the candidate revision. Re-reading them costs a full hash pass
//! (100 ms for 200 MB here). A file's identity and times prove it unchanged
//! where the kernel updates ctime on every change: every write, truncate,
//! rename over it, and — on the file systems listed below — the first write
//! through a shared mapping. ctime cannot be set from user space. Two cases
//! still need the hash, and get it:
//!
//! - a file system not listed (tmpfs leaves the times alone when a shared
//!   mapping is written);
//! - a file whose ctime is not older than the coarse clock read before the
//!   `fstat`: a later change within the same clock tick could keep the same
//!   ctime ("racily clean", as git calls it).
//!
//! This shortcut serves only that post-run comparison. The receipt gate
//! (RECEIPT-39..44) always hashes the live files before it accepts a
//! receipt, so a change this could miss (a mapping already dirty before the
//! copy, written again without a fault) still cannot pass the gate.

use std::fs::File;

use rustix::fs::{Stat, fstatfs};

/// File systems that update ctime on every change, shared mappings included.
const EXT4_MAGIC: i64 = 0xEF53;
const XFS_MAGIC: i64 = 0x5846_5342;
const BTRFS_MAGIC: i64 = 0x9123_683E;

/// What identifies a file's content without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// The coarse real-time clock, the one the kernel stamps file times with.
pub fn coarse_now() -> (i64, i64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if rc != 0 {
        // No clock: every ctime then counts as racy, so everything is hashed.
        return (i64::MIN, 0);
    }
    (ts.tv_sec, ts.tv_nsec)
}

#[allow(clippy::unnecessary_cast)]
fn of_stat(st: &rustix::fs::Stat) -> Stamp {
    Stamp {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        size: st.st_size as i64,
        mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
    }
}

impl Stamp {
    /// The stamp of `file`, whose `fstat` is `st`, or `None` where it would
    /// not prove anything. `tick` is [`coarse_now`] read before that `fstat`.
    #[allow(clippy::unnecessary_cast)]
    pub fn of(file: &File, st: &Stat, tick: (i64, i64)) -> Option<Stamp> {
        let fs = fstatfs(file).ok()?;
        if !matches!(fs.f_type as i64, EXT4_MAGIC | XFS_MAGIC | BTRFS_MAGIC) {
            return None;
        }
        let stamp = of_stat(st);
        stamp.settled_before(tick).then_some(stamp)
    }

    /// The stamp of whatever is at `path` (not following a final symlink),
    /// on any file system. For a directory it stands for its list of
    /// entries: creating, removing or renaming one updates its mtime and
    /// ctime everywhere.
    pub fn at(path: &std::path::Path) -> Option<Stamp> {
        let st = rustix::fs::statat(rustix::fs::CWD, path, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .ok()?;
        Some(of_stat(&st))
    }

    /// Whether the last change was before the coarse clock `tick` (read
    /// before the stat): only then can a later change not keep the times.
    pub fn settled_before(&self, tick: (i64, i64)) -> bool {
        self.ctime < tick
    }

    /// Whether a file whose `fstat` is `st` still carries this stamp.
    pub fn matches(&self, st: &Stat) -> bool {
        of_stat(st) == *self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::fstat;
    use std::io::Write;

    /// Only meaningful where the test folder is on a listed file system;
    /// elsewhere it checks that no stamp is given.
    #[test]
    fn a_change_breaks_the_stamp_and_a_fresh_file_gets_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"one").unwrap();
        let f = File::open(&path).unwrap();
        // A ctime not older than the tick read before the stat is racy.
        let ctime = of_stat(&fstat(&f).unwrap()).ctime;
        assert_eq!(Stamp::of(&f, &fstat(&f).unwrap(), ctime), None);
        let tick = loop {
            let t = coarse_now();
            let ctime = of_stat(&fstat(&f).unwrap()).ctime;
            if ctime < t {
                break t;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        let Some(stamp) = Stamp::of(&f, &fstat(&f).unwrap(), tick) else {
            let fs = fstatfs(&f).unwrap();
            eprintln!("file system {:#x} is not listed", fs.f_type);
            return;
        };
        assert!(stamp.matches(&fstat(&f).unwrap()));
        // Same size, same content length: only the times can tell.
        let mut w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        w.write_all(b"two").unwrap();
        assert!(!stamp.matches(&fstat(&f).unwrap()));
    }
}
