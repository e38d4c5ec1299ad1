//! The queue boundary: where messages come from and where acknowledgements go.
//!
//! One trait, one implementation per backend, chosen by configuration. The verbs are SQS's,
//! because SQS is the strictest queue qhost targets: at-least-once delivery, a visibility
//! timeout that hides a received message, a receipt handle per delivery, and batch deletes.

pub(crate) mod local;
pub(crate) mod sqs;

use std::time::Duration;

use async_trait::async_trait;

use crate::message::{Outgoing, Received};

/// Why a queue operation failed. The pipeline branches on these.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The receipt no longer names a live delivery (the visibility timeout lapsed and the
    /// message was received again, or it was already deleted). Logged, never fatal.
    #[error("receipt handle has expired")]
    ReceiptExpired,
    /// The queue does not exist.
    #[error("queue `{0}` does not exist")]
    UnknownQueue(String),
    /// The queue refused a message for good: sending it again would be refused again.
    #[error("refused: {0}")]
    Refused(String),
    /// No answer came within the call's deadline. The call may still have taken effect (a
    /// send sent, a delete done): every caller acts so that either way is correct.
    #[error("{0}: no answer within the deadline")]
    TimedOut(String),
    /// The backend failed (I/O, network, a server error). Usually worth retrying.
    #[error(transparent)]
    Backend(#[from] anyhow::Error),
}

impl SourceError {
    /// Whether trying again cannot help: the message or its target is wrong, not the service
    /// unavailable.
    pub fn is_permanent(&self) -> bool {
        matches!(self, SourceError::UnknownQueue(_) | SourceError::Refused(_))
    }

    /// Whether the call ran out of time, as metrics and logs tell it apart from an error.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, SourceError::TimedOut(_))
    }
}

/// How many messages a queue holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Messages that can be received now.
    pub visible: u64,
    /// Messages received and not yet deleted, or delayed.
    pub invisible: u64,
}

impl QueueDepth {
    /// All messages, visible or not.
    pub fn total(&self) -> u64 {
        self.visible + self.invisible
    }
}

/// A queue service: SQS, or the embedded local queue.
#[async_trait]
pub trait QueueSource: Send + Sync + std::fmt::Debug + 'static {
    /// Receives up to `max` messages, hiding them for `visibility`, waiting up to `wait` for the
    /// first one to arrive.
    async fn receive(
        &self,
        queue: &str,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, SourceError>;

    /// Deletes a batch of deliveries; returns, for each receipt, its own result.
    async fn ack(
        &self,
        queue: &str,
        receipts: &[String],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError>;

    /// Makes a delivery visible again after `delay` (to retry it), or keeps it hidden for that
    /// long (to extend it while a handler runs).
    async fn change_visibility(
        &self,
        queue: &str,
        receipt: &str,
        delay: Duration,
    ) -> Result<(), SourceError>;

    /// Changes the visibility of several deliveries of one queue (ten at most), each by its
    /// own delay; returns, for each, its own result. By default, one call per delivery.
    async fn change_visibility_batch(
        &self,
        queue: &str,
        entries: &[(String, Duration)],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        let mut results = Vec::with_capacity(entries.len());
        for (receipt, delay) in entries {
            results.push(self.change_visibility(queue, receipt, *delay).await);
        }
        Ok(results)
    }

    /// Sends messages (to one or several queues); returns their ids in order. A message that
    /// breaks SQS's rules ([`crate::message::rules`]) is [`SourceError::Refused`].
    async fn send(&self, messages: &[Outgoing]) -> Result<Vec<String>, SourceError>;

    /// How many messages the queue holds.
    async fn depth(&self, queue: &str) -> Result<QueueDepth, SourceError>;

    /// Whether one [`depth`](QueueSource::depth) reading is exact: all its counts taken at one
    /// instant. SQS's counts are approximate (an SQS-compatible server may take them one after
    /// another), so a message changing state meanwhile can be missed; `run --until-idle` then
    /// wants several empty readings in a row.
    fn depth_is_exact(&self) -> bool {
        false
    }

    /// A client of the same queues for a lane of its own (see `host::lanes`): one whose
    /// connections are opened and driven on the lane's thread, so a lane's calls never wake
    /// another core. `None` where the source holds no connections (the embedded queue): the
    /// lanes share this one.
    fn for_lane(&self) -> Option<std::sync::Arc<dyn QueueSource>> {
        None
    }
}
