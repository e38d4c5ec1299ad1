//! The heartbeat: while a delivery holds a lease, extend the lease and the message's visibility
//! every third of the visibility timeout, so a long handler is neither redelivered nor
//! overtaken.
//!
//! A [`Heartbeat`] is a guard. Dropping it stops the beats; [`Heartbeat::stop`] also waits for
//! an extension already under way, so that a put-back that follows cannot be overtaken by a
//! late `ChangeMessageVisibility` hiding the message again for a whole timeout. Each extension
//! runs under a lock that `stop` takes once after cancelling, so an idle heartbeat (the usual
//! case) is stopped without waiting for its task.
//!
//! A [`Hold`] does the same for messages received but not started yet (a FIFO group's later
//! messages while an earlier one runs), so they are not delivered again while they wait.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::context::QueueCtx;
use crate::faults::Operation;
use crate::idempotency::slots::Slot;
use crate::idempotency::{IdempotencyError, Lease};

/// Shortest period between beats, however short the visibility timeout.
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// A running heartbeat for one delivery.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    stop: CancellationToken,
    /// Held while an extension is under way.
    extending: Arc<Mutex<()>>,
}

impl Heartbeat {
    /// Starts beating for the delivery `receipt` under `lease` (and `slot`, a flow slot it
    /// holds), if the queue wants heartbeats.
    pub(crate) fn start(
        queue: &Arc<QueueCtx>,
        receipt: &str,
        lease: &Lease,
        slot: Option<&Slot>,
    ) -> Option<Self> {
        if !queue.config.heartbeat {
            return None;
        }
        let heartbeat = Heartbeat {
            stop: CancellationToken::new(),
            extending: Arc::default(),
        };
        tokio::spawn(beat(
            Arc::clone(queue),
            receipt.to_string(),
            lease.clone(),
            slot.cloned(),
            heartbeat.stop.clone(),
            Arc::clone(&heartbeat.extending),
        ));
        Some(heartbeat)
    }

    /// Stops beating and waits for an extension under way to land.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let _landed = self.extending.lock().await;
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Extends until stopped. An extension, once started, is finished even if a stop arrives
/// meanwhile (`stop` waits for the lock); one not yet started sees the stop and returns.
async fn beat(
    queue: Arc<QueueCtx>,
    receipt: String,
    lease: Lease,
    slot: Option<Slot>,
    stop: CancellationToken,
    extending: Arc<Mutex<()>>,
) {
    let mut tick = ticker(&queue);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let _extending = extending.lock().await;
        if stop.is_cancelled() {
            return;
        }
        extend(&queue, &receipt, &lease).await;
        if let Some(slot) = &slot {
            extend_slot(&queue, slot).await;
        }
    }
}

/// Ticks every third of the queue's visibility timeout (never faster than [`MIN_PERIOD`]), the
/// first tick one period from now.
fn ticker(queue: &QueueCtx) -> tokio::time::Interval {
    let period = (queue.config.visibility / 3).max(MIN_PERIOD);
    tokio::time::interval_at(tokio::time::Instant::now() + period, period)
}

async fn extend(queue: &QueueCtx, receipt: &str, lease: &Lease) {
    let shared = &queue.shared;
    let visibility = queue.config.visibility;
    match shared.store.extend(lease, visibility).await {
        Ok(()) => {}
        Err(IdempotencyError::LeaseLost(key)) => {
            tracing::warn!(%key, "lease lost while the handler runs; its result will be discarded")
        }
        Err(e) => {
            if let Some(held_back) = shared
                .stats
                .record_failure(Operation::Extend, e.is_timeout())
            {
                tracing::warn!(key = %lease.key, error = %e, held_back, "could not extend lease")
            }
        }
    }
    let queue_name = &queue.config.name;
    if let Err(e) = shared
        .source
        .change_visibility(queue_name, receipt, visibility)
        .await
    {
        let op = Operation::ChangeVisibility;
        if let Some(held_back) = shared.stats.record_failure(op, e.is_timeout()) {
            tracing::warn!(queue = %queue_name, operation = op.name(), error = %e, held_back, "could not extend visibility");
        }
    }
}

/// Extends a flow slot with the lease, so a long run keeps its slot and a dead host's lapses.
async fn extend_slot(queue: &QueueCtx, slot: &Slot) {
    let shared = &queue.shared;
    match shared
        .store
        .extend_slot(slot, queue.config.visibility)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(key = %slot.key, "flow slot lapsed while the handler runs; the key may briefly run one over its limit")
        }
        Err(e) => {
            if let Some(held_back) = shared
                .stats
                .record_failure(Operation::Extend, e.is_timeout())
            {
                tracing::warn!(key = %slot.key, error = %e, held_back, "could not extend a flow slot")
            }
        }
    }
}

/// Keeps received messages hidden while they wait their turn: a FIFO group's later messages
/// behind a running one. Their visibility is extended every third of the timeout until each
/// is let go (it starts, with a heartbeat of its own) or the hold is dropped.
#[derive(Debug)]
pub(crate) struct Hold {
    waiting: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
}

impl Hold {
    /// Holds the deliveries `receipts` of `queue`.
    pub(crate) fn start(queue: &Arc<QueueCtx>, receipts: Vec<String>) -> Self {
        let hold = Hold {
            waiting: Arc::new(Mutex::new(receipts)),
            stop: CancellationToken::new(),
        };
        tokio::spawn(keep_hidden(
            Arc::clone(queue),
            Arc::clone(&hold.waiting),
            hold.stop.clone(),
        ));
        hold
    }

    /// Stops extending `receipt`; an extension under way lands first.
    pub(crate) async fn let_go(&self, receipt: &str) {
        self.waiting.lock().await.retain(|r| r != receipt);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn keep_hidden(
    queue: Arc<QueueCtx>,
    waiting: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
) {
    let visibility = queue.config.visibility;
    let mut tick = ticker(&queue);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let waiting = waiting.lock().await;
        if stop.is_cancelled() || waiting.is_empty() {
            return;
        }
        for receipt in waiting.iter() {
            let name = &queue.config.name;
            if let Err(e) = queue
                .shared
                .source
                .change_visibility(name, receipt, visibility)
                .await
            {
                let op = Operation::ChangeVisibility;
                if let Some(held_back) = queue.shared.stats.record_failure(op, e.is_timeout()) {
                    tracing::warn!(queue = %name, operation = op.name(), error = %e, held_back, "could not keep a waiting message hidden");
                }
            }
        }
    }
}
