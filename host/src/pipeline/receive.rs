//! The per-queue receive loop: ask the queue for as many messages as there are in-flight
//! permits (so nothing waits in a buffer while its visibility runs out), and hand each batch
//! to [`super::batch::dispatch`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::batch;
use super::context::QueueCtx;
use crate::faults::Operation;

/// Longest pause after a failed receive.
const MAX_RECEIVE_BACKOFF: Duration = Duration::from_secs(30);

/// Receives from one queue until `shutdown`, never holding more messages than it has permits.
pub(crate) async fn run_poller(queue: Arc<QueueCtx>, shutdown: CancellationToken) {
    let shared = &queue.shared;
    let config = &queue.config;
    let mut failures = 0u32;
    loop {
        let Some(mut permits) = permits(&queue, &shutdown).await else {
            return;
        };
        let received = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = shared.source.receive(&config.name, permits.len(), config.visibility, config.wait) => r,
        };
        match received {
            Ok(received) => {
                failures = 0;
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

/// Waits for one in-flight permit, then takes as many more as are free, up to the queue's
/// batch size.
async fn permits(
    queue: &QueueCtx,
    shutdown: &CancellationToken,
) -> Option<Vec<OwnedSemaphorePermit>> {
    let in_flight = &queue.shared.in_flight;
    let first = tokio::select! {
        _ = shutdown.cancelled() => return None,
        p = Arc::clone(in_flight).acquire_owned() => p.ok()?,
    };
    let mut permits = vec![first];
    while permits.len() < queue.config.batch_size {
        match Arc::clone(in_flight).try_acquire_owned() {
            Ok(p) => permits.push(p),
            Err(_) => break,
        }
    }
    Some(permits)
}
