//! One received message through its life, in three stages, each its own type:
//!
//! - [`Delivery`]: the message as received, with the plugin it routes to (loaded, or a name);
//! - `Routed` (in `route`): a loaded plugin and the key to lease;
//! - `Leased` (in `leased`): the lease held and its heartbeat running.
//!
//! Each stage ends through exactly one of its consuming methods, so "one fate per delivery" is
//! a type guarantee: every path either finishes the message or leaves it in the queue to come
//! back; none drops it. What needs a lease (ack, the fencing token, running the handler) exists
//! only on `Leased`; a later stage's fates release or confirm its lease and end as this one's.
//!
//! | method          | the message                    | the lease (on `Leased`) | an attempt         |
//! |-----------------|--------------------------------|-------------------------|--------------------|
//! | `ack`           | outbox committed, then finish  | becomes completed       | —                  |
//! | `finish`        | outbox sent, deleted           | (already completed)     | —                  |
//! | [`put_back`]    | visible again after a delay    | released                | no                 |
//! | [`back_off`]    | put back on the retry schedule | released                | no (deferred)      |
//! | `retry`         | put back, or dead-lettered     | released, a failure     | yes (a handler run) |
//! | [`dead_letter`] | sent to the DLQ, deleted       | released                | —                  |
//! | [`let_lapse`]   | left to its visibility timeout | (lost to another)       | —                  |
//!
//! A leased stage first stops the heartbeat and waits for an extension under way, so nothing
//! it does to the message can be overtaken by a late extension; its `retry` and `dead_letter`
//! first confirm the lease is still held: a result reached after losing it is dropped
//! (`let_lapse`), since the key's new owner decides.
//!
//! [`put_back`]: Delivery::put_back
//! [`back_off`]: Delivery::back_off
//! [`dead_letter`]: Delivery::dead_letter
//! [`let_lapse`]: Delivery::let_lapse

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::backoff;
use super::context::{QueueCtx, Shared};
use super::deadletter::{self, Verdict};
use super::part::{Part, PartFate};
use super::tap::{Ended, RunEnd};
use crate::faults::Operation;
use crate::flow::fair::Ticket;
use crate::format::Effects;
use crate::idempotency::{IdempotencyError, Lease, Released};
use crate::message::{Outgoing, Received};
use crate::metrics::InFlight;
use crate::payload::Body;
use crate::plugin::Plugin;
use crate::recent::DeadLetter;
use crate::stats::Event;
use crate::traces::MessageSpan;
use opentelemetry::KeyValue;
use tracing::Instrument as _;

/// The log span of one delivery, carrying its ids: every line logged while the delivery is
/// handled (its own, the lease's, the handler's) is inside it, so none repeats them. It is at
/// ERROR level so that any filter that lets a delivery's warning or error through shows whose
/// it is (`QHOST_LOG=warn` included); the handler call's span inside it stays at INFO.
pub(crate) fn log_span(msg: &Received) -> tracing::Span {
    tracing::error_span!("delivery", queue = %msg.queue, message_id = %msg.id)
}

/// Where a message stands once the host is done with this delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Deleted or dead-lettered: it will not come back.
    Gone,
    /// Still in the queue: it comes back after a delay or when its visibility lapses.
    Back,
    /// Kept by this host, hidden, waiting for its flow key's turn (`waiting`): its delivery
    /// goes on in another task when the turn comes.
    Waiting,
}

impl Fate {
    /// Ends the run's `ticket` (its count in its key's share of this host's slots) as the
    /// delivery ended: one that went to wait gives it back unrun.
    pub(crate) fn end_ticket(self, ticket: Option<Ticket>) {
        if let Some(ticket) = ticket
            && self == Fate::Waiting
        {
            ticket.unrun();
        }
    }

    /// `Back` when `back`, else `Gone`.
    fn of(back: bool) -> Fate {
        if back { Fate::Back } else { Fate::Gone }
    }
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

impl PluginRef {
    /// The plugin's name.
    pub(crate) fn name(&self) -> &str {
        match self {
            PluginRef::Loaded(p) => &p.name,
            PluginRef::Named(name) => name,
        }
    }

    /// Its version, when one is loaded.
    pub(crate) fn version(&self) -> Option<&str> {
        match self {
            PluginRef::Loaded(p) => Some(&p.version),
            PluginRef::Named(_) => None,
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

/// How sending a dead letter went, for the stage that asked to decide what its lease becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lettered {
    /// Sent: the message is deleted.
    Sent,
    /// Not sent: the message is to be put back, as deferred, for this long.
    Kept(Duration),
}

/// One received message, before any lease.
#[derive(Debug)]
#[must_use = "a delivery ends through one of its fate methods"]
pub(crate) struct Delivery {
    queue: Arc<QueueCtx>,
    msg: Received,
    /// Its body, classified when it was read.
    body: Body,
    plugin: PluginRef,
    /// Whether this delivery fetched and verified the payload its pointer names: only then
    /// may finishing it delete that payload.
    payload_verified: bool,
    /// Counts it in flight until it ends.
    _in_flight: InFlight,
    /// Its trace span, ended with it.
    span: MessageSpan,
    /// What its format commits with its completion besides the handler's outbox.
    effects: Option<Arc<dyn Effects>>,
    /// The message this delivery is one run of, when it holds several (`parts`).
    part: Option<Part>,
    /// Whether its queue's tap was told how it ended (only ever set on a tapped queue).
    told: AtomicBool,
}

impl Delivery {
    /// A delivery of `msg` just received from `queue`, for `plugin`: counted received.
    pub(crate) fn received(
        queue: Arc<QueueCtx>,
        msg: Received,
        body: Body,
        plugin: PluginRef,
    ) -> Self {
        let delivery = Delivery::new(queue, msg, body, plugin);
        delivery.record(Event::Received);
        delivery
    }

    /// A delivery of `msg` from `queue` that was counted received already (a FIFO group's
    /// later message, put back unrun with its group).
    pub(crate) fn new(queue: Arc<QueueCtx>, msg: Received, body: Body, plugin: PluginRef) -> Self {
        let in_flight = queue.shared.metrics.in_flight();
        let shared = &queue.shared;
        let system = shared.config.source.messaging_system();
        let span = MessageSpan::start(shared.tracer.as_ref(), system, &msg);
        span.set(|| {
            vec![
                KeyValue::new("qhost.plugin", plugin.name().to_string()),
                KeyValue::new(
                    "qhost.plugin.version",
                    plugin.version().unwrap_or("-").to_string(),
                ),
            ]
        });
        Delivery {
            span,
            _in_flight: in_flight,
            queue,
            msg,
            body,
            plugin,
            payload_verified: false,
            effects: None,
            part: None,
            told: AtomicBool::new(false),
        }
    }

    /// Whether its queue has a tap (what a run tells it is then worth keeping).
    pub(crate) fn tapped(&self) -> bool {
        self.queue.tap.is_some()
    }

    /// Tells its queue's tap, when it has one, how this run ended (`end` is built only then).
    /// The first telling stands: a stage that knows more (the handler's answer) tells before
    /// the fate that carries it out, whose own telling is the fallback.
    pub(crate) fn tell(&self, end: impl FnOnce() -> RunEnd) {
        if let Some(tap) = &self.queue.tap
            && !self.told.swap(true, Ordering::Relaxed)
        {
            tap.tell(&self.msg.id, end());
        }
    }

    /// Makes this delivery one run of a message that holds several: its fates are reported to
    /// `part`, and the message takes its fate once every part has ended.
    pub(crate) fn as_part(&mut self, part: Option<Part>) {
        self.part = part;
    }

    /// The part of a message this delivery is, if it is one.
    pub(crate) fn part(&self) -> Option<&Part> {
        self.part.as_ref()
    }

    /// Whether it may wait on this host for its flow key's turn (`waiting`) rather than be put
    /// back: not a part of a message (its message's parts end one after another), nor one of a
    /// FIFO group's (the group's later messages wait behind it), and only where a heartbeat
    /// keeps it hidden while it waits.
    pub(crate) fn may_wait(&self) -> bool {
        let in_group = self.msg.group_id.is_some() && self.queue.config.name.ends_with(".fifo");
        self.part.is_none() && !in_group && self.queue.config.heartbeat
    }

    /// Notes what its format commits with its completion.
    pub(crate) fn carries(&mut self, effects: Option<Arc<dyn Effects>>) {
        self.effects = effects;
    }

    /// At an ack: the outbox to commit (the handler's, with the format's own messages after
    /// it, keyed under `plugin` and `key`) and the result value to commit with it.
    pub(crate) fn on_ack(
        &self,
        outbox: Vec<Outgoing>,
        plugin: &str,
        key: &str,
        result: Option<String>,
    ) -> (Vec<Outgoing>, Option<String>) {
        match &self.effects {
            Some(effects) => effects.on_ack(outbox, plugin, key, result),
            None => (outbox, None),
        }
    }

    /// The message was given up after running: its format records that where a caller waits
    /// (in the background; a record that cannot be written is logged, and the run stands).
    pub(crate) fn gave_up(&self, reason: &str) {
        if let Some(write) = self.effects.as_ref().and_then(|e| e.gave_up(reason)) {
            self.queue.shared.tasks.spawn(write.in_current_span());
        }
    }

    /// Writes a committed result value where a caller waits on it, before the outbox goes out.
    async fn write_result(&self, value: String) -> Result<(), crate::format::EffectError> {
        let Some(effects) = &self.effects else {
            return Ok(());
        };
        let step = self.span.step("result record");
        let written = effects.write_result(&value).await;
        drop(step);
        written
    }

    /// Its body, classified when it was read.
    pub(crate) fn body(&self) -> &Body {
        &self.body
    }

    /// Whether this delivery fetched and verified its payload.
    pub(crate) fn is_payload_verified(&self) -> bool {
        self.payload_verified
    }

    /// Notes that this delivery fetched and verified its payload.
    pub(crate) fn payload_verified(&mut self) {
        self.payload_verified = true;
    }

    /// The message.
    pub(crate) fn msg(&self) -> &Received {
        &self.msg
    }

    /// Its queue.
    pub(crate) fn queue(&self) -> &Arc<QueueCtx> {
        &self.queue
    }

    /// The host's shared parts.
    pub(crate) fn shared(&self) -> &Shared {
        &self.queue.shared
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
        backoff::delay(policy, self.msg.delivery_count, asked_secs)
    }

    /// Writes a completed key's result value (where a caller waits on it), sends its outbox,
    /// records both done under `key`, and deletes the message. If either fails the message is put back: its
    /// redelivery finds the key completed with them still pending and carries them out then.
    /// The record goes first: while the result backend is down nothing is sent, so its outage
    /// costs no outbox copies.
    pub(crate) async fn finish(
        self,
        outbox: Vec<Outgoing>,
        result: Option<String>,
        key: &Key,
    ) -> Fate {
        if outbox.is_empty() && result.is_none() {
            return self.done();
        }
        // Boxed: its writes and sends make a future of several KiB, which every message's task
        // would otherwise carry (and copy as it is spawned) whether it sends anything or not.
        Box::pin(self.finish_pending(outbox, result, key)).await
    }

    /// [`Delivery::finish`] with a result or an outbox to carry out.
    async fn finish_pending(
        self,
        outbox: Vec<Outgoing>,
        result: Option<String>,
        key: &Key,
    ) -> Fate {
        let pending = !outbox.is_empty() || result.is_some();
        if let Some(value) = result
            && let Err(e) = self.write_result(value).await
        {
            tracing::warn!(error = %e, "could not write the result record; will write it on redelivery");
            return self.back_off().await;
        }
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
                    tracing::warn!(error = %e, held_back, "outbox send failed; will resend on redelivery");
                }
                return self.back_off().await;
            }
            self.record(Event::OutboxSent(outbox.len() as u64));
        }
        if pending {
            let shared = &self.queue.shared;
            (shared.outbox_marks)
                .mark(shared.store.clone(), &shared.stats, &key.scoped)
                .await;
        }
        self.done()
    }

    /// Deletes the message once its work is recorded complete (or reports this part done). A
    /// later copy of this message is then acked without its payload: the payload can go, if
    /// this delivery verified it (a duplicate, or a message pointing at someone else's payload,
    /// deletes nothing).
    pub(crate) fn done(self) -> Fate {
        if let Some(part) = &self.part {
            return Fate::of(part.end(PartFate::Done));
        }
        let Delivery {
            queue,
            msg,
            body,
            payload_verified,
            ..
        } = self;
        queue.acker.ack(msg.handle);
        if let (true, Body::Pointer(pointer)) = (payload_verified, body) {
            let payloads = Arc::clone(&queue.shared.payloads);
            let attributes = msg.attributes;
            tokio::spawn(async move { payloads.cleanup_pointer(&pointer, &attributes).await });
        }
        Fate::Gone
    }

    /// Hands the message to the ack batcher. A dead letter keeps any payload it points at.
    pub(crate) fn delete(self) -> Fate {
        if let Some(part) = &self.part {
            return Fate::of(part.end(PartFate::Done));
        }
        self.queue.acker.ack(self.msg.handle);
        Fate::Gone
    }

    /// Makes the message visible again after `delay`, counting it as `why` (a busy key, a
    /// release at shutdown, an outage). Not an attempt.
    pub(crate) async fn put_back(self, delay: Duration, why: Event) -> Fate {
        self.tell(|| {
            let why = why.outcome().unwrap_or("put back").replace('_', " ");
            RunEnd::bare(None, Ended::PutBack(why))
        });
        self.record(why);
        self.hide(delay).await
    }

    /// Makes the message visible again after `delay` (or reports this part back), counting
    /// nothing: what the message's parts ended as was counted as each ended.
    pub(crate) async fn hide(self, delay: Duration) -> Fate {
        if let Some(part) = &self.part {
            return Fate::of(part.end(PartFate::Back(delay)));
        }
        if let Err(e) = self.queue.put_backs.put_back(&self.msg.handle, delay).await {
            // It comes back anyway when its visibility timeout lapses.
            if let Some(held_back) = self.backend_error(Operation::ChangeVisibility, e.is_timeout())
            {
                tracing::warn!(error = %e, held_back, "could not set the retry delay");
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

    /// Sends the message to the dead-letter queue with `reason`, then deletes it; if the send
    /// fails, puts it back.
    pub(crate) async fn dead_letter(self, reason: String) -> Fate {
        let attempts = self.msg.delivery_count;
        match self.send_dead_letter(&reason, attempts).await {
            Lettered::Sent => {
                self.record(Event::DeadLettered);
                self.delete()
            }
            Lettered::Kept(delay) => self.put_back(delay, Event::Deferred).await,
        }
    }

    /// Sends the dead letter for `attempts` handler runs, and says how it went, for the stage
    /// that asked to end the delivery accordingly.
    pub(crate) async fn send_dead_letter(&self, reason: &str, attempts: u32) -> Lettered {
        self.tell(|| RunEnd::bare(None, Ended::Refused(reason.to_string())));
        if let Some(part) = &self.part {
            // The message's one dead letter names every part's reason (`parts`).
            part.end(PartFate::Dead(reason.to_string()));
            return Lettered::Sent;
        }
        let (msg, plugin) = (&self.msg, &self.plugin);
        let verdict = Verdict {
            plugin: plugin.name(),
            version: plugin.version(),
            attempts,
            reason,
        };
        let letter = deadletter::letter(msg, &self.queue.config.dead_letter, &verdict);
        tracing::warn!(
            plugin = verdict.plugin, version = verdict.version,
            attempts = verdict.attempts, reason = %reason, "dead-lettering"
        );
        self.span.error("dead_lettered", reason);
        let shared = &self.queue.shared;
        let mut step = self.span.step("dead letter send");
        let sent = shared.source.send(&[letter]).await;
        if let Err(e) = &sent {
            step.error("queue_send", e);
        }
        drop(step);
        let e = match sent {
            Ok(ids) => {
                let id = ids.into_iter().next();
                let note = DeadLetter::of(msg, verdict.plugin, reason, attempts).copied_as(id);
                shared.recent.note(note);
                return Lettered::Sent;
            }
            Err(e) => e,
        };
        if e.is_permanent() {
            // Nothing qhost can send will be taken: leave the message to the queue's own
            // redrive policy, looking again only at the longest retry delay.
            tracing::error!(error = %e, "the dead-letter queue refuses this message; leaving it to the queue's redrive policy");
            return Lettered::Kept(shared.config.retry.max);
        }
        if let Some(held_back) = self.backend_error(Operation::Send, e.is_timeout()) {
            tracing::error!(error = %e, held_back, "dead-letter send failed; keeping the message");
        }
        Lettered::Kept(self.backoff_delay(0))
    }

    /// The lease passed to another worker, whose result stands: this one is dropped, and the
    /// message comes back when its visibility lapses, to be found completed or leased.
    pub(crate) fn let_lapse(self, why: Event) -> Fate {
        self.tell(|| {
            RunEnd::bare(
                None,
                Ended::Failed("its lease passed to another run".into()),
            )
        });
        self.record(why);
        match &self.part {
            Some(part) => Fate::of(part.end(PartFate::Lapsed)),
            None => Fate::Back,
        }
    }

    /// Gives `lease` back with `why`, logging what the store said (a lease already passed on,
    /// or a store that did not answer: it lapses by itself).
    pub(crate) async fn release(&self, lease: &Lease, why: Released) {
        let plugin = self.plugin.name();
        match self.shared().store.release(lease, why).await {
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
}
