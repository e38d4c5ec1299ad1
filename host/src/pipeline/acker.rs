//! Batched acknowledgements: deletes are gathered per queue and flushed when ten are ready or
//! after a short linger, so a steady stream costs one delete call per ten messages.
//!
//! A failed delete loses nothing: the message is redelivered after its visibility timeout, its
//! key is found completed, and it is acked again without running. So failures are logged and
//! retried a few times, never fatal.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::message::wire::MAX_BATCH_ENTRIES as MAX_BATCH;
use crate::source::{QueueSource, SourceError};

/// How long a lone ack waits for company.
const LINGER: Duration = Duration::from_millis(20);
const ATTEMPTS: u32 = 3;

/// Hands receipts to a queue's ack task.
#[derive(Clone, Debug)]
pub(crate) struct Acker {
    tx: mpsc::UnboundedSender<String>,
}

impl Acker {
    /// Starts the ack task for `queue`; it ends, after a last flush, when every `Acker` for it
    /// has been dropped.
    pub(crate) fn spawn(source: Arc<dyn QueueSource>, queue: String) -> (Acker, JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(source, queue, rx));
        (Acker { tx }, task)
    }

    /// Queues a receipt for deletion.
    pub(crate) fn ack(&self, receipt: String) {
        if self.tx.send(receipt).is_err() {
            tracing::warn!("ack task has stopped; the message will be redelivered and found done");
        }
    }
}

async fn run(source: Arc<dyn QueueSource>, queue: String, mut rx: mpsc::UnboundedReceiver<String>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while batch.len() < MAX_BATCH {
            tokio::select! {
                next = rx.recv() => match next {
                    Some(r) => batch.push(r),
                    None => break,
                },
                _ = &mut linger => break,
            }
        }
        flush(source.as_ref(), &queue, batch).await;
    }
}

async fn flush(source: &dyn QueueSource, queue: &str, mut batch: Vec<String>) {
    for attempt in 1..=ATTEMPTS {
        match source.ack(queue, &batch).await {
            Ok(results) => {
                batch = retryable(queue, batch, results);
                if batch.is_empty() {
                    return;
                }
            }
            Err(e) => tracing::warn!(queue, attempt, error = %e, "batch delete failed"),
        }
        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
    }
    tracing::error!(
        queue,
        count = batch.len(),
        "giving up on deletes; those messages will be redelivered and acked as duplicates"
    );
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
            Err(SourceError::ReceiptExpired) => {
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
