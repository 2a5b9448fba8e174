//! A service's stream of new rows (memories, receipts) for event-driven
//! watchers: rows this process writes are published directly; rows another
//! process writes to the same database (SQLite file or PostgreSQL) are found
//! through the change feed and relayed, once each, in order.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::{OnceCell, broadcast};

use crate::change_feed::{ChangeSource, watch};

/// Rows relayed per change-feed tick.
const RELAY_BATCH: u32 = 1000;

#[derive(Clone)]
pub struct EventHub<T> {
    tx: broadcast::Sender<T>,
    /// Highest row sequence already broadcast.
    published: Arc<AtomicI64>,
    /// The relay starts with the first subscription.
    relay: Arc<OnceCell<()>>,
}

impl<T: Clone + Send + 'static> EventHub<T> {
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity);
        Self {
            tx,
            published: Arc::default(),
            relay: Arc::default(),
        }
    }

    /// A row this process stored.
    pub fn publish(&self, seq: i64, item: T) {
        self.published.fetch_max(seq, Ordering::SeqCst);
        // No subscriber is not an error.
        let _ = self.tx.send(item);
    }

    /// Subscribes; on the first call with a change source, also starts
    /// relaying rows other processes write. `max_seq` gives the current
    /// newest row; `rows_after(seq, limit)` reads newer rows with their
    /// sequence numbers.
    pub async fn subscribe<M, F, Fut>(
        &self,
        source: Option<ChangeSource>,
        max_seq: M,
        rows_after: F,
    ) -> broadcast::Receiver<T>
    where
        M: Future<Output = Option<i64>>,
        F: Fn(i64, u32) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<Vec<(i64, T)>>> + Send,
    {
        let rx = self.tx.subscribe();
        self.relay
            .get_or_init(|| async {
                let Some(source) = source else {
                    return;
                };
                let Some(mut ticks) = watch(&source).await else {
                    return;
                };
                if let Some(max) = max_seq.await {
                    self.published.fetch_max(max, Ordering::SeqCst);
                }
                let this = self.clone();
                tokio::spawn(async move {
                    while ticks.changed().await.is_ok() {
                        if this.tx.receiver_count() == 0 {
                            continue;
                        }
                        let after = this.published.load(Ordering::SeqCst);
                        let Some(rows) = rows_after(after, RELAY_BATCH).await else {
                            continue;
                        };
                        for (seq, item) in rows {
                            if this.published.fetch_max(seq, Ordering::SeqCst) < seq {
                                let _ = this.tx.send(item);
                            }
                        }
                    }
                });
            })
            .await;
        rx
    }
}
