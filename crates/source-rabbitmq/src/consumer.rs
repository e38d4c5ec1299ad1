//! A queue's consumer: a channel of its own with the prefetch as its bound, and the deliveries
//! the broker pushed to it, waiting to be received (`buffer`) or received and not yet settled
//! (`held`). A delivery is named by its consumer's generation and its delivery tag, so a
//! handle from a consumer whose connection dropped (its deliveries already back in the queue)
//! is refused as expired instead of acknowledging some other delivery under the same tag.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures_util::StreamExt as _;
use lapin::message::Delivery;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use tokio::sync::{Mutex, mpsc};

use crate::link::Link;

/// What qhost keeps of a delivery it handed out: enough to republish it to a delay queue.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) properties: BasicProperties,
    pub(crate) body: Vec<u8>,
    pub(crate) delivery_count: u32,
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
    /// Deliveries held back unacknowledged until a delay passes (`DelayBy::Hold`).
    pub(crate) waiting: AtomicUsize,
    alive: Arc<AtomicBool>,
    /// When it started, until its first delivery was taken (then `None`).
    fresh_since: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How long a new consumer's receive that would not wait waits for the broker's first push: a
/// queue's messages reach a consumer a round trip after it starts, so without it a one-off
/// read (`qhost dlq peek`) of a full queue would find nothing.
const FIRST_PUSH: std::time::Duration = std::time::Duration::from_millis(500);

impl Consumer {
    /// Starts consuming `queue` on `link`, holding at most `prefetch` unacknowledged.
    pub(crate) async fn start(
        link: Arc<Link>,
        queue: &str,
        prefetch: u16,
        generation: u64,
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
            pump_alive.store(false, Ordering::Release);
        });
        Ok(Consumer {
            generation,
            channel,
            link,
            buffer: Mutex::new(rx),
            held: Default::default(),
            waiting: AtomicUsize::new(0),
            alive,
            fresh_since: std::sync::Mutex::new(Some(std::time::Instant::now())),
        })
    }

    /// Whether it still receives: its channel open and its stream going.
    pub(crate) fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire) && self.channel.status().connected()
    }

    /// Up to `max` deliveries, waiting up to `wait` for the first; `None` once the consumer
    /// stopped with nothing left to give.
    pub(crate) async fn take(
        &self,
        max: usize,
        wait: std::time::Duration,
    ) -> Option<Vec<Delivery>> {
        let mut buffer = self.buffer.lock().await;
        let wait = wait.max(self.first_push_left());
        let first = match tokio::time::timeout(wait, buffer.recv()).await {
            Err(_) => return Some(Vec::new()),
            Ok(None) => return None,
            Ok(Some(d)) => d,
        };
        *self.fresh_lock() = None;
        let mut got = vec![first];
        while got.len() < max {
            match buffer.try_recv() {
                Ok(d) => got.push(d),
                Err(_) => break,
            }
        }
        Some(got)
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
    pub(crate) fn hold(&self, tag: u64, held: Held) {
        self.held_map().insert(tag, held);
    }

    /// Forgets a delivery handed out, as it is settled or put back: `None` if it was not held
    /// (settled already, or never given).
    pub(crate) fn release(&self, tag: u64) -> Option<Held> {
        self.held_map().remove(&tag)
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

    /// Deliveries received and not yet settled, or held back for a delay.
    pub(crate) fn unsettled(&self) -> usize {
        self.held_map().len() + self.waiting.load(Ordering::Relaxed)
    }
}
