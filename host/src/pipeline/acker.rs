//! Batched acknowledgements: deletes are gathered per queue and flushed when ten are ready or
//! after a short linger, so a steady stream costs one delete call per ten messages.
//!
//! Batches are flushed concurrently, up to [`MAX_FLUSHES`] at once: a delete whose answer is
//! slow (or lost, until its deadline) delays only its own ten messages, never the deletes behind
//! it. A failed delete loses nothing: the message is redelivered after its visibility timeout,
//! its key is found completed, and it is acked again without running. So failures are logged
//! and retried a few times, never fatal; a delete that timed out may have been done, and doing
//! it again is harmless (an already-deleted receipt is reported, not an error).
//!
//! At shutdown the host closes the ack task ([`AckTask::close`]) once the deliveries are done
//! or released: it flushes what was handed to it and ends, and reports how many deletes it
//! could not confirm.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::faults::Operation;
use crate::message::wire::MAX_BATCH_ENTRIES as MAX_BATCH;
use crate::progress::Progress;
use crate::source::{QueueSource, SourceError};
use crate::stats::Stats;

/// How long a lone ack waits for company.
const LINGER: Duration = Duration::from_millis(20);
const ATTEMPTS: u32 = 3;
/// Delete batches in flight at once per queue.
const MAX_FLUSHES: usize = 4;

/// Hands receipts to a queue's ack task.
#[derive(Clone, Debug)]
pub(crate) struct Acker {
    tx: mpsc::UnboundedSender<String>,
    /// Receipts handed over and not yet deleted (or given up on).
    pending: Arc<AtomicUsize>,
}

/// What the ack task needs.
struct Flusher {
    source: Arc<dyn QueueSource>,
    queue: String,
    stats: Arc<Stats>,
    progress: Arc<Progress>,
    pending: Arc<AtomicUsize>,
}

/// The running ack task of one queue.
#[derive(Debug)]
pub(crate) struct AckTask {
    close: CancellationToken,
    task: JoinHandle<()>,
    pending: Arc<AtomicUsize>,
}

impl AckTask {
    /// Flushes what was handed over, then ends; `Ok` when every delete was confirmed within
    /// `limit`, otherwise how many were not.
    pub(crate) async fn close(self, limit: Duration) -> Result<(), usize> {
        self.close.cancel();
        let _ = tokio::time::timeout(limit, self.task).await;
        match self.pending.load(Ordering::Relaxed) {
            0 => Ok(()),
            n => Err(n),
        }
    }
}

impl Acker {
    /// Starts the ack task for `queue`, noting each confirmed delete in `progress`.
    pub(crate) fn spawn(
        source: Arc<dyn QueueSource>,
        queue: String,
        stats: Arc<Stats>,
        progress: Arc<Progress>,
    ) -> (Acker, AckTask) {
        let (tx, rx) = mpsc::unbounded_channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let close = CancellationToken::new();
        let flusher = Flusher {
            source,
            queue,
            stats,
            progress,
            pending: Arc::clone(&pending),
        };
        let task = tokio::spawn(run(Arc::new(flusher), rx, close.clone()));
        let acker = Acker {
            tx,
            pending: Arc::clone(&pending),
        };
        let task = AckTask {
            close,
            task,
            pending,
        };
        (acker, task)
    }

    /// Receipts handed over and not yet deleted (or given up on).
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Queues a receipt for deletion.
    pub(crate) fn ack(&self, receipt: String) {
        self.pending.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(receipt).is_err() {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(
                "the ack task has stopped; the message will be redelivered and found done"
            );
        }
    }
}

/// Gathers batches until closed (or every `Acker` is gone), flushing up to [`MAX_FLUSHES`] at
/// once; once closed, flushes what is left and waits for every flush.
async fn run(
    flusher: Arc<Flusher>,
    mut rx: mpsc::UnboundedReceiver<String>,
    close: CancellationToken,
) {
    let mut flushes = JoinSet::new();
    loop {
        let first = tokio::select! {
            next = rx.recv() => next,
            _ = close.cancelled() => { rx.close(); rx.recv().await }
        };
        let Some(first) = first else { break };
        let batch = gather(first, &mut rx, &close).await;
        while flushes.try_join_next().is_some() {}
        if flushes.len() >= MAX_FLUSHES {
            flushes.join_next().await;
        }
        let flusher = Arc::clone(&flusher);
        flushes.spawn(async move { flusher.flush(batch).await });
    }
    while flushes.join_next().await.is_some() {}
}

/// A batch that starts with `first`: up to ten receipts, gathered for at most [`LINGER`] (not
/// at all once closing).
async fn gather(
    first: String,
    rx: &mut mpsc::UnboundedReceiver<String>,
    close: &CancellationToken,
) -> Vec<String> {
    let mut batch = vec![first];
    let linger = tokio::time::sleep(LINGER);
    tokio::pin!(linger);
    while batch.len() < MAX_BATCH {
        if close.is_cancelled() {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
            continue;
        }
        tokio::select! {
            next = rx.recv() => match next {
                Some(r) => batch.push(r),
                None => break,
            },
            _ = &mut linger => break,
        }
    }
    batch
}

impl Flusher {
    async fn flush(&self, mut batch: Vec<String>) {
        let queue = self.queue.as_str();
        let handed = batch.len();
        for attempt in 1..=ATTEMPTS {
            match self.source.settle(queue, &batch).await {
                Ok(results) => {
                    let tried = batch.len();
                    batch = retryable(queue, batch, results);
                    if batch.len() < tried {
                        self.progress.finished();
                    }
                    if batch.is_empty() {
                        break;
                    }
                }
                Err(e) => {
                    let op = Operation::Delete;
                    if let Some(held_back) = self.stats.record_failure(op, e.is_timeout()) {
                        tracing::warn!(queue, operation = op.name(), error = %e, held_back, "batch delete failed; retrying");
                    }
                }
            }
            if attempt < ATTEMPTS {
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
        }
        if !batch.is_empty() {
            tracing::error!(
                queue,
                count = batch.len(),
                "giving up on deletes; those messages will be redelivered and acked as duplicates"
            );
        }
        self.pending.fetch_sub(handed, Ordering::Relaxed);
    }
}

/// Keeps the receipts worth another try; an expired receipt is not.
fn retryable(
    queue: &str,
    batch: Vec<String>,
    results: Vec<Result<(), SourceError>>,
) -> Vec<String> {
    batch
        .into_iter()
        .zip(results)
        .filter_map(|(receipt, result)| match result {
            Ok(()) => None,
            Err(SourceError::HandleExpired) => {
                tracing::warn!(queue, "receipt expired before delete; the message may run as a duplicate and be suppressed");
                None
            }
            Err(e) => {
                tracing::warn!(queue, error = %e, "delete failed");
                Some(receipt)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use async_trait::async_trait;

    use super::*;
    use crate::message::Outgoing;
    use crate::source::local::LocalQueue;
    use crate::source::twisted::{Twist, Twisted};

    /// The first settle never answers.
    #[derive(Debug, Default)]
    struct FirstDeleteHangs {
        deletes: AtomicUsize,
    }

    #[async_trait]
    impl Twist for FirstDeleteHangs {
        async fn settle(&self) -> Result<(), SourceError> {
            if self.deletes.fetch_add(1, Ordering::SeqCst) == 0 {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_delete_that_never_answers_holds_up_only_its_own_batch() {
        let source = Arc::new(Twisted {
            inner: Arc::new(LocalQueue::open(None, HashMap::new()).unwrap()),
            twist: FirstDeleteHangs::default(),
        });
        let messages: Vec<Outgoing> = (0..30)
            .map(|i| Outgoing::new("q", format!("m{i}")))
            .collect();
        source.send(&messages).await.unwrap();
        let mut receipts = Vec::new();
        while receipts.len() < 30 {
            let got = source
                .receive("q", 10, Duration::from_secs(60), Duration::ZERO)
                .await
                .unwrap();
            receipts.extend(got.into_iter().map(|m| m.handle));
        }
        let progress = Arc::new(Progress::new());
        let stats = Arc::new(Stats::default());
        let (acker, task) = Acker::spawn(source.clone(), "q".into(), stats, Arc::clone(&progress));
        for receipt in receipts {
            acker.ack(receipt);
        }
        let mut left = 30;
        for _ in 0..200 {
            left = source.depth("q").await.unwrap().total();
            if left == 10 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            left, 10,
            "the two batches behind the stuck one were deleted"
        );
        assert!(
            progress.idle_for() < Duration::from_secs(5),
            "their deletes count as progress"
        );
        assert_eq!(
            task.close(Duration::from_millis(200)).await,
            Err(10),
            "shutdown reports the ten deletes it could not confirm, and nothing else"
        );
    }
}
