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
}

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
        let first = match tokio::time::timeout(wait, buffer.recv()).await {
            Err(_) => return Some(Vec::new()),
            Ok(None) => return None,
            Ok(Some(d)) => d,
        };
        let mut got = vec![first];
        while got.len() < max {
            match buffer.try_recv() {
                Ok(d) => got.push(d),
                Err(_) => break,
            }
        }
        Some(got)
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
