//! Batched put-backs: the visibility changes that end a delivery (a busy key, a retry delay, a
//! deferral, a release at shutdown) are gathered per queue and sent up to ten to a call, after a
//! short linger, as the acker gathers deletes.
//!
//! A burst of duplicates puts many copies back at once, and one `ChangeMessageVisibility` per
//! copy was the SQS path's largest source of extra requests (about 1,000 calls per 12,000
//! deliveries in one run with producer duplicates). Each put-back still waits for its own
//! answer, so a delivery ends only once its change is answered, as before. A call that fails
//! fails for each of its entries; a message whose change failed comes back when its visibility
//! timeout lapses anyway. A lone put-back is sent as a single change, as it always was.
//!
//! Heartbeats are not batched here: an extension must land before the visibility runs out, and
//! each already runs on its own schedule.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::gather::gather;
use crate::message::wire::MAX_BATCH_ENTRIES as MAX_BATCH;
use crate::source::{QueueSource, SourceError};

/// How long a put-back waits for company.
const LINGER: Duration = Duration::from_millis(5);

type Reply = oneshot::Sender<Result<(), SourceError>>;

/// One put-back: the delivery's receipt, when it should be visible again, and who waits.
type Request = (String, Duration, Reply);

/// Hands put-backs to a queue's batcher task; the task ends when every handle is dropped.
#[derive(Clone, Debug)]
pub(crate) struct PutBacks {
    tx: mpsc::UnboundedSender<Request>,
}

impl PutBacks {
    /// Starts the batcher for `queue`.
    pub(crate) fn spawn(source: Arc<dyn QueueSource>, queue: String) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(batches(source, queue, rx));
        PutBacks { tx }
    }

    /// Makes the delivery `receipt` visible again after `delay`; answers once SQS has.
    pub(crate) async fn put_back(&self, receipt: &str, delay: Duration) -> Result<(), SourceError> {
        let stopped = || SourceError::Backend(anyhow::anyhow!("the put-back batcher has stopped"));
        let (reply, answer) = oneshot::channel();
        (self.tx)
            .send((receipt.to_string(), delay, reply))
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// Gathers put-backs into batches and sends each batch from a task of its own, so a slow call
/// holds only its own entries.
async fn batches(
    source: Arc<dyn QueueSource>,
    queue: String,
    mut rx: mpsc::UnboundedReceiver<Request>,
) {
    while let Some(first) = rx.recv().await {
        let batch = gather(first, &mut rx, MAX_BATCH, LINGER).await;
        tokio::spawn(send(Arc::clone(&source), queue.clone(), batch));
    }
}

/// Sends one batch and answers each of its put-backs.
async fn send(source: Arc<dyn QueueSource>, queue: String, batch: Vec<Request>) {
    let (entries, replies): (Vec<_>, Vec<_>) = (batch.into_iter())
        .map(|(receipt, delay, reply)| ((receipt, delay), reply))
        .unzip();
    match source.put_back_batch(&queue, &entries).await {
        Ok(results) if results.len() == replies.len() => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }
        Ok(results) => {
            let n = (results.len(), replies.len());
            for reply in replies {
                let _ = reply.send(Err(SourceError::Backend(anyhow::anyhow!(
                    "{} answers to {} visibility changes",
                    n.0,
                    n.1
                ))));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(each(&e)));
            }
        }
    }
}

/// A failed call's error, once for each of its entries.
fn each(e: &SourceError) -> SourceError {
    match e {
        SourceError::HandleExpired => SourceError::HandleExpired,
        SourceError::UnknownQueue(q) => SourceError::UnknownQueue(q.clone()),
        SourceError::Refused(r) => SourceError::Refused(r.clone()),
        SourceError::TimedOut(what) => SourceError::TimedOut(what.clone()),
        SourceError::Unsupported(why) => SourceError::Unsupported(why.clone()),
        SourceError::Backend(b) => SourceError::Backend(anyhow::anyhow!("{b:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Outgoing;
    use crate::source::local::LocalQueue;
    use crate::source::twisted::{Twist, Twisted};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts the calls that put deliveries back.
    #[derive(Debug, Default)]
    struct Counting {
        singles: AtomicUsize,
        batches: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Twist for Counting {
        async fn put_back(&self) -> Result<(), SourceError> {
            self.singles.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        async fn put_back_batch(&self) -> Result<(), SourceError> {
            self.batches.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    #[tokio::test]
    async fn put_backs_made_together_share_calls_and_each_gets_its_own_answer() {
        let source = Arc::new(Twisted {
            inner: Arc::new(LocalQueue::open(None, std::collections::HashMap::new()).unwrap()),
            twist: Counting::default(),
        });
        let bodies: Vec<Outgoing> = (0..25)
            .map(|i| Outgoing::new("q", format!("m{i}")))
            .collect();
        source.send(&bodies).await.unwrap();
        let mut receipts = Vec::new();
        while receipts.len() < 25 {
            let got = (source
                .receive("q", 10, Duration::from_secs(30), Duration::ZERO)
                .await)
                .unwrap();
            receipts.extend(got.into_iter().map(|m| m.handle));
        }
        receipts.push("no-such-receipt".to_string());
        let put_backs = PutBacks::spawn(Arc::clone(&source) as Arc<dyn QueueSource>, "q".into());
        let answers = futures_util::future::join_all(
            receipts
                .iter()
                .map(|r| put_backs.put_back(r, Duration::ZERO)),
        )
        .await;
        let expired = answers
            .iter()
            .filter(|a| matches!(a, Err(SourceError::HandleExpired)))
            .count();
        assert_eq!(expired, 1, "{answers:?}");
        assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 25);
        assert_eq!(
            source.twist.batches.load(Ordering::Relaxed),
            3,
            "26 put-backs in 3 calls"
        );
        assert_eq!(source.twist.singles.load(Ordering::Relaxed), 0);
        let again = (source
            .receive("q", 10, Duration::from_secs(30), Duration::ZERO)
            .await)
            .unwrap();
        assert_eq!(again.len(), 10, "the messages put back are visible again");
    }
}
