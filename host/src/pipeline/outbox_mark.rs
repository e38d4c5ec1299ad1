//! Marking a completed key's outbox sent, and trying again when the store did not answer.
//!
//! The mark is what keeps a later duplicate from sending the outbox again. It is not needed for
//! correctness (a re-send carries the same keys, and downstream drops the copy), but without it
//! a store outage at the wrong moment leaves the whole outbox in the completed record for the
//! dedup window, and every duplicate in that window sends it again. So a failed mark is tried
//! again in the background, with growing pauses, for about half an hour; at most
//! [`MAX_RETRYING`] keys are retried at once, the rest are logged and left as they are.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::faults::Operation;
use crate::idempotency::{IdempotencyError, IdempotencyStore};
use crate::stats::Stats;

/// Keys whose mark is being retried at once, at most.
const MAX_RETRYING: usize = 10_000;
/// Tries after the first, with pauses doubling from one second up to a minute.
const RETRIES: u32 = 35;
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// Marks outboxes sent, retrying in the background.
#[derive(Debug)]
pub(crate) struct OutboxMarks {
    retrying: Arc<Semaphore>,
}

impl Default for OutboxMarks {
    fn default() -> Self {
        OutboxMarks {
            retrying: Arc::new(Semaphore::new(MAX_RETRYING)),
        }
    }
}

impl OutboxMarks {
    /// Marks `key`'s outbox sent; if the store does not answer, keeps trying in the background.
    pub(crate) async fn mark(
        &self,
        store: Arc<dyn IdempotencyStore>,
        stats: &Arc<Stats>,
        key: &str,
    ) {
        let Err(e) = store.outbox_sent(key).await else {
            return;
        };
        if failed(stats, key, &e, 0) {
            return;
        }
        let Ok(slot) = Arc::clone(&self.retrying).try_acquire_owned() else {
            tracing::warn!(
                key,
                "too many outbox marks to retry; a duplicate of this key may send its outbox again"
            );
            return;
        };
        let (stats, key) = (Arc::clone(stats), key.to_string());
        tokio::spawn(async move {
            retry(store.as_ref(), &stats, &key).await;
            drop(slot);
        });
    }
}

/// Counts and logs a failed mark; `true` when it is final: the store answered, and trying
/// again would get the same answer.
fn failed(stats: &Stats, key: &str, error: &IdempotencyError, attempt: u32) -> bool {
    let op = Operation::OutboxSent;
    let last = matches!(
        error,
        IdempotencyError::LeaseLost(_)
            | IdempotencyError::Corrupt(_)
            | IdempotencyError::Conflict(_)
    );
    if let Some(held_back) = stats.record_failure(op, error.is_timeout()) {
        let then = if last { "leaving it" } else { "trying again" };
        tracing::warn!(key, operation = op.name(), attempt, %error, held_back, "could not record the outbox as sent; {then}");
    }
    last
}

async fn retry(store: &dyn IdempotencyStore, stats: &Stats, key: &str) {
    let mut pause = Duration::from_secs(1);
    for attempt in 1..=RETRIES {
        tokio::time::sleep(pause).await;
        match store.outbox_sent(key).await {
            Ok(()) => return,
            Err(e) if failed(stats, key, &e, attempt) => return,
            Err(_) => pause = (pause * 2).min(MAX_PAUSE),
        }
    }
    tracing::warn!(
        key,
        "gave up recording the outbox as sent; a duplicate of this key may send it again"
    );
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::atomic::{AtomicBool, AtomicU32};

    use super::*;
    use crate::idempotency::local::LocalStore;
    use crate::idempotency::{
        Acquired, Committed, Completion, Lease, LeaseRequest, Released, StoreResult,
    };

    /// The embedded store, except that outbox marks time out while `down`.
    #[derive(Debug)]
    struct Flaky {
        inner: LocalStore,
        down: AtomicBool,
        tries: AtomicU32,
    }

    #[async_trait::async_trait]
    impl IdempotencyStore for Flaky {
        async fn acquire(
            &self,
            requests: &[LeaseRequest],
        ) -> StoreResult<Vec<StoreResult<Acquired>>> {
            self.inner.acquire(requests).await
        }
        async fn extend(&self, lease: &Lease, ttl: Duration) -> StoreResult<()> {
            self.inner.extend(lease, ttl).await
        }
        async fn complete(&self, done: &[Completion]) -> StoreResult<Vec<StoreResult<Committed>>> {
            self.inner.complete(done).await
        }
        async fn outbox_sent(&self, key: &str) -> StoreResult<()> {
            self.tries.fetch_add(1, SeqCst);
            if self.down.load(SeqCst) {
                return Err(IdempotencyError::TimedOut("injected".into()));
            }
            self.inner.outbox_sent(key).await
        }
        async fn release(&self, lease: &Lease, why: Released) -> StoreResult<()> {
            self.inner.release(lease, why).await
        }
        async fn ping(&self) -> StoreResult<()> {
            self.inner.ping().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_mark_that_timed_out_is_tried_again_until_the_store_answers() {
        let flaky = Arc::new(Flaky {
            inner: LocalStore::open(None).unwrap(),
            down: true.into(),
            tries: 0.into(),
        });
        let store: Arc<dyn IdempotencyStore> = flaky.clone();
        let stats = Arc::new(Stats::default());
        OutboxMarks::default()
            .mark(Arc::clone(&store), &stats, "ns:{p:k}")
            .await;
        assert_eq!(flaky.tries.load(SeqCst), 1);
        // Down for the first pauses (1 s, 2 s, 4 s): three more tries, all timed out.
        tokio::time::sleep(Duration::from_millis(7_500)).await;
        assert_eq!(flaky.tries.load(SeqCst), 4);
        flaky.down.store(false, SeqCst);
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert_eq!(
            flaky.tries.load(SeqCst),
            5,
            "one more try, which is answered"
        );
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(flaky.tries.load(SeqCst), 5, "and none after it");
        assert_eq!(
            stats.failures_by_operation(),
            [(Operation::OutboxSent, 4, 0)]
        );
    }
}
