//! The per-queue receive loop, and the heartbeat that keeps a running message's lease and
//! visibility alive.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::idempotency::Lease;

use super::{QueueCtx, Shared, dispatch};

/// Longest pause after a failed receive.
const MAX_RECEIVE_BACKOFF: Duration = Duration::from_secs(30);

/// Receives from one queue until `shutdown`, never holding more messages than it has permits.
pub async fn run_poller(shared: Shared, queue: Arc<QueueCtx>, shutdown: CancellationToken) {
    let mut failures = 0u32;
    loop {
        let Some(mut permits) = permits(&shared, queue.config.batch_size, &shutdown).await else {
            return;
        };
        let received = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = shared.source.receive(&queue.config.name, permits.len(), queue.config.visibility, queue.config.wait) => r,
        };
        match received {
            Ok(batch) => {
                failures = 0;
                permits.truncate(batch.len());
                if !batch.is_empty() {
                    dispatch::dispatch(&shared, &queue, batch, permits).await;
                }
            }
            Err(e) => {
                failures += 1;
                let pause =
                    Duration::from_millis(200u64 << failures.min(8)).min(MAX_RECEIVE_BACKOFF);
                tracing::error!(queue = %queue.config.name, error = %e, ?pause, "receive failed; backing off");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}

/// Waits for one in-flight permit, then takes as many more as are free, up to `batch`.
async fn permits(
    shared: &Shared,
    batch: usize,
    shutdown: &CancellationToken,
) -> Option<Vec<tokio::sync::OwnedSemaphorePermit>> {
    let first = tokio::select! {
        _ = shutdown.cancelled() => return None,
        p = Arc::clone(&shared.in_flight).acquire_owned() => p.ok()?,
    };
    let mut permits = vec![first];
    while permits.len() < batch {
        match Arc::clone(&shared.in_flight).try_acquire_owned() {
            Ok(p) => permits.push(p),
            Err(_) => break,
        }
    }
    Some(permits)
}

/// Extends the lease and the message's visibility every third of the visibility timeout while
/// the handler runs, so a long handler is neither redelivered nor overtaken. Cancel the token to
/// stop it.
pub fn heartbeat(
    shared: &Shared,
    queue: &QueueCtx,
    receipt: &str,
    lease: &Lease,
) -> CancellationToken {
    let stop = CancellationToken::new();
    if !queue.config.heartbeat {
        return stop;
    }
    let visibility = queue.config.visibility;
    let period = (visibility / 3).max(Duration::from_millis(100));
    let (shared, queue_name, receipt, lease) = (
        shared.clone(),
        queue.config.name.clone(),
        receipt.to_string(),
        lease.clone(),
    );
    let token = stop.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tick.tick() => {}
            }
            match shared.store.extend(&lease, visibility).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(key = %lease.key, "lease lost while the handler runs; its result will be discarded")
                }
                Err(e) => tracing::warn!(key = %lease.key, error = %e, "could not extend lease"),
            }
            if let Err(e) = shared
                .source
                .change_visibility(&queue_name, &receipt, visibility)
                .await
            {
                tracing::warn!(queue = %queue_name, error = %e, "could not extend visibility");
            }
        }
    });
    stop
}
