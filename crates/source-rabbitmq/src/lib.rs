//! qhost's source contract on RabbitMQ (AMQP 0-9-1), through lapin.
//!
//! How each operation of the contract lands (`docs/design.md` has the table for every broker):
//!
//! - **receive with a hold**: a consumer per queue (`basic.consume`, `basic.qos` prefetch as
//!   its in-flight bound) pushes deliveries; a receive takes what arrived, waiting for the
//!   first. The broker holds a delivery for as long as the connection lives
//!   ([`Holds::WithConnection`]): nothing to keep while a handler runs, and when a host dies
//!   its connection drops and every delivery it held goes back to the queue.
//! - **settle**: `basic.ack`, sent only after the host committed the completion.
//! - **put back**: at once, `basic.nack` with requeue. After a delay, which RabbitMQ has no
//!   form of: republished with confirms to a delay queue that dead-letters back once the delay
//!   passes, then acked (`delay`), or held unacked until the delay passes
//!   ([`DelayBy`] says which), never longer than half the broker's `consumer_timeout`.
//! - **order**: a queue named in `ordered` is declared with a single active consumer and
//!   consumed one delivery at a time (prefetch 1, and the consumer hands out nothing while a
//!   delivery is out, whatever the broker sent), its delays held where the delivery is: one
//!   consumer of the fleet runs its messages, each after the one before it settled.
//! - **send**: to the default exchange with the queue as routing key (or to the exchange and
//!   routing key the settings name for a target), persistent, `mandatory` (a message nothing
//!   would receive is a refusal, not a silent drop), with publisher confirms,
//!   the message id as `message_id`, attributes as headers. Every message is held to the same
//!   rules as on SQS (`qhost_message::rules`), so a handler's outbox behaves alike on every
//!   source.
//! - **delivery count**: a quorum queue's `x-delivery-count`, plus the deliveries before a
//!   delay queue's copy; a classic queue only marks a redelivery, so there the count is a lower
//!   bound (the host counts a handler's attempts in its store either way).
//!
//! Layout: `settings` (what the host configures), `link` (the connection, reconnecting with
//! backoff), `consumer` (a queue's consumer and the deliveries it holds), `ack` (acks, one
//! `multiple` ack for a batch where that is safe, and nacks), `convert` (AMQP's
//! properties and headers to and from qhost's messages), `delay` (delay queues), `declare`
//! (declaring and checking queues), `publish` (sends with confirms).

mod ack;
mod consumer;
mod convert;
mod declare;
mod delay;
mod link;
mod publish;
mod settings;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{BasicAckOptions, QueuePurgeOptions};
use qhost_message::{Outgoing, Received, wire};
use qhost_source::{Capabilities, Holds, Purged, QueueAdmin, QueueDepth, QueueSource, SourceError};

use ack::{ack, nack};
use consumer::{Consumer, Held};
use link::{Backoff, Link};
pub use settings::{DelayBy, ExchangeTarget, QueueType, RabbitSettings};

/// A RabbitMQ broker as a source: one connection (opened on first use, again after it drops),
/// a consumer per queue on it.
#[derive(Debug)]
pub struct RabbitQueue {
    settings: RabbitSettings,
    link: tokio::sync::Mutex<Option<Arc<Link>>>,
    backoff: std::sync::Mutex<Backoff>,
    consumers: std::sync::Mutex<HashMap<String, Arc<Consumer>>>,
    /// Held while a consumer starts, so that pollers of one queue start one.
    starting: tokio::sync::Mutex<()>,
    generation: AtomicU64,
    /// The delay queues this source has sent to, by their queue, which the depth counts.
    delay_queues: std::sync::Mutex<HashMap<String, HashSet<String>>>,
}

impl RabbitQueue {
    /// A source for the broker of `settings`; it connects on first use.
    pub fn new(settings: RabbitSettings) -> RabbitQueue {
        RabbitQueue {
            settings,
            link: Default::default(),
            backoff: Default::default(),
            consumers: Default::default(),
            starting: Default::default(),
            generation: AtomicU64::new(0),
            delay_queues: Default::default(),
        }
    }

    /// The open link, or a new one: after a failure, not before the backoff's wait.
    async fn link(&self) -> Result<Arc<Link>, SourceError> {
        let mut slot = self.link.lock().await;
        if let Some(link) = slot.as_ref().filter(|l| l.connected()) {
            return Ok(Arc::clone(link));
        }
        let wait = self.backoff_state().wait();
        tokio::time::sleep(wait).await;
        match link::open(&self.settings).await {
            Ok(link) => {
                self.backoff_state().succeeded();
                let link = Arc::new(link);
                *slot = Some(Arc::clone(&link));
                Ok(link)
            }
            Err(e) => {
                self.backoff_state().failed();
                *slot = None;
                Err(backend(format!("cannot connect to RabbitMQ: {e}")))
            }
        }
    }

    fn backoff_state(&self) -> std::sync::MutexGuard<'_, Backoff> {
        self.backoff.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live consumer of `queue`, started (on the live link) if it has none.
    async fn consumer(&self, queue: &str) -> Result<Arc<Consumer>, SourceError> {
        if let Some(c) = self.live_consumer(queue) {
            return Ok(c);
        }
        let _starting = self.starting.lock().await;
        if let Some(c) = self.live_consumer(queue) {
            return Ok(c);
        }
        // A consumer that stopped (cancelled by the broker) may sit on an open channel still
        // holding its unacknowledged deliveries: closed first, they go back to the queue (its
        // handles are refused as expired), and never run beside the new consumer's (an ordered
        // queue would otherwise have two deliveries out at once).
        let stopped = self.consumer_map().remove(queue);
        if let Some(old) = stopped {
            let _ = old.channel.close(200, "consumer stopped".into()).await;
        }
        let link = self.link().await?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        // An ordered queue's next delivery comes only once the one before it has settled.
        let ordered = self.settings.is_ordered(queue);
        let prefetch = if ordered { 1 } else { self.settings.prefetch };
        let consumer = Consumer::start(link, queue, prefetch, generation, ordered)
            .await
            .map_err(|e| amqp_error(queue, e))?;
        let consumer = Arc::new(consumer);
        self.consumer_map()
            .insert(queue.to_string(), Arc::clone(&consumer));
        Ok(consumer)
    }

    fn live_consumer(&self, queue: &str) -> Option<Arc<Consumer>> {
        self.consumer_map()
            .get(queue)
            .filter(|c| c.alive())
            .cloned()
    }

    fn consumer_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Consumer>>> {
        self.consumers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The consumer that gave `handle`, if it still lives, and the delivery tag.
    fn holder(&self, queue: &str, handle: &str) -> Result<(Arc<Consumer>, u64), SourceError> {
        let (generation, tag) = parse_handle(handle)?;
        match self.live_consumer(queue) {
            Some(c) if c.generation == generation => Ok((c, tag)),
            _ => Err(SourceError::HandleExpired),
        }
    }

    /// Closes the connection: every delivery it held goes back to its queue, as when a host
    /// dies, and every handle it gave expires. The next call connects again.
    pub async fn close(&self) {
        let link = self.link.lock().await.take();
        self.consumer_map().clear();
        if let Some(link) = link {
            let _ = link.connection.close(200, "closed by qhost".into()).await;
        }
    }

    /// Closes the channel of `queue`'s consumer: every delivery of `queue` it held goes back
    /// to the queue, as when its connection drops, and their handles expire. The next receive
    /// starts a consumer again.
    pub async fn close_consumer(&self, queue: &str) {
        let consumer = self.consumer_map().remove(queue);
        if let Some(c) = consumer {
            let _ = c.channel.close(200, "closed by qhost".into()).await;
        }
    }

    /// Declares `queue` as the settings say (with `dead_letter` as its dead-letter queue,
    /// declared too), or checks that it exists where qhost does not declare.
    pub async fn prepare(&self, queue: &str, dead_letter: &str) -> Result<(), SourceError> {
        let link = self.link().await?;
        match self.settings.declare {
            Some(kind) => {
                let ordered = self.settings.is_ordered(queue);
                declare::declare(&link, queue, dead_letter, kind, ordered).await
            }
            None => declare::exists(&link, queue).await.map(drop),
        }
    }

    /// Deletes `queue` and the delay queues this source made for it (tests clean up with it).
    pub async fn delete(&self, queue: &str) -> Result<(), SourceError> {
        let link = self.link().await?;
        let delays: Vec<String> = (self.delay_map().remove(queue))
            .map(|s| s.into_iter().collect())
            .unwrap_or_default();
        for name in delays.iter().map(String::as_str).chain([queue]) {
            declare::delete(&link, name).await?;
        }
        Ok(())
    }

    fn delay_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<String>>> {
        self.delay_queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Republishes a held delivery to `queue`'s delay queue for `after`, then acks it. If the
    /// copy cannot be sent, the delivery is requeued at once instead: early, never lost nor
    /// stuck.
    async fn delay(
        &self,
        consumer: &Consumer,
        queue: &str,
        tag: u64,
        held: Held,
        after: Duration,
    ) -> Result<(), SourceError> {
        let delay = delay::step(after.min(RabbitSettings::MAX_DELAY));
        let name = delay::name(queue, delay);
        let copied = async {
            declare::delay_queue(&consumer.link, queue, &name, delay).await?;
            self.delay_map()
                .entry(queue.to_string())
                .or_default()
                .insert(name.clone());
            let properties = convert::delayed(&held.properties, held.delivery_count);
            publish::confirmed(&consumer.link, &name, &held.body, properties).await
        };
        if let Err(e) = copied.await {
            tracing::warn!(%queue, error = %e, "cannot send to the delay queue; requeueing now");
            return nack(consumer, tag).await;
        }
        (consumer.channel)
            .basic_ack(tag, BasicAckOptions::default())
            .await
            .map_err(|e| backend(format!("ack after the delay copy: {e}")))
    }

    /// Holds a delivery (marked waiting) unacked for `after`, then, if its consumer still
    /// lives, hands it out again (`again`: the delivery) or requeues it.
    fn hold_then_give_back(
        consumer: Arc<Consumer>,
        tag: u64,
        after: Duration,
        again: Option<Held>,
    ) {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            match again {
                Some(held) if consumer.alive() => return consumer.offer_again(tag, held),
                _ => {}
            }
            if consumer.alive()
                && let Err(e) = nack(&consumer, tag).await
            {
                tracing::warn!(error = %e, "cannot requeue a delivery after its delay");
            }
            consumer.wait(tag, false);
        });
    }
}

/// A handle: the consumer's generation and the delivery tag (`Consumer::hand_out` writes it).
fn parse_handle(handle: &str) -> Result<(u64, u64), SourceError> {
    let parsed = handle
        .split_once('.')
        .and_then(|(g, t)| Some((g.parse().ok()?, t.parse().ok()?)));
    parsed.ok_or(SourceError::HandleExpired)
}

fn backend(text: String) -> SourceError {
    SourceError::Backend(anyhow::anyhow!(text))
}

/// A failed AMQP call on `queue` as the contract names it: a queue that does not exist is
/// [`SourceError::UnknownQueue`].
fn amqp_error(queue: &str, e: lapin::Error) -> SourceError {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) if amqp.get_id() == 404 => {
            SourceError::UnknownQueue(queue.to_string())
        }
        _ => backend(format!("RabbitMQ, queue `{queue}`: {e}")),
    }
}

#[async_trait]
impl QueueSource for RabbitQueue {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // Made up here, by delay queues (or holding): RabbitMQ has no delay of its own.
            delay: false,
            holds: Holds::WithConnection,
            delivery_count: matches!(self.settings.declare, Some(QueueType::Quorum { .. })),
            ordering_groups: false,
        }
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        _hold: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, SourceError> {
        let consumer = self.consumer(queue).await?;
        let Some(got) = consumer.take(queue, max, wait).await else {
            return Err(backend(format!(
                "the consumer of `{queue}` stopped (its connection or channel closed); \
                 its deliveries went back to the queue"
            )));
        };
        Ok(got)
    }

    async fn settle(
        &self,
        queue: &str,
        handles: &[String],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        // Each handle's own answer; the ones still held are acked together below.
        let mut results: Vec<Result<(), SourceError>> = Vec::with_capacity(handles.len());
        let mut acking: Vec<(usize, Arc<Consumer>, u64)> = Vec::new();
        for (i, h) in handles.iter().enumerate() {
            // Acking a tag the channel does not hold would close the channel: only what is
            // held is acked, once.
            let held = self.holder(queue, h).and_then(|(consumer, tag)| {
                consumer.release(tag).ok_or(SourceError::HandleExpired)?;
                Ok((consumer, tag))
            });
            match held {
                Ok((consumer, tag)) => {
                    acking.push((i, consumer, tag));
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        for (i, e) in ack(&acking).await {
            results[i] = Err(e);
        }
        Ok(results)
    }

    async fn put_back(
        &self,
        queue: &str,
        handle: &str,
        after: Duration,
    ) -> Result<(), SourceError> {
        let (consumer, tag) = self.holder(queue, handle)?;
        // Marked as held back before it stops being handed out, so that a `multiple` ack of a
        // settle meanwhile never covers it; unmarked once it is nacked or acked.
        consumer.wait(tag, true);
        let Some(held) = consumer.release(tag) else {
            consumer.wait(tag, false);
            return Err(SourceError::HandleExpired);
        };
        // An ordered queue's delivery waits where it is: through a delay queue it would come
        // back behind the messages sent after it.
        let delay_by = match self.settings.is_ordered(queue) {
            true => DelayBy::Hold,
            false => self.settings.delay_by,
        };
        let done = match (after.is_zero(), delay_by) {
            (true, _) => nack(&consumer, tag).await,
            (false, DelayBy::DelayQueue) => self.delay(&consumer, queue, tag, held, after).await,
            (false, DelayBy::Hold) => {
                let longest = self.settings.longest_hold();
                let after = after.min(longest);
                // An ordered queue's delivery is handed out again by its consumer, never
                // requeued (which counts against the delivery limit), while the broker has
                // seen it unacked for less than half its `consumer_timeout`.
                let again =
                    self.settings.is_ordered(queue) && held.since.elapsed() + after < longest;
                Self::hold_then_give_back(consumer, tag, after, again.then_some(held));
                return Ok(());
            }
        };
        consumer.wait(tag, false);
        done
    }

    async fn hold(&self, queue: &str, handle: &str, _hold: Duration) -> Result<(), SourceError> {
        // The connection holds it; a handle whose connection dropped has nothing to keep.
        self.holder(queue, handle).map(drop)
    }

    async fn send(&self, messages: &[Outgoing]) -> Result<Vec<String>, SourceError> {
        for m in messages {
            qhost_message::rules::check(m).map_err(|r| SourceError::Refused(r.0))?;
        }
        let link = self.link().await?;
        let mut ids = Vec::with_capacity(messages.len());
        let mut pending = Vec::new();
        for m in messages {
            let (id, confirm) = self.send_one(&link, m).await?;
            ids.push(id);
            pending.extend(confirm.map(|c| (m.queue.as_str(), c)));
        }
        for (target, confirm) in pending {
            publish::confirm(self.route(target), confirm).await?;
        }
        Ok(ids)
    }

    async fn depth(&self, queue: &str) -> Result<QueueDepth, SourceError> {
        let link = self.link().await?;
        let ready = declare::exists(&link, queue).await?;
        let delays: Vec<String> = (self.delay_map().get(queue))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let mut delayed = 0;
        for name in delays {
            delayed += declare::exists(&link, &name).await.unwrap_or(0);
        }
        let (buffered, unsettled) = match self.live_consumer(queue) {
            Some(c) => (c.buffered() as u64, c.unsettled() as u64),
            None => (0, 0),
        };
        Ok(QueueDepth {
            visible: ready + buffered,
            invisible: unsettled + delayed,
        })
    }

    fn for_lane(&self) -> Option<Arc<dyn QueueSource>> {
        Some(Arc::new(RabbitQueue::new(self.settings.clone())))
    }
}

impl RabbitQueue {
    /// Where a send to `target` goes: its exchange, if the settings name one, else the queue.
    fn route<'a>(&'a self, target: &'a str) -> publish::Route<'a> {
        match self.settings.exchanges.get(target) {
            Some(e) => publish::Route {
                target,
                exchange: &e.exchange,
                routing_key: &e.routing_key,
            },
            None => publish::Route::queue(target),
        }
    }

    /// Sends `m` (through its delay queue when it asks for a delay): its message id, and the
    /// confirmation still to await (none for a delayed one, awaited here). The id is the
    /// idempotency key qhost derived for it (an outbox message), so a copy sent again is the
    /// same message to its consumer; else its deduplication id; else a new one.
    async fn send_one(
        &self,
        link: &Link,
        m: &Outgoing,
    ) -> Result<(String, Option<lapin::PublisherConfirm>), SourceError> {
        let key = qhost_message::find_attribute(&m.attributes, wire::IDEMPOTENCY_KEY)
            .and_then(|a| a.text());
        let id = (key.or(m.dedup_id.as_deref()).map(str::to_string))
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let properties = convert::properties(m, &id);
        let route = self.route(&m.queue);
        if m.delay_seconds == 0 {
            let pending = publish::publish(link, route, &m.body, properties).await?;
            return Ok((id, Some(pending)));
        }
        if !route.exchange.is_empty() {
            return Err(SourceError::Refused(format!(
                "`{}` is published to an exchange, which RabbitMQ cannot delay; send it without a delay",
                m.queue
            )));
        }
        declare::exists(link, &m.queue).await?;
        let delay = delay::step(Duration::from_secs(u64::from(m.delay_seconds)));
        let name = delay::name(&m.queue, delay);
        declare::delay_queue(link, &m.queue, &name, delay).await?;
        self.delay_map()
            .entry(m.queue.clone())
            .or_default()
            .insert(name.clone());
        publish::confirmed(link, &name, &m.body, properties).await?;
        Ok((id, None))
    }
}

#[async_trait]
impl QueueAdmin for RabbitQueue {
    async fn purge(&self, queue: &str) -> Result<Purged, SourceError> {
        let link = self.link().await?;
        let channel = link.scratch().await.map_err(|e| amqp_error(queue, e))?;
        let n = channel
            .queue_purge(queue.into(), QueuePurgeOptions::default())
            .await
            .map_err(|e| amqp_error(queue, e))?;
        Ok(Purged::Deleted(u64::from(n)))
    }

    async fn inspect(&self, queue: &str, dead_letter: &str) -> Result<String, SourceError> {
        let link = self.link().await?;
        let ordered = self.settings.is_ordered(queue);
        declare::inspect(&link, queue, dead_letter, self.settings.declare, ordered).await
    }

    async fn peek(&self, queue: &str, limit: usize) -> Result<Vec<Received>, SourceError> {
        let _ = (queue, limit);
        Err(SourceError::Unsupported(
            "RabbitMQ cannot show a message without delivering it (a basic.get counts a \
             delivery and marks it redelivered); `qhost dlq redrive` moves dead letters back"
                .into(),
        ))
    }

    async fn send_copies(
        &self,
        messages: &[Outgoing],
        copies: usize,
    ) -> Result<Vec<String>, SourceError> {
        let link = self.link().await?;
        let mut ids = Vec::with_capacity(messages.len());
        for m in messages {
            qhost_message::rules::check(m).map_err(|r| SourceError::Refused(r.0))?;
            let id = uuid::Uuid::new_v4().to_string();
            for _ in 0..copies {
                let properties = convert::properties(m, &id);
                publish::confirmed(&link, &m.queue, &m.body, properties).await?;
            }
            ids.push(id);
        }
        Ok(ids)
    }
}

#[cfg(test)]
impl RabbitQueue {
    /// The highest tag a `multiple` ack has covered on `queue`'s live consumer (0: none).
    pub(crate) async fn acked_through(&self, queue: &str) -> u64 {
        match self.live_consumer(queue) {
            Some(c) => *c.acked_through.lock().await,
            None => 0,
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    reason = "tests: a broker call that fails fails the test, with the error"
)]
mod tests;
