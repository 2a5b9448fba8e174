//! Concurrent, capped draining of the check's stdout and stderr.
//!
//! Each pipe is read by its own task from launch on, so a chatty check never
//! blocks on a full pipe. At most [`MAX_CAPTURED_OUTPUT`] bytes of each stream
//! are kept: the *first* bytes, in order. Anything beyond is still read (so the
//! writer is not blocked) but discarded, and the kept prefix is what the caller
//! hashes. No marker is appended, so the hashes stay plain SHA-256 over the
//! returned bytes.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

/// Bytes kept per stream (64 MiB). Output past this is read and dropped.
pub const MAX_CAPTURED_OUTPUT: usize = 64 * 1024 * 1024;

/// A pipe being drained in the background.
pub(crate) struct Drain {
    buf: Arc<Mutex<Vec<u8>>>,
    task: Option<JoinHandle<()>>,
}

impl Drain {
    /// Starts draining `pipe` (a missing pipe yields empty output).
    pub fn start<R>(pipe: Option<R>) -> Drain
    where
        R: AsyncRead + Unpin + Send + 'static,
    {
        Self::start_capped(pipe, MAX_CAPTURED_OUTPUT)
    }

    fn start_capped<R>(pipe: Option<R>, cap: usize) -> Drain
    where
        R: AsyncRead + Unpin + Send + 'static,
    {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let task = pipe.map(|mut pipe| {
            let buf = Arc::clone(&buf);
            tokio::spawn(async move {
                let mut chunk = vec![0u8; 64 * 1024];
                loop {
                    match pipe.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut kept = buf.lock().unwrap_or_else(PoisonError::into_inner);
                            let room = cap.saturating_sub(kept.len());
                            kept.extend_from_slice(&chunk[..n.min(room)]);
                        }
                    }
                }
            })
        });
        Drain { buf, task }
    }

    /// Waits up to `grace` for end-of-file, then stops reading and returns what
    /// was collected. Stopping closes our read end.
    pub async fn finish(mut self, grace: Duration) -> Vec<u8> {
        if let Some(task) = self.task.as_mut()
            && tokio::time::timeout(grace, &mut *task).await.is_err()
        {
            task.abort();
            let _ = task.await;
        }
        self.task = None;
        std::mem::take(&mut *self.buf.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_prefix_up_to_cap() {
        let data: &'static [u8] = b"0123456789";
        let d = Drain::start_capped(Some(data), 4);
        assert_eq!(d.finish(Duration::from_secs(5)).await, b"0123");
        let d = Drain::start_capped(Some(data), 100);
        assert_eq!(d.finish(Duration::from_secs(5)).await, data);
        let d = Drain::start::<&'static [u8]>(None);
        assert!(d.finish(Duration::from_secs(5)).await.is_empty());
    }
}
