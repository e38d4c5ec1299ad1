//! The source contract: where messages come from, and what the host does with each delivery.
//!
//! The operations are named by what they mean for a delivery, not by one broker's verbs:
//! receive with a hold, settle (done), put back after a delay (a retry, or a run held back),
//! keep holding while a handler runs, send, and the queue's depth. Each source declares what
//! it can do natively ([`Capabilities`]); where a broker lacks something (a delay, a
//! dead-letter place that carries qhost's verdict, a delivery count, holds that expire) the
//! host makes up for it. `docs/design.md` maps every operation and capability onto SQS, the
//! embedded queue, RabbitMQ, NATS JetStream, a PostgreSQL queue table, Redis Streams and Kafka.
//!
//! A delivery is named by its handle (`Received::handle`), opaque to all but the source that
//! gave it (an SQS receipt handle, a delivery tag, a reply subject, a row id with its read
//! count), and counted by `Received::delivery_count`.

#[cfg(feature = "conformance")]
#[allow(
    clippy::unwrap_used,
    reason = "a test suite: a source call that fails fails its case, with the error"
)]
pub mod conformance;
#[cfg(feature = "conformance")]
pub mod twisted;

mod admin;

use std::time::Duration;

use async_trait::async_trait;

use qhost_message::{Outgoing, Received};

pub use admin::{Purged, QueueAdmin};

/// Why a queue operation failed. The pipeline branches on these.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The handle no longer names a live delivery (its hold lapsed and the message was
    /// delivered again, or it was already settled). Logged, never fatal.
    #[error("the delivery's handle has expired")]
    HandleExpired,
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
    /// The source cannot do what an operator asked of it (a peek SQS has no form of); the
    /// text says why and what can.
    #[error("{0}")]
    Unsupported(String),
    /// The backend failed (I/O, network, a server error). Usually worth retrying.
    #[error(transparent)]
    Backend(#[from] anyhow::Error),
}

impl SourceError {
    /// Whether trying again cannot help: the message or its target is wrong, not the service
    /// unavailable.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            SourceError::UnknownQueue(_) | SourceError::Refused(_) | SourceError::Unsupported(_)
        )
    }

    /// Whether the call ran out of time, as metrics and logs tell it apart from an error.
    pub fn is_timeout(&self) -> bool {
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

/// Whether a source's holds on deliveries end by themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// A hold lapses after its time unless kept (SQS's visibility timeout, NATS's `ack_wait`, a
    /// queue table's visible-after): the heartbeat keeps it while a handler runs, and a host
    /// that dies leaves its deliveries to come back by themselves.
    Expire,
    /// A hold lasts as long as the consumer's connection (RabbitMQ's unacked deliveries):
    /// nothing to keep while a handler runs, and a host that dies releases them as its
    /// connection drops.
    WithConnection,
}

/// What a source can do natively; the host makes up for the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// It can put a delivery back to come again after a delay.
    pub delay: bool,
    /// How its holds end.
    pub holds: Holds,
    /// It counts the deliveries of a message (`Received::delivery_count`); where it does not,
    /// the count is a lower bound (the host's attempts count runs in the store either way).
    pub delivery_count: bool,
    /// It keeps ordering groups (SQS FIFO queues' message groups): a group's messages come in
    /// the order sent, none while an earlier one of its group is held, other groups meanwhile.
    pub ordering_groups: bool,
}

/// A queue service: SQS, the embedded local queue, or RabbitMQ.
#[async_trait]
pub trait QueueSource: Send + Sync + std::fmt::Debug + 'static {
    /// What it can do natively.
    fn capabilities(&self) -> Capabilities;

    /// Receives up to `max` messages, each held (hidden from other consumers) for `hold`,
    /// waiting up to `wait` for the first one to arrive.
    async fn receive(
        &self,
        queue: &str,
        max: usize,
        hold: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, SourceError>;

    /// Settles a batch of deliveries (done: the source forgets them); for each handle, its own
    /// result.
    async fn settle(
        &self,
        queue: &str,
        handles: &[String],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError>;

    /// Puts a delivery back, to come again after `after` (zero: at once, a delivery given back
    /// unrun).
    async fn put_back(&self, queue: &str, handle: &str, after: Duration)
    -> Result<(), SourceError>;

    /// Puts several deliveries of one queue back (ten at most), each after its own delay; for
    /// each, its own result. By default, one call per delivery.
    async fn put_back_batch(
        &self,
        queue: &str,
        entries: &[(String, Duration)],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        let mut results = Vec::with_capacity(entries.len());
        for (handle, after) in entries {
            results.push(self.put_back(queue, handle, *after).await);
        }
        Ok(results)
    }

    /// Keeps holding a delivery for `hold` from now, while its handler runs (a source whose
    /// holds end with the connection has nothing to do).
    async fn hold(&self, queue: &str, handle: &str, hold: Duration) -> Result<(), SourceError>;

    /// Sends messages (to one or several queues); returns their ids in order. A message that
    /// breaks the queue's rules (SQS's: `qhost_message::rules`) is [`SourceError::Refused`].
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
