//! What happens to a message after its handler (or the lease) has decided: delete it, put it
//! back for later, or dead-letter it. Every path either finishes the message or leaves it in
//! the queue to come back; none drops it.

use std::sync::Arc;
use std::time::Duration;

use crate::handler::Plugin;
use crate::idempotency::Lease;
use crate::message::{Attribute, Outgoing, Received};
use crate::stats::Event;

use super::backoff;

/// Where a message stands once the host is done with this delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Deleted or dead-lettered: it will not come back.
    Gone,
    /// Still in the queue: it comes back after a delay or when its visibility lapses.
    Back,
}
use super::deadletter::{self, Verdict};
use super::prepare::OUTBOX_KEY_ATTRIBUTE;
use super::{QueueCtx, Shared};

/// The attribute naming the plugin build that produced an outbox message (`NAME@VERSION`).
pub const PRODUCER_ATTRIBUTE: &str = "qhost-producer";

/// Stamps each outbox message with its derived key (`KEY/INDEX`) as an attribute and as the
/// FIFO deduplication id, so that a re-send after a crash is recognisable downstream, and with
/// the producing plugin's name and version.
pub fn stamp_outbox(key: &str, producer: &Plugin, outbox: Vec<Outgoing>) -> Vec<Outgoing> {
    if outbox.is_empty() {
        return outbox; // most handlers send nothing: no per-message allocation for them
    }
    let produced_by = format!("{}@{}", producer.name, producer.version);
    outbox
        .into_iter()
        .enumerate()
        .map(|(i, mut m)| {
            let derived = format!("{key}/{i}");
            m.attributes
                .retain(|a| a.name != OUTBOX_KEY_ATTRIBUTE && a.name != PRODUCER_ATTRIBUTE);
            m.attributes
                .push(Attribute::string(OUTBOX_KEY_ATTRIBUTE, &derived));
            m.attributes
                .push(Attribute::string(PRODUCER_ATTRIBUTE, &produced_by));
            m.dedup_id = Some(crate::runtime::loader::version_of(derived.as_bytes()));
            m
        })
        .collect()
}

/// Sends a completed key's outbox, records it sent, and deletes the message. If the send fails
/// the message is put back: its redelivery finds the key completed with the outbox still
/// pending and sends it then.
pub async fn finish(
    shared: &Shared,
    queue: &QueueCtx,
    msg: Received,
    plugin: &str,
    scoped_key: &str,
    outbox: Vec<Outgoing>,
) -> Fate {
    if !outbox.is_empty() {
        if let Err(e) = shared.source.send(&outbox).await {
            tracing::warn!(queue = %msg.queue, message_id = %msg.id, error = %e, "outbox send failed; will resend on redelivery");
            let delay = backoff::delay(&shared.config.retry, msg.receive_count, 0);
            return put_back(shared, queue, &msg, plugin, delay, Event::Retried).await;
        }
        shared
            .stats
            .record(&msg.queue, plugin, Event::OutboxSent(outbox.len() as u64));
        if let Err(e) = shared.store.outbox_sent(scoped_key).await {
            // Harmless: a redelivery would send again, and downstream drops the copy by key.
            tracing::warn!(key = scoped_key, error = %e, "could not record the outbox as sent");
        }
    }
    queue.acker.ack(msg.receipt);
    // The work is recorded complete, so a later copy of this message is acked without its
    // payload: the payload can go.
    if crate::payload::pointer::is_pointer(&msg.attributes) {
        let payloads = Arc::clone(&shared.payloads);
        tokio::spawn(async move { payloads.cleanup(&msg.body, &msg.attributes).await });
    }
    Fate::Gone
}

/// Makes a message visible again after `delay`, counting it as `why` (a retry, a busy key, a
/// release at shutdown).
pub async fn put_back(
    shared: &Shared,
    queue: &QueueCtx,
    msg: &Received,
    plugin: &str,
    delay: Duration,
    why: Event,
) -> Fate {
    shared.stats.record(&msg.queue, plugin, why);
    if let Err(e) = shared
        .source
        .change_visibility(&queue.config.name, &msg.receipt, delay)
        .await
    {
        // It comes back anyway when its visibility timeout lapses.
        tracing::warn!(queue = %msg.queue, message_id = %msg.id, error = %e, "could not set the retry delay");
    }
    Fate::Back
}

/// Sends the message to the dead-letter queue and deletes it; if the send fails, puts it back.
pub async fn dead_letter(
    shared: &Shared,
    queue: &QueueCtx,
    msg: Received,
    verdict: Verdict<'_>,
) -> Fate {
    let letter = deadletter::letter(&msg, &queue.config.dead_letter, &verdict);
    tracing::warn!(
        queue = %msg.queue, message_id = %msg.id, plugin = verdict.plugin, version = verdict.version,
        attempts = msg.receive_count, reason = %verdict.reason, "dead-lettering"
    );
    match shared.source.send(&[letter]).await {
        Ok(_) => {
            shared
                .stats
                .record(&msg.queue, verdict.plugin, Event::DeadLettered);
            queue.acker.ack(msg.receipt);
            Fate::Gone
        }
        Err(e) => {
            tracing::error!(queue = %msg.queue, message_id = %msg.id, error = %e, "dead-letter send failed; keeping the message");
            let delay = backoff::delay(&shared.config.retry, msg.receive_count, 0);
            put_back(shared, queue, &msg, verdict.plugin, delay, Event::Retried).await
        }
    }
}

/// A failed attempt: retry after a backoff, or dead-letter once `max_attempts` is reached.
pub async fn retry_or_give_up(
    shared: &Shared,
    queue: &QueueCtx,
    msg: Received,
    plugin: (&str, &str),
    max_attempts: u32,
    asked_secs: u32,
    reason: String,
) -> Fate {
    let (name, version) = plugin;
    if msg.receive_count >= max_attempts {
        let reason = format!("gave up after {} attempts: {reason}", msg.receive_count);
        return dead_letter(
            shared,
            queue,
            msg,
            Verdict {
                plugin: name,
                version,
                reason,
            },
        )
        .await;
    }
    tracing::info!(queue = %msg.queue, message_id = %msg.id, plugin = name, version, attempt = msg.receive_count, %reason, "will retry");
    let delay = backoff::delay(&shared.config.retry, msg.receive_count, asked_secs);
    put_back(shared, queue, &msg, name, delay, Event::Retried).await
}

/// Gives a lease back so the retry need not wait for it to lapse.
pub async fn release(shared: &Shared, plugin: &Plugin, lease: &Lease) {
    match shared.store.release(lease).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(plugin = %plugin.name, key = %lease.key, "lease had already passed to another worker")
        }
        Err(e) => {
            tracing::warn!(plugin = %plugin.name, key = %lease.key, error = %e, "could not release lease; it will lapse")
        }
    }
}
