//! One received message through its life: a [`Delivery`] owns the message, its queue, the
//! plugin it routes to, its key, its lease and its heartbeat, and ends through exactly one of
//! its consuming methods. "One fate per delivery" is therefore a type guarantee: every path
//! either finishes the message or leaves it in the queue to come back; none drops it.
//!
//! | method          | the message                    | the lease           | counts as an attempt |
//! |-----------------|--------------------------------|---------------------|----------------------|
//! | [`ack`]         | outbox committed, then finish  | becomes completed   | —                    |
//! | [`finish`]      | outbox sent, deleted           | (already completed) | —                    |
//! | [`put_back`]    | visible again after a delay    | released            | no                   |
//! | [`back_off`]    | put back on the retry schedule | released            | no (counts deferred) |
//! | [`retry`]       | put back, or dead-lettered     | released, a failure | yes (a handler run)  |
//! | [`dead_letter`] | sent to the DLQ, deleted       | released            | —                    |
//! | [`let_lapse`]   | left to its visibility timeout | (lost to another)   | —                    |
//!
//! Each method first stops the heartbeat and waits for an extension under way, so nothing it
//! does to the message can be overtaken by a late extension. `retry` and `dead_letter` first
//! confirm the lease is still held: a result reached after losing it is dropped
//! (`let_lapse`), since the key's new owner decides.
//!
//! [`ack`]: Delivery::ack
//! [`finish`]: Delivery::finish
//! [`put_back`]: Delivery::put_back
//! [`back_off`]: Delivery::back_off
//! [`retry`]: Delivery::retry
//! [`dead_letter`]: Delivery::dead_letter
//! [`let_lapse`]: Delivery::let_lapse

use std::sync::Arc;
use std::time::Duration;

use super::backoff;
use super::context::{QueueCtx, Shared};
use super::deadletter::{self, Verdict};
use super::heartbeat::Heartbeat;
use super::outbox;
use crate::faults::Operation;
use crate::idempotency::{Completion, IdempotencyError, Lease, Released};
use crate::message::{Outgoing, Received};
use crate::metrics::InFlight;
use crate::payload::OffloadError;
use crate::plugin::Plugin;
use crate::stats::Event;
use crate::traces::MessageSpan;
use opentelemetry::KeyValue;

/// Where a message stands once the host is done with this delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Deleted or dead-lettered: it will not come back.
    Gone,
    /// Still in the queue: it comes back after a delay or when its visibility lapses.
    Back,
}

/// The plugin a delivery belongs to: a loaded build, or only a name (not loaded, or not routed
/// yet), which is what stats and dead letters then name.
#[derive(Clone, Debug)]
pub(crate) enum PluginRef {
    /// A loaded plugin.
    Loaded(Arc<Plugin>),
    /// A plugin known by name only.
    Named(String),
}

/// Attempts allowed for a delivery known by its plugin's name only (no handler of it ran).
const MAX_ATTEMPTS_WITHOUT_PLUGIN: u32 = 5;

impl PluginRef {
    /// The plugin's name.
    pub(crate) fn name(&self) -> &str {
        match self {
            PluginRef::Loaded(p) => &p.name,
            PluginRef::Named(name) => name,
        }
    }

    /// Its version, or `-` when none is loaded.
    pub(crate) fn version(&self) -> &str {
        match self {
            PluginRef::Loaded(p) => &p.version,
            PluginRef::Named(_) => "-",
        }
    }

    fn max_attempts(&self) -> u32 {
        match self {
            PluginRef::Loaded(p) => p.manifest.limits.max_attempts,
            PluginRef::Named(_) => MAX_ATTEMPTS_WITHOUT_PLUGIN,
        }
    }
}

/// A message's idempotency key, as the handler sees it and as the store holds it.
#[derive(Clone, Debug)]
pub(crate) struct Key {
    /// What the handler sees (and outbox keys derive from).
    pub(crate) handler: String,
    /// `NAMESPACE:{PLUGIN:KEY}`, what the store holds.
    pub(crate) scoped: String,
}

/// One received message, from routing to its fate.
#[derive(Debug)]
#[must_use = "a delivery ends through one of its fate methods"]
pub(crate) struct Delivery {
    queue: Arc<QueueCtx>,
    msg: Received,
    plugin: PluginRef,
    key: Option<Key>,
    lease: Option<Lease>,
    heartbeat: Option<Heartbeat>,
    /// Whether this delivery fetched and verified the payload its pointer names: only then
    /// may finishing it delete that payload.
    payload_verified: bool,
    /// The sha256 of the body its handler ran on, recorded with the completed key.
    ran_on: Option<String>,
    /// Counts it in flight until it ends.
    _in_flight: InFlight,
    /// Its trace span, ended with it.
    span: MessageSpan,
}

impl Delivery {
    /// A delivery of `msg` from `queue`, for `plugin`.
    pub(crate) fn new(queue: Arc<QueueCtx>, msg: Received, plugin: PluginRef) -> Self {
        let in_flight = queue.shared.metrics.in_flight();
        let shared = &queue.shared;
        let system = shared.config.source.messaging_system();
        let span = MessageSpan::start(shared.tracer.as_ref(), system, &msg);
        span.set(|| {
            vec![
                KeyValue::new("qhost.plugin", plugin.name().to_string()),
                KeyValue::new("qhost.plugin.version", plugin.version().to_string()),
            ]
        });
        Delivery {
            span,
            _in_flight: in_flight,
            queue,
            msg,
            plugin,
            key: None,
            lease: None,
            heartbeat: None,
            payload_verified: false,
            ran_on: None,
        }
    }

    /// Notes the sha256 of the body the handler runs on.
    pub(crate) fn running_on(&mut self, sha256: String) {
        self.ran_on = Some(sha256);
    }

    /// Notes that this delivery fetched and verified its payload.
    pub(crate) fn payload_verified(&mut self) {
        self.payload_verified = true;
    }

    /// The delivery with its idempotency key.
    pub(crate) fn keyed(mut self, key: Key) -> Self {
        let handler = &key.handler;
        (self.span).set(|| vec![KeyValue::new("qhost.idempotency_key", handler.clone())]);
        self.key = Some(key);
        self
    }

    /// The delivery under `lease`, with its heartbeat running.
    pub(crate) fn leased(mut self, lease: Lease) -> Self {
        self.heartbeat = Heartbeat::start(&self.queue, &self.msg.receipt, &lease);
        let token = lease.fencing_token;
        (self.span).set(|| vec![KeyValue::new("qhost.fencing_token", token as i64)]);
        self.lease = Some(lease);
        self
    }

    /// The message.
    pub(crate) fn msg(&self) -> &Received {
        &self.msg
    }

    /// Its queue.
    pub(crate) fn queue(&self) -> &QueueCtx {
        &self.queue
    }

    /// The host's shared parts.
    pub(crate) fn shared(&self) -> &Shared {
        &self.queue.shared
    }

    /// Its key, once routed.
    pub(crate) fn key(&self) -> Option<&Key> {
        self.key.as_ref()
    }

    /// The fencing token of its lease, once leased.
    pub(crate) fn fencing_token(&self) -> u64 {
        self.lease.as_ref().map_or(0, |l| l.fencing_token)
    }

    /// Its trace span.
    pub(crate) fn span(&self) -> &MessageSpan {
        &self.span
    }

    /// Counts `event` for this delivery's queue and plugin (and, for an event that ends it,
    /// records it as the span's outcome).
    pub(crate) fn record(&self, event: Event) {
        self.queue.record(self.plugin.name(), event);
        if let Some(outcome) = event.outcome() {
            self.span.outcome(outcome);
            if event == Event::LostLease {
                (self.span).error("lease_lost", "the lease passed to another worker");
            }
        }
    }

    /// Counts a failed call of `op`, and marks the span failed by it; `Some(held back)` when
    /// this failure is the one of its burst to log (see [`crate::faults`]).
    #[must_use = "log the failure when this says to"]
    pub(crate) fn backend_error(&self, op: Operation, timed_out: bool) -> Option<u64> {
        let held_back = self.shared().stats.record_failure(op, timed_out);
        let backend = op.backend();
        let kind = backend.error_type();
        let name = backend.name();
        (self.span).error(kind, format_args!("a call to the {name} backend failed"));
        held_back
    }

    /// The retry schedule's delay for this delivery, never less than `asked_secs`.
    pub(crate) fn backoff_delay(&self, asked_secs: u32) -> Duration {
        let policy = &self.shared().config.retry;
        backoff::delay(policy, self.msg.receive_count, asked_secs)
    }

    /// Stops the heartbeat, waiting for an extension under way.
    async fn stop_heartbeat(&mut self) {
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.stop().await;
        }
    }

    /// Gives the lease back (if held) so the next delivery need not wait for it to lapse,
    /// counting the run by `why`.
    async fn release(&mut self, why: Released) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        let plugin = self.plugin.name();
        match self.shared().store.release(&lease, why).await {
            Ok(()) => {}
            Err(IdempotencyError::LeaseLost(key)) => {
                tracing::warn!(plugin, %key, "lease had already passed to another worker")
            }
            Err(e) => {
                if let Some(held_back) = self.backend_error(Operation::Release, e.is_timeout()) {
                    tracing::warn!(plugin, key = %lease.key, error = %e, held_back, "could not release lease; it will lapse")
                }
            }
        }
    }

    /// This delivery's attempt: the handler runs on its key so far (this one included) once
    /// leased, or its deliveries when it never was.
    fn attempt(&self) -> u32 {
        self.lease
            .as_ref()
            .map_or(self.msg.receive_count, |l| l.failures + 1)
    }

    /// Whether the lease (if any) is still this delivery's. A failure or reject reached after
    /// losing it is not this delivery's to act on: the new owner's run stands.
    async fn still_held(&self) -> Result<(), IdempotencyError> {
        match &self.lease {
            Some(lease) => {
                let ttl = self.queue.config.visibility;
                self.shared().store.extend(lease, ttl).await
            }
            None => Ok(()),
        }
    }

    /// Ends the delivery if its lease is gone (or cannot be confirmed); otherwise hands it back.
    async fn unless_lost(self) -> Result<Self, Fate> {
        match self.still_held().await {
            Ok(()) => Ok(self),
            Err(IdempotencyError::LeaseLost(key)) => {
                let msg = &self.msg;
                tracing::warn!(queue = %msg.queue, message_id = %msg.id, %key, "lease lost while the handler ran; leaving the message to its new owner");
                Err(self.let_lapse(Event::LostLease).await)
            }
            Err(e) => {
                if let Some(held_back) = self.backend_error(Operation::Extend, e.is_timeout()) {
                    let msg = &self.msg;
                    tracing::warn!(queue = %msg.queue, message_id = %msg.id, error = %e, held_back, "cannot confirm the lease; putting the message back");
                }
                Err(self.back_off().await)
            }
        }
    }

    /// The handler acked: large outbox messages are offloaded, the outbox is committed with
    /// the completed record, then sent and the message deleted.
    pub(crate) async fn ack(mut self, outbox: Vec<Outgoing>) -> Fate {
        self.stop_heartbeat().await;
        let stamped = match (&self.plugin, &self.key) {
            (PluginRef::Loaded(plugin), Some(key)) => {
                let mut outbox = outbox::stamp(&key.handler, plugin, outbox);
                let shape = self.shared().config.payload.send_shape();
                self.span.propagate(&mut outbox, &shape);
                Some((outbox, plugin.manifest.dedup_window()))
            }
            _ => None,
        };
        let (Some(lease), Some((outbox, window))) = (self.lease.take(), stamped) else {
            // Only a routed, leased delivery is run; without a lease nothing may be committed.
            return self.let_lapse(Event::LostLease).await;
        };
        let shared = Arc::clone(&self.queue.shared);
        // Large messages are offloaded before the outbox is recorded, so the completed record
        // holds pointers, and a re-send after a crash reuses the same payload keys.
        let outbox = match shared
            .payloads
            .offload_all(&shared.config.namespace, lease.fencing_token, outbox)
            .await
        {
            Ok(outbox) => outbox,
            Err(e) => return self.unsendable(lease, e).await,
        };
        let completion = Completion {
            lease,
            outbox: outbox.clone(),
            window,
            digest: self.ran_on.take(),
        };
        let step = self.span.step("complete");
        let completed = shared.completer.complete(completion).await;
        drop(step);
        match completed {
            Ok(()) => {
                self.record(Event::Acked);
                self.finish(outbox).await
            }
            Err(IdempotencyError::LeaseLost(_)) => {
                let (msg, key) = (&self.msg, self.key.as_ref().map(|k| k.handler.as_str()));
                tracing::warn!(queue = %msg.queue, message_id = %msg.id, key, "lease lost before completion; discarding this result");
                // What this run offloaded was written under its own fencing token, beside the
                // current owner's payloads: nobody will point at it.
                tokio::spawn(async move {
                    for m in outbox {
                        shared.payloads.cleanup(&m.body, &m.attributes).await;
                    }
                });
                self.let_lapse(Event::LostLease).await
            }
            Err(e) => {
                if let Some(held_back) = self.backend_error(Operation::Complete, e.is_timeout()) {
                    let msg = &self.msg;
                    tracing::error!(queue = %msg.queue, message_id = %msg.id, error = %e, held_back, "could not record completion; the message will come back");
                }
                self.back_off().await
            }
        }
    }

    /// An outbox that cannot be sent: too large with no payload store is a reject (the handler
    /// would produce it again), an unreachable store a put-back.
    async fn unsendable(mut self, lease: Lease, error: OffloadError) -> Fate {
        self.lease = Some(lease);
        match error {
            OffloadError::TooLarge(reason) => self.dead_letter(format!("outbox: {reason}")).await,
            OffloadError::Unavailable(reason) => {
                if let Some(held_back) = self.backend_error(Operation::PayloadStore, false) {
                    let msg = &self.msg;
                    tracing::warn!(queue = %msg.queue, message_id = %msg.id, %reason, held_back, "outbox payload not stored; putting the message back");
                }
                self.back_off().await
            }
        }
    }

    /// Sends a completed key's outbox, records it sent, and deletes the message. If the send
    /// fails the message is put back: its redelivery finds the key completed with the outbox
    /// still pending and sends it then.
    pub(crate) async fn finish(mut self, outbox: Vec<Outgoing>) -> Fate {
        self.stop_heartbeat().await;
        if !outbox.is_empty() {
            let shared = Arc::clone(&self.queue.shared);
            let mut step = self.span.step("outbox send");
            let count = outbox.len() as i64;
            step.set(|| vec![KeyValue::new("messaging.batch.message_count", count)]);
            let sent = shared.source.send(&outbox).await;
            if let Err(e) = &sent {
                step.error("queue_send", e);
            }
            drop(step);
            if let Err(e) = sent {
                if e.is_permanent() {
                    // Sent again, it would be refused again: the message goes to the
                    // dead-letter queue with SQS's word, the outbox stays recorded unsent.
                    let reason = format!("the outbox could not be sent: {e}");
                    return self.dead_letter(reason).await;
                }
                if let Some(held_back) = self.backend_error(Operation::Send, e.is_timeout()) {
                    let msg = &self.msg;
                    tracing::warn!(queue = %msg.queue, message_id = %msg.id, error = %e, held_back, "outbox send failed; will resend on redelivery");
                }
                return self.back_off().await;
            }
            self.record(Event::OutboxSent(outbox.len() as u64));
            if let Some(key) = &self.key {
                (shared.outbox_marks)
                    .mark(&shared.store, &shared.stats, &key.scoped)
                    .await;
            }
        }
        let Delivery {
            queue,
            msg,
            payload_verified,
            ..
        } = self;
        queue.acker.ack(msg.receipt);
        // The work is recorded complete, so a later copy of this message is acked without its
        // payload: the payload can go, if this delivery verified it (a duplicate, or a message
        // pointing at someone else's payload, deletes nothing).
        if payload_verified {
            let payloads = Arc::clone(&queue.shared.payloads);
            tokio::spawn(async move { payloads.cleanup(&msg.body, &msg.attributes).await });
        }
        Fate::Gone
    }

    /// Makes the message visible again after `delay`, releasing the lease, counting it as `why`
    /// (a busy key, a release at shutdown, an outage). Not an attempt.
    pub(crate) async fn put_back(self, delay: Duration, why: Event) -> Fate {
        self.put_back_as(delay, why, Released::NotRun).await
    }

    async fn put_back_as(mut self, delay: Duration, why: Event, ran: Released) -> Fate {
        self.stop_heartbeat().await;
        self.release(ran).await;
        self.record(why);
        let (queue, msg) = (&self.queue, &self.msg);
        if let Err(e) = queue
            .shared
            .source
            .change_visibility(&queue.config.name, &msg.receipt, delay)
            .await
        {
            // It comes back anyway when its visibility timeout lapses.
            if let Some(held_back) = self.backend_error(Operation::ChangeVisibility, e.is_timeout())
            {
                tracing::warn!(queue = %msg.queue, message_id = %msg.id, error = %e, held_back, "could not set the retry delay");
            }
        }
        Fate::Back
    }

    /// Puts the message back on the retry schedule without using up an attempt: the message
    /// is fine, but something it needs (a store, the queue) did not answer.
    pub(crate) async fn back_off(self) -> Fate {
        let delay = self.backoff_delay(0);
        self.put_back(delay, Event::Deferred).await
    }

    /// A failed attempt: put back after the backoff (at least `asked_secs`), or dead-lettered
    /// once the plugin's attempts are used up. Attempts count handler runs on the key (see
    /// [`Delivery::attempt`]), so put-backs for other reasons never use them up.
    pub(crate) async fn retry(self, reason: String, asked_secs: u32) -> Fate {
        let delivery = match self.unless_lost().await {
            Ok(delivery) => delivery,
            Err(fate) => return fate,
        };
        let attempt = delivery.attempt();
        if attempt >= delivery.plugin.max_attempts() {
            // The lease was confirmed just above: no second round trip to confirm it again.
            let reason = format!("gave up after {attempt} attempts: {reason}");
            return delivery.send_dead_letter(reason).await;
        }
        let (msg, plugin) = (&delivery.msg, &delivery.plugin);
        tracing::info!(queue = %msg.queue, message_id = %msg.id, plugin = plugin.name(), version = plugin.version(), attempt, %reason, "will retry");
        let policy = &delivery.shared().config.retry;
        let delay = backoff::delay(policy, attempt, asked_secs);
        let ran = if delivery.lease.is_some() {
            Released::Failed
        } else {
            Released::NotRun
        };
        delivery.put_back_as(delay, Event::Retried, ran).await
    }

    /// Sends the message to the dead-letter queue with `reason`, then deletes it and releases
    /// the lease; if the send fails, puts it back. A delivery whose lease was lost meanwhile
    /// is not dead-lettered: the new owner's run decides.
    pub(crate) async fn dead_letter(self, reason: String) -> Fate {
        match self.unless_lost().await {
            Ok(delivery) => delivery.send_dead_letter(reason).await,
            Err(fate) => fate,
        }
    }

    /// Dead-letters a delivery whose lease (if any) was just confirmed.
    async fn send_dead_letter(mut self, reason: String) -> Fate {
        self.stop_heartbeat().await;
        let (msg, plugin) = (&self.msg, &self.plugin);
        let verdict = Verdict {
            plugin: plugin.name(),
            version: plugin.version(),
            attempts: self.attempt(),
            reason: &reason,
        };
        let letter = deadletter::letter(msg, &self.queue.config.dead_letter, &verdict);
        tracing::warn!(
            queue = %msg.queue, message_id = %msg.id, plugin = verdict.plugin, version = verdict.version,
            attempts = verdict.attempts, reason = %reason, "dead-lettering"
        );
        self.span.error("dead_lettered", &reason);
        let shared = Arc::clone(&self.queue.shared);
        let mut step = self.span.step("dead letter send");
        let sent = shared.source.send(&[letter]).await;
        if let Err(e) = &sent {
            step.error("queue_send", e);
        }
        drop(step);
        if let Err(e) = sent {
            if e.is_permanent() {
                // Nothing qhost can send will be taken: leave the message to the queue's own
                // redrive policy, looking again only at the longest retry delay.
                tracing::error!(queue = %msg.queue, message_id = %msg.id, error = %e, "the dead-letter queue refuses this message; leaving it to the queue's redrive policy");
                let delay = shared.config.retry.max;
                return self.put_back(delay, Event::Deferred).await;
            }
            if let Some(held_back) = self.backend_error(Operation::Send, e.is_timeout()) {
                tracing::error!(queue = %msg.queue, message_id = %msg.id, error = %e, held_back, "dead-letter send failed; keeping the message");
            }
            return self.back_off().await;
        }
        self.record(Event::DeadLettered);
        self.release(Released::GaveUp).await;
        self.queue.acker.ack(self.msg.receipt);
        Fate::Gone
    }

    /// The lease passed to another worker, whose result stands: this one is dropped, and the
    /// message comes back when its visibility lapses, to be found completed or leased.
    pub(crate) async fn let_lapse(mut self, why: Event) -> Fate {
        self.stop_heartbeat().await;
        self.record(why);
        Fate::Back
    }
}
