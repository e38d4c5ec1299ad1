//! The operator's verbs on a configuration's queue backend: send a message (offloaded as the
//! host offloads), look at waiting messages and dead letters, purge, and redrive. The `qhost`
//! command's `send`, `peek`, `purge` and `dlq` are these, and so is any tool an embedder builds.
//! The backend is opened where the host opens its own (`host::open_source`), and what it cannot
//! do (a peek on SQS) is its own refusal (`QueueAdmin`): nothing here names a source kind.

use std::sync::Arc;

use anyhow::bail;

use crate::config::Config;
use crate::dlq::{self, Verdict};
use crate::host::{open_payloads, open_source};
use crate::message::recorded::RecordedMessage;
use crate::message::{Outgoing, Received, wire};
use crate::source::{Purged, QueueAdmin, SourceError};

pub(crate) use crate::dlq::Redriven;

/// A configuration's queue backend, opened for the queues a command names.
#[derive(Debug)]
pub struct Queues {
    config: Config,
    backend: Arc<dyn QueueAdmin>,
}

/// A dead letter with what qhost wrote on it.
#[derive(Clone, Debug)]
pub struct DeadLetter {
    /// The message as it sits in the dead-letter queue.
    pub message: Received,
    /// Why it was dead-lettered, by which plugin, from which queue.
    pub verdict: Verdict,
}

impl DeadLetter {
    /// The message as it was before it was dead-lettered (its original attributes, the queue it
    /// came from), in the recorded-message form `qhost replay` reads.
    pub fn recorded(&self) -> Result<RecordedMessage, String> {
        let attributes = dlq::original_attributes(&self.message)?;
        let mut record = RecordedMessage::of(&self.message, attributes, None);
        if let Some(source) = &self.verdict.source_queue {
            record.queue = source.clone();
        }
        Ok(record)
    }
}

impl Queues {
    /// Opens the configuration's queue backend; on SQS, `queues` must exist (the configured
    /// consumed queues need not: sending to one queue works before the others are created).
    pub async fn open(config: &Config, queues: &[&str]) -> anyhow::Result<Self> {
        let backend = open_source(config, Some(queues)).await?;
        let config = config.clone();
        Ok(Queues { config, backend })
    }

    /// Sends `msg` `copies` times under one message id (more than one copy, as an
    /// at-least-once queue may deliver it, on the embedded queue only); a body over the
    /// configuration's threshold goes to the payload store and a pointer is sent. Returns the
    /// message ids. Attributes named `qhost-…` are the host's own and are refused.
    pub async fn send(&self, msg: Outgoing, copies: usize) -> anyhow::Result<Vec<String>> {
        if let Some(a) = msg
            .attributes
            .iter()
            .find(|a| a.name.starts_with(wire::RESERVED_PREFIX))
        {
            bail!(
                "attribute {}: names starting with {} are the host's own (keys, pointers, \
                 dead-letter verdicts) and cannot be sent; pick another name",
                a.name,
                wire::RESERVED_PREFIX
            );
        }
        if copies != 1 {
            // Asked with nothing to send first, so a source that cannot make copies refuses
            // before a payload is stored for a message that will not go out.
            self.backend.send_copies(&[], copies).await?;
        }
        let payloads = open_payloads(&self.config).await?;
        let msg = payloads
            .offload_all(&self.config.namespace, 0, vec![msg])
            .await?;
        Ok(match copies {
            1 => self.backend.send(&msg).await?,
            _ => self.backend.send_copies(&msg, copies).await?,
        })
    }

    /// Up to `limit` messages waiting in `queue`, left as they are (embedded queue only: SQS
    /// has no peek that leaves a message's receive count alone).
    pub async fn peek(&self, queue: &str, limit: usize) -> anyhow::Result<Vec<Received>> {
        Ok(self.backend.peek(queue, limit).await?)
    }

    /// Whether `queue` and its `dead_letter` queue exist (or will be declared), as `qhost
    /// check` says it: an error where `qhost run` would refuse them.
    pub async fn inspect(&self, queue: &str, dead_letter: &str) -> anyhow::Result<String> {
        Ok(self.backend.inspect(queue, dead_letter).await?)
    }

    /// Deletes every message of `queue`.
    pub async fn purge(&self, queue: &str) -> anyhow::Result<Purged> {
        Ok(self.backend.purge(queue).await?)
    }

    /// Up to `limit` dead letters of `queue` with their verdicts. On SQS each is received with
    /// a visibility timeout of zero, so it stays available (its receive count goes up).
    pub async fn dead_letters(&self, queue: &str, limit: usize) -> anyhow::Result<Vec<DeadLetter>> {
        // A dead letter is looked at where it lies when the source can; otherwise received
        // with no hold, so it stays available (its delivery count goes up).
        let messages = match self.backend.peek(queue, limit).await {
            Err(SourceError::Unsupported(_)) => {
                dlq::peek(self.backend.as_ref(), queue, limit).await?
            }
            peeked => peeked?,
        };
        Ok(messages
            .into_iter()
            .map(|message| DeadLetter {
                verdict: dlq::verdict(&message),
                message,
            })
            .collect())
    }

    /// Sends up to `limit` dead letters of `queue` back to `to`, or to the queue each came from.
    pub async fn redrive(
        &self,
        queue: &str,
        to: Option<&str>,
        limit: usize,
    ) -> anyhow::Result<Redriven> {
        Ok(dlq::redrive(self.backend.as_ref(), queue, to, limit).await?)
    }
}
