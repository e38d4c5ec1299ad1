//! The last stage of a delivery: its key's lease held and its heartbeat running. Only here can
//! the handler's result be committed (`ack`), and only here is there a fencing token to hand
//! the handler. Every other ending stops the heartbeat, settles the lease (released, counted a
//! failure, or left to lapse) and then ends as the [`Delivery`] it wraps.

use std::sync::Arc;
use std::time::Duration;

use super::backoff;
use super::delivery::{Delivery, Fate, Key, Lettered};
use super::heartbeat::Heartbeat;
use super::outbox;
use super::route::Routed;
use super::tap::{Ended, RunEnd};
use crate::faults::Operation;
use crate::flow::HeldSlot;
use crate::idempotency::{Committed, Completion, IdempotencyError, Lease, Released};
use crate::kv::{Dropped, StateCommit};
use crate::message::Outgoing;
use crate::payload::OffloadError;
use crate::plugin::Plugin;
use crate::stats::Event;
use opentelemetry::KeyValue;

/// How soon a message whose commit met changed state comes back to run again.
const STATE_CONFLICT_DELAY: Duration = Duration::from_secs(1);

/// Deletes what a run that will not complete offloaded: it was written under its own fencing
/// token, beside the payloads of whoever completes, so nobody will point at it.
fn cleanup_offloaded(shared: &Arc<super::context::Shared>, outbox: Vec<Outgoing>) {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        for m in outbox {
            shared.payloads.cleanup(&m.body, &m.attributes).await;
        }
    });
}

/// A delivery under its key's lease.
#[derive(Debug)]
#[must_use = "a delivery ends through one of its fate methods"]
pub(crate) struct Leased {
    delivery: Delivery,
    plugin: Arc<Plugin>,
    key: Key,
    lease: Lease,
    heartbeat: Option<Heartbeat>,
    /// Its flow key, when its plugin controls flow.
    flow: Option<String>,
    /// The flow slot it holds (`[flow] max-concurrency`), given back when it drops: as the
    /// delivery ends, or as the handler's call ends when messages of its key wait here.
    slot_held: Option<HeldSlot>,
    /// The sha256 of the body its handler ran on, recorded with the completed key.
    ran_on: Option<String>,
    /// A deadline lower than the plugin's, from the message.
    time_limit: Option<Duration>,
}

impl Leased {
    /// `routed` under `lease`, holding `slot` if its flow needs one, its heartbeat started
    /// (unless the queue runs without one).
    pub(crate) fn new(routed: Routed, lease: Lease, slot: Option<HeldSlot>) -> Self {
        let Routed {
            delivery,
            plugin,
            key,
            time_limit,
            flow,
            ..
        } = routed;
        let held = slot.as_ref().and_then(HeldSlot::slot);
        let receipt = &delivery.msg().handle;
        let heartbeat = Heartbeat::start(delivery.queue(), receipt, &lease, held);
        let token = lease.fencing_token;
        let span = delivery.span();
        span.set(|| vec![KeyValue::new("qhost.fencing_token", token as i64)]);
        Leased {
            delivery,
            plugin,
            key,
            lease,
            heartbeat,
            flow,
            slot_held: slot,
            ran_on: None,
            time_limit,
        }
    }

    /// Holds `slot`, a flow slot taken after the lease (its key's turn came while it waited):
    /// the heartbeat extends it from now on with the lease.
    pub(crate) fn hold_slot(&mut self, slot: HeldSlot) {
        let receipt = &self.delivery.msg().handle;
        let queue = self.delivery.queue();
        self.heartbeat = Heartbeat::start(queue, receipt, &self.lease, slot.slot());
        self.slot_held = Some(slot);
    }

    /// Gives its flow slot back as the handler's call ends when messages of its key wait on
    /// this host for one: what a key's limit bounds is its handler's runs (a partner's
    /// concurrent calls), and what remains (the commit, the outbox, the delete's batch) need
    /// not keep them waiting. With none waiting, the slot goes back as the delivery ends, in a
    /// batch with the others ending then (fewer store calls).
    pub(crate) fn call_ended(&mut self) {
        let shared = self.delivery.shared();
        let waited_for = (self.slot_held.as_ref())
            .and_then(HeldSlot::slot)
            .is_some_and(|slot| shared.lines.waits_for(&slot.key));
        if waited_for {
            self.slot_held = None;
            let receipt = &self.delivery.msg().handle;
            let queue = self.delivery.queue();
            self.heartbeat = Heartbeat::start(queue, receipt, &self.lease, None);
        }
    }

    /// The message's own deadline, when lower than the plugin's.
    pub(crate) fn time_limit(&self) -> Option<Duration> {
        self.time_limit
    }

    /// The delivery it wraps.
    pub(crate) fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// The delivery, to note what it learnt (a verified payload).
    pub(crate) fn delivery_mut(&mut self) -> &mut Delivery {
        &mut self.delivery
    }

    /// Notes the version that gave the answer (a canary's, when it ran on one): its outbox is
    /// stamped with it.
    pub(crate) fn ran_with(&mut self, plugin: Arc<Plugin>) {
        self.plugin = plugin;
    }

    /// Its plugin.
    pub(crate) fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }

    /// Its flow key, when its plugin controls flow.
    pub(crate) fn flow(&self) -> Option<&str> {
        self.flow.as_deref()
    }

    /// Its key.
    pub(crate) fn key(&self) -> &Key {
        &self.key
    }

    /// The fencing token of its lease.
    pub(crate) fn fencing_token(&self) -> u64 {
        self.lease.fencing_token
    }

    /// Notes the sha256 of the body the handler runs on.
    pub(crate) fn running_on(&mut self, sha256: String) {
        self.ran_on = Some(sha256);
    }

    /// Whether a run on its key has failed before (a retry, a trap, a timeout).
    pub(crate) fn has_failed_before(&self) -> bool {
        self.lease.failures > 0
    }

    /// This delivery's attempt: the handler runs on its key so far, this one included.
    fn attempt(&self) -> u32 {
        self.lease.failures + 1
    }

    /// Counts the writes of a run whose outcome keeps none of them.
    pub(crate) fn drop_state(&self, why: Dropped, state: &StateCommit) {
        let writes = state.writes() as u64;
        if writes > 0 {
            self.plugin.kv_counts().dropped(why, writes);
        }
    }

    /// Stops the heartbeat, waiting for an extension under way.
    async fn stop_heartbeat(&mut self) {
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.stop().await;
        }
    }

    /// Stops the heartbeat and gives the lease back, counting the run by `why`; the delivery
    /// is then to end without its lease.
    async fn settle(mut self, why: Released) -> Delivery {
        self.stop_heartbeat().await;
        self.delivery.release(&self.lease, why).await;
        self.delivery
    }

    /// Makes the message visible again after `delay`, releasing the lease unrun.
    pub(crate) async fn put_back(self, delay: Duration, why: Event) -> Fate {
        self.settle(Released::NotRun)
            .await
            .put_back(delay, why)
            .await
    }

    /// Puts the message back on the retry schedule, releasing the lease unrun: something it
    /// needs did not answer.
    pub(crate) async fn back_off(self) -> Fate {
        self.settle(Released::NotRun).await.back_off().await
    }

    /// The lease passed to another worker: drop this result, keep the message hidden.
    pub(crate) async fn let_lapse(mut self, why: Event) -> Fate {
        self.stop_heartbeat().await;
        self.delivery.let_lapse(why)
    }

    /// Whether the lease is still this delivery's. A failure or reject reached after losing it
    /// is not this delivery's to act on: the new owner's run stands.
    async fn unless_lost(self) -> Result<Self, Fate> {
        let ttl = self.delivery.queue().config.visibility;
        match self.delivery.shared().store.extend(&self.lease, ttl).await {
            Ok(()) => Ok(self),
            Err(IdempotencyError::LeaseLost(key)) => {
                tracing::warn!(%key, "lease lost while the handler ran; leaving the message to its new owner");
                Err(self.let_lapse(Event::LostLease).await)
            }
            Err(e) => {
                let timed_out = e.is_timeout();
                if let Some(held_back) = self.delivery.backend_error(Operation::Extend, timed_out) {
                    tracing::warn!(error = %e, held_back, "cannot confirm the lease; putting the message back");
                }
                Err(self.back_off().await)
            }
        }
    }

    /// A failed attempt: put back after the backoff (at least `asked_secs`), or dead-lettered
    /// once the plugin's attempts are used up. Attempts count handler runs on the key, so
    /// put-backs for other reasons never use them up.
    pub(crate) async fn retry(self, reason: String, asked_secs: u32) -> Fate {
        let leased = match self.unless_lost().await {
            Ok(leased) => leased,
            Err(fate) => return fate,
        };
        let attempt = leased.attempt();
        if attempt >= leased.plugin.manifest.limits.max_attempts {
            // The lease was confirmed just above: no second round trip to confirm it again.
            let reason = format!("gave up after {attempt} attempts: {reason}");
            return leased.send_dead_letter(reason).await;
        }
        let plugin = &leased.plugin;
        tracing::info!(plugin = %plugin.name, version = %plugin.version, attempt, %reason, "will retry");
        let delay = backoff::delay(&leased.delivery.shared().config.retry, attempt, asked_secs);
        let msg = leased.delivery.msg();
        let retrying = crate::recent::Retrying {
            message_id: msg.id.clone(),
            plugin: plugin.name.clone(),
            attempt,
            reason,
            back_at_ms: crate::message::now_ms() + delay.as_millis() as u64,
        };
        (leased.delivery.shared().recent).note_retry(&msg.queue, retrying);
        (leased.settle(Released::Failed).await)
            .put_back(delay, Event::Retried)
            .await
    }

    /// Dead-letters the message with `reason`, unless the lease was lost meanwhile (the new
    /// owner's run decides).
    pub(crate) async fn dead_letter(self, reason: String) -> Fate {
        match self.unless_lost().await {
            Ok(leased) => leased.send_dead_letter(reason).await,
            Err(fate) => fate,
        }
    }

    /// Dead-letters a delivery whose lease was just confirmed: once sent, the key is
    /// forgotten (a redriven copy starts afresh); if not, the message is kept, released unrun.
    async fn send_dead_letter(mut self, reason: String) -> Fate {
        self.stop_heartbeat().await;
        let attempts = self.attempt();
        match self.delivery.send_dead_letter(&reason, attempts).await {
            Lettered::Sent => {
                self.delivery.record(Event::DeadLettered);
                self.delivery.gave_up(&reason);
                self.settle(Released::GaveUp).await.delete()
            }
            Lettered::Kept(delay) => self.put_back(delay, Event::Deferred).await,
        }
    }

    /// The handler acked: large outbox messages are offloaded, the outbox (with the format's
    /// own messages, and the result value it records) and the run's state are committed
    /// with the completed record, then the outbox is sent (unless the commit wrote it into its
    /// queues, as the PostgreSQL store beside pgmq does) and the message deleted. A commit refused
    /// because state the run read has changed puts the message back to run again.
    pub(crate) async fn ack(
        mut self,
        outbox: Vec<Outgoing>,
        result: Option<String>,
        state: StateCommit,
    ) -> Fate {
        self.stop_heartbeat().await;
        let shared = Arc::clone(&self.delivery.queue().shared);
        let (plugin, key) = (&self.plugin.name, &self.key.handler);
        let told = self
            .delivery
            .tapped()
            .then(|| (result.clone(), state.clone()));
        let (outbox, result) = self.delivery.on_ack(outbox, plugin, key, result);
        let mut outbox = outbox::stamp(&self.key.handler, &self.plugin, outbox);
        self.delivery
            .span()
            .propagate(&mut outbox, &shared.config.send_shape());
        // Large messages are offloaded before the outbox is recorded, so the completed record
        // holds pointers, and a re-send after a crash reuses the same payload keys.
        let token = self.lease.fencing_token;
        let offloaded = match outbox.is_empty() {
            true => Ok(outbox),
            false => {
                let namespace = &shared.config.namespace;
                Box::pin(shared.payloads.offload_all(namespace, token, outbox)).await
            }
        };
        let outbox = match offloaded {
            Ok(outbox) => outbox,
            Err(e) => {
                let why = match e {
                    OffloadError::TooLarge(_) => Dropped::OutboxRejected,
                    OffloadError::Unavailable(_) => Dropped::Unavailable,
                };
                self.drop_state(why, &state);
                return Box::pin(self.unsendable(e)).await;
            }
        };
        let kv = Arc::clone(self.plugin.kv_counts());
        let writes = state.writes() as u64;
        let Leased {
            delivery,
            plugin,
            key,
            lease,
            ran_on,
            ..
        } = self;
        let held = (!state.is_empty()).then(|| lease.clone());
        let completion = Completion {
            lease,
            outbox: outbox.clone(),
            result: result.clone(),
            window: plugin.manifest.dedup_window(),
            digest: ran_on,
            state,
        };
        let step = delivery.span().step("complete");
        let completed = shared.completer.complete(completion).await;
        drop(step);
        let dropped = |why| {
            if writes > 0 {
                kv.dropped(why, writes);
            }
        };
        match completed {
            Ok(committed) => {
                kv.committed(writes);
                if let Some((result, state)) = told {
                    delivery.tell(|| RunEnd {
                        outbox: outbox.clone(),
                        result,
                        state,
                        ..RunEnd::bare(Some(key.handler.clone()), Ended::Ack)
                    });
                }
                delivery.record(Event::Acked);
                if committed == Committed::Delivered {
                    // The commit wrote the outbox into its queues: nothing is pending.
                    delivery.record(Event::OutboxSent(outbox.len() as u64));
                    return delivery.done();
                }
                delivery.finish(outbox, result, &key).await
            }
            Err(IdempotencyError::Conflict(_)) => {
                dropped(Dropped::Conflict);
                tracing::info!(key = %key.handler, "state the handler read changed before it completed; running it again");
                cleanup_offloaded(&shared, outbox);
                let put_back = async move {
                    if let Some(lease) = held {
                        delivery.release(&lease, Released::NotRun).await;
                    }
                    delivery.put_back(STATE_CONFLICT_DELAY, Event::Busy).await
                };
                Box::pin(put_back).await
            }
            Err(IdempotencyError::LeaseLost(_)) => {
                dropped(Dropped::LeaseLost);
                tracing::warn!(key = %key.handler, "lease lost before completion; discarding this result");
                cleanup_offloaded(&shared, outbox);
                delivery.let_lapse(Event::LostLease)
            }
            // Not counted: the completion may have landed (its writes are then carried out by
            // the message's next delivery) or not (the run runs again).
            Err(e) => {
                if let Some(held_back) = delivery.backend_error(Operation::Complete, e.is_timeout())
                {
                    tracing::error!(error = %e, held_back, "could not record completion; the message will come back");
                }
                Box::pin(delivery.back_off()).await
            }
        }
    }

    /// An outbox that cannot be sent: too large with no payload store is a reject (the handler
    /// would produce it again), an unreachable store a put-back.
    async fn unsendable(self, error: OffloadError) -> Fate {
        match error {
            OffloadError::TooLarge(reason) => self.dead_letter(format!("outbox: {reason}")).await,
            OffloadError::Unavailable(reason) => {
                let delivery = self.delivery();
                if let Some(held_back) = delivery.backend_error(Operation::PayloadStore, false) {
                    tracing::warn!(%reason, held_back, "outbox payload not stored; putting the message back");
                }
                self.back_off().await
            }
        }
    }
}
