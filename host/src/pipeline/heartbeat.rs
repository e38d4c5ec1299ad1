//! The heartbeat: while a delivery holds a lease, extend the lease and the message's visibility
//! every third of the visibility timeout, so a long handler is neither redelivered nor
//! overtaken.
//!
//! A [`Heartbeat`] is a guard. Dropping it stops the beats; [`Heartbeat::stop`] also waits for
//! an extension already under way, so that a put-back that follows cannot be overtaken by a
//! late `ChangeMessageVisibility` hiding the message again for a whole timeout.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::context::QueueCtx;
use crate::idempotency::{IdempotencyError, Lease};

/// Shortest period between beats, however short the visibility timeout.
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// A running heartbeat for one delivery.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Heartbeat {
    /// Starts beating for the delivery `receipt` under `lease`, if the queue wants heartbeats.
    pub(crate) fn start(queue: &Arc<QueueCtx>, receipt: &str, lease: &Lease) -> Option<Self> {
        if !queue.config.heartbeat {
            return None;
        }
        let stop = CancellationToken::new();
        let beats = beat(
            Arc::clone(queue),
            receipt.to_string(),
            lease.clone(),
            stop.clone(),
        );
        Some(Heartbeat {
            stop,
            task: tokio::spawn(beats),
        })
    }

    /// Stops beating and waits for an extension under way to land.
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Extends until stopped. An extension, once started, is finished even if a stop arrives
/// meanwhile: `stop` waits for it.
async fn beat(queue: Arc<QueueCtx>, receipt: String, lease: Lease, stop: CancellationToken) {
    let visibility = queue.config.visibility;
    let period = (visibility / 3).max(MIN_PERIOD);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        extend(&queue, &receipt, &lease).await;
    }
}

async fn extend(queue: &QueueCtx, receipt: &str, lease: &Lease) {
    let shared = &queue.shared;
    let visibility = queue.config.visibility;
    match shared.store.extend(lease, visibility).await {
        Ok(()) => {}
        Err(IdempotencyError::LeaseLost(key)) => {
            tracing::warn!(%key, "lease lost while the handler runs; its result will be discarded")
        }
        Err(e) => tracing::warn!(key = %lease.key, error = %e, "could not extend lease"),
    }
    let queue_name = &queue.config.name;
    if let Err(e) = shared
        .source
        .change_visibility(queue_name, receipt, visibility)
        .await
    {
        tracing::warn!(queue = %queue_name, error = %e, "could not extend visibility");
    }
}
