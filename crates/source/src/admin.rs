//! The operator's side of a source: what the `qhost` command's `purge`, `peek`, `dlq` and
//! `send --copies` do to a queue beside the data path. A trait apart from [`QueueSource`], so
//! the pipeline's contract stays the delivery's operations, and an operator verb a broker
//! cannot do is that broker's clear refusal ([`SourceError::Unsupported`]), not a `match` on
//! source kinds in every command.

use async_trait::async_trait;
use qhost_message::{Outgoing, Received};

use crate::{QueueSource, SourceError};

/// What a purge did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purged {
    /// The queue deleted this many messages at once.
    Deleted(u64),
    /// The broker took the request and deletes the messages in its own time (SQS: within a
    /// minute).
    Requested,
}

/// A source as an operator uses it. Each source opens as one of these, and the host hands the
/// pipeline its [`QueueSource`] face.
#[async_trait]
pub trait QueueAdmin: QueueSource {
    /// Deletes every message of `queue`.
    async fn purge(&self, queue: &str) -> Result<Purged, SourceError>;

    /// Up to `limit` messages waiting in `queue`, left exactly as they are (their delivery
    /// counts untouched). A broker with no such look says why.
    async fn peek(&self, queue: &str, limit: usize) -> Result<Vec<Received>, SourceError> {
        let _ = (queue, limit);
        Err(SourceError::Unsupported(
            "peek leaves a message as it is, which this source cannot do; peek works on the \
             embedded queue (source.kind = \"local\")"
                .into(),
        ))
    }

    /// What `qhost check` says of a consumed `queue` and its `dead_letter` queue: whether each
    /// exists (or, where the source declares queues, will be declared as the host declares
    /// it), as one line; an error when `qhost run` would refuse it.
    async fn inspect(&self, queue: &str, dead_letter: &str) -> Result<String, SourceError> {
        let depth = self.depth(queue).await?;
        self.depth(dead_letter).await?;
        Ok(format!(
            "exists ({} waiting, {} held or delayed); its dead-letter queue `{dead_letter}` \
             exists",
            depth.visible, depth.invisible
        ))
    }

    /// Sends each message `copies` times under one message id, as an at-least-once queue may
    /// deliver it by accident, so a handler's duplicate suppression can be watched at work;
    /// returns the ids. Called with no messages it sends nothing and answers whether the source
    /// can (an operator's command asks so before it stores a payload).
    async fn send_copies(
        &self,
        messages: &[Outgoing],
        copies: usize,
    ) -> Result<Vec<String>, SourceError> {
        let _ = (messages, copies);
        Err(SourceError::Unsupported(
            "sending copies of one message works on the embedded queue only \
             (source.kind = \"local\")"
                .into(),
        ))
    }
}
