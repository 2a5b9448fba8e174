//! Change events for an SQLite database written by any process. A service
//! broadcasts its own writes directly; a write by another process on the same
//! data root (the CLI running a check while `slm serve` waits, say) shows up
//! only in the files, so this watches the database's directory with inotify
//! and ticks whenever the database or its WAL is written. Consumers then read
//! what is new. No polling.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

/// Starts watching `db_file`; the receiver's value increases on every write.
/// Must be called inside a tokio runtime. Returns None when inotify is not
/// available (callers then rely on their own writes and a fallback poll).
pub fn watch_sqlite(db_file: &Path) -> Option<watch::Receiver<u64>> {
    let dir = db_file.parent()?.to_path_buf();
    let name = db_file.file_name()?.to_os_string();
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
    inotify::add_watch(
        &fd,
        &dir,
        WatchFlags::MODIFY | WatchFlags::CLOSE_WRITE | WatchFlags::MOVED_TO,
    )
    .ok()?;
    // SAFETY: `fd` is an owned inotify descriptor that lives exactly as long
    // as the AsyncFd holding it.
    let async_fd =
        unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()?;
    let (tx, rx) = watch::channel(0u64);
    tokio::spawn(pump(async_fd, name, tx));
    Some(rx)
}

/// Where a database announces its writes.
#[derive(Debug, Clone)]
pub enum ChangeSource {
    /// An SQLite file: inotify on it and its WAL.
    SqliteFile(PathBuf),
    /// PostgreSQL: `LISTEN` on a channel its insert triggers `NOTIFY`.
    Postgres { url: String, channel: &'static str },
}

/// Ticks on every write the source announces. Must be called inside a
/// tokio runtime; None when the source cannot be watched.
pub async fn watch(source: &ChangeSource) -> Option<watch::Receiver<u64>> {
    match source {
        ChangeSource::SqliteFile(file) => watch_sqlite(file),
        ChangeSource::Postgres { url, channel } => watch_postgres(url, channel).await,
    }
}

/// LISTEN on `channel`. The listener reconnects by itself when the server
/// restarts; a tick is sent after a reconnect too, so consumers re-read.
async fn watch_postgres(url: &str, channel: &str) -> Option<watch::Receiver<u64>> {
    let mut listener = sqlx::postgres::PgListener::connect(url).await.ok()?;
    listener.listen(channel).await.ok()?;
    let (tx, rx) = watch::channel(0u64);
    tokio::spawn(async move {
        loop {
            // `try_recv` yields None after the connection was lost and
            // re-established: notifications may have been missed.
            match listener.try_recv().await {
                Ok(_) => tx.send_modify(|n| *n += 1),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    Some(rx)
}

fn is_ours(event_name: &[u8], db: &[u8]) -> bool {
    event_name == db || (event_name.starts_with(db) && &event_name[db.len()..] == b"-wal")
}

async fn pump(fd: AsyncFd<OwnedFd>, db: OsString, tx: watch::Sender<u64>) {
    use std::os::unix::ffi::OsStrExt;
    let db = db.as_bytes().to_vec();
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 8192];
    loop {
        let Ok(mut guard) = fd.readable().await else {
            return;
        };
        let mut hit = false;
        let mut reader = inotify::Reader::new(fd.get_ref(), &mut buf);
        loop {
            match reader.next() {
                Ok(ev) => {
                    if ev.file_name().is_some_and(|n| is_ours(n.to_bytes(), &db)) {
                        hit = true;
                    }
                }
                Err(rustix::io::Errno::AGAIN) => {
                    guard.clear_ready();
                    break;
                }
                Err(_) => return,
            }
        }
        if hit {
            tx.send_modify(|n| *n += 1);
            if tx.is_closed() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_by_anyone_tick_the_feed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("memory.db");
        let mut rx = watch_sqlite(&db).expect("inotify works here");
        std::fs::write(dir.path().join("other.db-wal"), b"x").unwrap();
        std::fs::write(dir.path().join("memory.db-wal"), b"x").unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), rx.changed())
            .await
            .expect("a tick arrives")
            .unwrap();
        assert!(*rx.borrow() >= 1);
        assert!(is_ours(b"memory.db", b"memory.db"));
        assert!(is_ours(b"memory.db-wal", b"memory.db"));
        assert!(!is_ours(b"memory.db-shm", b"memory.db"));
        assert!(!is_ours(b"receipt.db-wal", b"memory.db"));
    }
}
