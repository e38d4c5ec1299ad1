//! The per-queue receive loop: ask the queue for as many messages as there are in-flight
//! permits (so nothing waits in a buffer while its visibility runs out), and hand each batch
//! to [`super::batch::dispatch`].
//!
//! A queue whose plugin is not loaded (its file removed, or a start that allowed it) is not
//! consumed: receiving it would only put every message back, or worse, use up attempts and
//! dead-letter them for a deploy mistake. Its messages stay in the queue, and readiness says
//! why, until the plugin loads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::batch;
use super::context::QueueCtx;
use super::priority;
use crate::faults::Operation;

/// Longest pause after a failed receive.
const MAX_RECEIVE_BACKOFF: Duration = Duration::from_secs(30);
/// How often a poller held back for a higher priority looks again.
const HOLD_CHECK: Duration = Duration::from_millis(20);
/// How often a paused queue looks whether its plugin has loaded.
const PLUGIN_CHECK: Duration = Duration::from_millis(250);

/// Receives from one queue until `shutdown`, never holding more messages than it has permits.
pub(crate) async fn run_poller(queue: Arc<QueueCtx>, shutdown: CancellationToken) {
    let shared = &queue.shared;
    let config = &queue.config;
    let mut failures = 0u32;
    loop {
        if !shared.fleet.wait_unpaused(&config.name, &shutdown).await {
            return;
        }
        if !serving(&queue, &shutdown).await {
            return;
        }
        let Some(mut permits) = permits(&queue, &shutdown).await else {
            return;
        };
        let received = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = shared.source.receive(&config.name, permits.len(), config.visibility, config.wait) => r,
        };
        match received {
            Ok(received) if shared.fleet.is_paused(&config.name) => {
                failures = 0;
                give_back(&queue, received).await;
            }
            Ok(received) => {
                failures = 0;
                shared.priorities.received(config.priority, received.len());
                permits.truncate(received.len());
                if !received.is_empty() {
                    batch::dispatch(&queue, received, permits).await;
                }
            }
            Err(e) => {
                failures += 1;
                let pause =
                    Duration::from_millis(200u64 << failures.min(8)).min(MAX_RECEIVE_BACKOFF);
                let op = Operation::Receive;
                if let Some(held_back) = shared.stats.record_failure(op, e.is_timeout()) {
                    tracing::error!(queue = %config.name, operation = op.name(), error = %e, ?pause, held_back, "receive failed; backing off");
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}

/// Makes messages received while the queue was being paused visible again at once, unrun
/// and uncounted (a receive that was waiting when the pause came): a pause stops a queue's
/// work from the moment a host reads it, not after its long polls end. One whose put-back
/// fails comes back when its visibility timeout lapses.
async fn give_back(queue: &QueueCtx, received: Vec<crate::message::Received>) {
    let put_backs = (received.iter()).map(|m| queue.put_backs.put_back(&m.handle, Duration::ZERO));
    let failed = (futures_util::future::join_all(put_backs).await.into_iter())
        .filter(Result::is_err)
        .count();
    tracing::debug!(queue = %queue.config.name, given_back = received.len(), failed, "paused: received messages put back unrun");
}

/// Waits until the queue's plugin serves (at once, usually); `false` on shutdown.
async fn serving(queue: &QueueCtx, shutdown: &CancellationToken) -> bool {
    let (registry, config) = (&queue.shared.registry, &queue.config);
    if registry.get(&config.plugin).is_some() {
        return true;
    }
    let why = registry.why_not_serving(&config.plugin);
    tracing::warn!(queue = %config.name, plugin = %config.plugin, reason = %why, "not consuming: the queue's plugin is not loaded; its messages stay in the queue until it is");
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(PLUGIN_CHECK) => {}
        }
        if registry.get(&config.plugin).is_some() {
            tracing::info!(queue = %config.name, plugin = %config.plugin, "the queue's plugin is loaded; consuming again");
            return true;
        }
    }
}

/// Waits for one in-flight permit, then takes as many more as are free, up to the queue's
/// batch size; while a queue of a higher priority is busy, it leaves half the slots free
/// (see `priority`), for at most [`priority::MAX_HOLD`].
async fn permits(
    queue: &QueueCtx,
    shutdown: &CancellationToken,
) -> Option<Vec<OwnedSemaphorePermit>> {
    let in_flight = &queue.shared.in_flight;
    let reserve = priority::reserve(queue.shared.config.max_in_flight);
    let held_since = Instant::now();
    let mut first = one_permit(queue, shutdown).await?;
    let mut leave = 0;
    while queue.shared.priorities.higher_busy(queue.config.priority)
        && held_since.elapsed() < priority::MAX_HOLD
    {
        if in_flight.available_permits() >= reserve {
            leave = reserve;
            break;
        }
        drop(first);
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(HOLD_CHECK) => {}
        }
        first = one_permit(queue, shutdown).await?;
    }
    let mut permits = vec![first];
    while permits.len() < queue.config.batch_size && in_flight.available_permits() > leave {
        match Arc::clone(in_flight).try_acquire_owned() {
            Ok(p) => permits.push(p),
            Err(_) => break,
        }
    }
    Some(permits)
}

/// One in-flight permit, when one is free; `None` on shutdown.
async fn one_permit(
    queue: &QueueCtx,
    shutdown: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    tokio::select! {
        _ = shutdown.cancelled() => None,
        p = Arc::clone(&queue.shared.in_flight).acquire_owned() => p.ok(),
    }
}
