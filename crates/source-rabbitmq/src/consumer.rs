//! A queue's consumer: a channel of its own with the prefetch as its bound, and the deliveries
//! the broker pushed to it, waiting to be received (`buffer`) or received and not yet settled
//! (`held`). A delivery is named by its consumer's generation and its delivery tag, so a
//! handle from a consumer whose connection dropped (its deliveries already back in the queue)
//! is refused as expired instead of acknowledging some other delivery under the same tag.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt as _;
use lapin::message::Delivery;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use tokio::sync::{Mutex, mpsc};

use crate::convert;
use crate::link::Link;
use qhost_message::Received;

/// What qhost keeps of a delivery it handed out: enough to republish it to a delay queue.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) properties: BasicProperties,
    pub(crate) body: Vec<u8>,
    pub(crate) delivery_count: u32,
    /// When this consumer first handed it out: how long the broker has seen it unacked.
    pub(crate) since: std::time::Instant,
}

/// One queue's consumer on one link.
#[derive(Debug)]
pub(crate) struct Consumer {
    pub(crate) generation: u64,
    pub(crate) channel: Channel,
    /// Keeps the connection open while the consumer lives.
    pub(crate) link: Arc<Link>,
    buffer: Mutex<mpsc::UnboundedReceiver<Delivery>>,
    held: std::sync::Mutex<HashMap<u64, Held>>,
    /// Deliveries held back unacknowledged until a delay passes (`DelayBy::Hold`), by tag.
    waiting: std::sync::Mutex<BTreeSet<u64>>,
    alive: Arc<AtomicBool>,
    /// When it started, until its first delivery was taken (then `None`).
    fresh_since: std::sync::Mutex<Option<std::time::Instant>>,
    /// An ordered queue's: one delivery out at a time, whatever the broker sent.
    one_at_a_time: bool,
    /// Told when a delivery stops being out (settled, put back or requeued).
    settled: tokio::sync::Notify,
    /// Deliveries whose delay was waited out on this consumer, to hand out again before the
    /// buffer, still unacknowledged (an ordered queue's: see [`Consumer::offer_again`]).
    again: std::sync::Mutex<std::collections::VecDeque<(u64, Held)>>,
    /// Held while acks are sent; the highest tag a `multiple` ack has covered, so that a
    /// settle behind it skips what that ack already took (acking a tag twice closes the
    /// channel).
    pub(crate) acked_through: Mutex<u64>,
}

/// How long a new consumer's receive that would not wait waits for the broker's first push: a
/// queue's messages reach a consumer a round trip after it starts, so without it a one-off
/// read (`qhost dlq peek`) of a full queue would find nothing.
const FIRST_PUSH: std::time::Duration = std::time::Duration::from_millis(500);

/// How long a new consumer's first receive waits for each next delivery of the broker's first
/// burst before it answers with what it has.
const BURST_QUIET: std::time::Duration = std::time::Duration::from_millis(50);

impl Consumer {
    /// Starts consuming `queue` on `link`, holding at most `prefetch` unacknowledged; with
    /// `one_at_a_time`, handing out a delivery only once the one before it is settled.
    pub(crate) async fn start(
        link: Arc<Link>,
        queue: &str,
        prefetch: u16,
        generation: u64,
        one_at_a_time: bool,
    ) -> lapin::Result<Consumer> {
        let channel = link.connection.create_channel().await?;
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        let tag = format!("qhost-{}", uuid::Uuid::new_v4().simple());
        let mut stream = channel
            .basic_consume(
                queue.into(),
                tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let alive = Arc::new(AtomicBool::new(true));
        let pump_alive = Arc::clone(&alive);
        let queue_name = queue.to_string();
        tokio::spawn(async move {
            while let Some(delivery) = stream.next().await {
                match delivery {
                    Ok(d) => {
                        if tx.send(d).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(queue = %queue_name, error = %e, "the consumer stopped");
                        break;
                    }
                }
            }
            tracing::debug!(queue = %queue_name, "the consumer's deliveries ended");
            pump_alive.store(false, Ordering::Release);
        });
        Ok(Consumer {
            generation,
            channel,
            link,
            buffer: Mutex::new(rx),
            held: Default::default(),
            waiting: Default::default(),
            alive,
            fresh_since: std::sync::Mutex::new(Some(std::time::Instant::now())),
            one_at_a_time,
            settled: tokio::sync::Notify::new(),
            again: Default::default(),
            acked_through: Mutex::new(0),
        })
    }

    /// Whether it still receives: its channel open and its stream going.
    pub(crate) fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire) && self.channel.status().connected()
    }

    /// Up to `max` deliveries of `queue`, waiting up to `wait` for the first, each held (see
    /// [`Consumer::hold`]) before the buffer is let go: a settle's `multiple` ack must never
    /// find a delivery handed out but not yet held. `None` once the consumer stopped with
    /// nothing left to give.
    pub(crate) async fn take(
        &self,
        queue: &str,
        max: usize,
        wait: std::time::Duration,
    ) -> Option<Vec<Received>> {
        let mut buffer = self.buffer.lock().await;
        let deadline = tokio::time::Instant::now() + wait.max(self.first_push_left());
        // An ordered queue's consumer has a prefetch of one, yet the broker's count of what it
        // may send is its own (one take-over under load saw two out at once): the host does
        // not rely on it, and hands out nothing while a delivery is out.
        if self.one_at_a_time && !self.none_out_by(deadline).await {
            return Some(Vec::new());
        }
        let max = if self.one_at_a_time { 1 } else { max };
        let again = self.again_lock().pop_front();
        if let Some((tag, held)) = again {
            return Some(vec![self.hand_out_again(queue, tag, held)]);
        }
        let fresh = self.fresh_lock().is_some();
        let first = match tokio::time::timeout_at(deadline, buffer.recv()).await {
            Err(_) => return Some(Vec::new()),
            Ok(None) => return None,
            Ok(Some(d)) => d,
        };
        *self.fresh_lock() = None;
        let mut got = vec![self.hand_out(queue, first)];
        while got.len() < max {
            let next = match fresh {
                // The broker's first burst arrives a delivery at a time: a one-off read
                // (`qhost dlq peek`) takes all of it, not the first alone.
                true => (tokio::time::timeout(BURST_QUIET, buffer.recv()).await)
                    .ok()
                    .flatten(),
                false => buffer.try_recv().ok(),
            };
            match next {
                Some(d) => got.push(self.hand_out(queue, d)),
                None => break,
            }
        }
        Some(got)
    }

    /// Waits until no delivery is out, up to `deadline`: whether none is.
    async fn none_out_by(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            // Registered before the check: a settle between the two still wakes it.
            let settled = self.settled.notified();
            if self.out() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, settled).await.is_err() {
                return false;
            }
        }
    }

    /// `delivery` as handed out: held, and named by this consumer's generation and its tag.
    fn hand_out(&self, queue: &str, delivery: Delivery) -> Received {
        let handle = format!("{}.{}", self.generation, delivery.delivery_tag);
        let got = convert::received(queue, handle, &delivery);
        let held = Held {
            properties: delivery.properties,
            body: delivery.data,
            delivery_count: got.delivery_count,
            since: std::time::Instant::now(),
        };
        self.hold(delivery.delivery_tag, held);
        got
    }

    /// A delivery held back for a delay, handed out again as its next delivery (the broker
    /// has not seen it come back: its count of deliveries stays where it was).
    fn hand_out_again(&self, queue: &str, tag: u64, mut held: Held) -> Received {
        let handle = format!("{}.{tag}", self.generation);
        held.delivery_count += 1;
        let count = held.delivery_count;
        let got = convert::received_as(queue, handle, &held.properties, &held.body, count);
        self.hold(tag, held);
        got
    }

    /// Hands `held` out again at the next receive, its delay waited out, without giving it
    /// back to the broker: a requeue counts against a quorum queue's delivery limit, so a
    /// delivery of an ordered queue held back again and again (its key leased by a host that
    /// died, until the lease lapses) would be dead-lettered by the broker after twenty.
    pub(crate) fn offer_again(&self, tag: u64, held: Held) {
        self.again_lock().push_back((tag, held));
        self.wait(tag, false);
    }

    fn again_lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<(u64, Held)>> {
        self.again.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What is left of [`FIRST_PUSH`] for a consumer that has taken nothing yet.
    fn first_push_left(&self) -> std::time::Duration {
        (*self.fresh_lock()).map_or(std::time::Duration::ZERO, |since| {
            FIRST_PUSH.saturating_sub(since.elapsed())
        })
    }

    fn fresh_lock(&self) -> std::sync::MutexGuard<'_, Option<std::time::Instant>> {
        self.fresh_since.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers a delivery handed out.
    fn hold(&self, tag: u64, held: Held) {
        self.held_map().insert(tag, held);
    }

    /// Forgets a delivery handed out, as it is settled or put back: `None` if it was not held
    /// (settled already, or never given).
    pub(crate) fn release(&self, tag: u64) -> Option<Held> {
        let held = self.held_map().remove(&tag);
        self.settled.notify_waiters();
        held
    }

    fn held_map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Held>> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Deliveries pushed to it and not yet received.
    pub(crate) fn buffered(&self) -> usize {
        self.buffer.try_lock().map_or(0, |b| b.len())
    }

    /// Deliveries received and not yet settled, held back for a delay, or waiting to be handed
    /// out again.
    pub(crate) fn unsettled(&self) -> usize {
        self.out() + self.again_lock().len()
    }

    /// Deliveries handed out and not settled, or held back for a delay.
    fn out(&self) -> usize {
        self.held_map().len() + self.waiting_set().len()
    }

    /// Marks `tag` as held back for a delay (`true`), or no longer (`false`).
    pub(crate) fn wait(&self, tag: u64, waiting: bool) {
        let mut set = self.waiting_set();
        if waiting {
            set.insert(tag);
        } else {
            set.remove(&tag);
            drop(set);
            self.settled.notify_waiters();
        }
    }

    fn waiting_set(&self) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lowest tag still unsettled: handed out, held back for a delay, or waiting to be
    /// handed out again. A `multiple` ack below it takes only deliveries settled or being
    /// settled (what is still in the buffer came after every tag handed out).
    pub(crate) fn lowest_out(&self) -> Option<u64> {
        let held = self.held_map().keys().min().copied();
        let waiting = self.waiting_set().first().copied();
        let again = self.again_lock().iter().map(|(tag, _)| *tag).min();
        held.into_iter().chain(waiting).chain(again).min()
    }
}
