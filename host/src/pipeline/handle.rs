//! One message whose lease has been decided: run it, or ack it as a duplicate, or put it back.

use std::sync::Arc;
use std::time::Duration;

use crate::handler::{Failure, HandlerMessage, Invocation, Outcome, Plugin};
use crate::idempotency::{Acquired, Completion, Lease};
use crate::message::{Outgoing, Received};
use crate::payload::{OffloadError, ResolveError, Resolved};
use crate::stats::Event;

use super::deadletter::Verdict;
use super::dispose::{self, Fate, dead_letter, finish, put_back, release, retry_or_give_up};
use super::prepare::Prepared;
use super::{QueueCtx, Shared, backoff};

/// Shortest delay before a message whose key is leased elsewhere comes back.
const MIN_BUSY_DELAY: Duration = Duration::from_secs(1);

/// When to look again at a key leased elsewhere: the other worker usually finishes long
/// before its lease would lapse, so check back on the retry schedule, but never later than the
/// lapse itself.
fn busy_delay(shared: &Shared, msg: &Received, lease_left: Duration) -> Duration {
    backoff::delay(&shared.config.retry, msg.receive_count, 0)
        .max(MIN_BUSY_DELAY)
        .min(lease_left.max(MIN_BUSY_DELAY))
}

/// Acts on what acquiring the message's key found.
pub async fn leased(shared: &Shared, queue: &QueueCtx, p: Prepared, acquired: Acquired) -> Fate {
    let plugin = p.plugin.name.clone();
    match acquired {
        Acquired::Granted(lease) => run(shared, queue, p, lease).await,
        Acquired::Completed {
            pending_outbox,
            pending_for,
        } if !pending_outbox.is_empty() && pending_for < queue.config.visibility => {
            // The worker that completed the key is most likely sending this outbox right now;
            // sending it too would only make copies. Look again once that worker would have
            // finished, or been presumed dead.
            let delay = busy_delay(shared, &p.msg, queue.config.visibility - pending_for);
            put_back(shared, queue, &p.msg, &plugin, delay, Event::Busy).await
        }
        Acquired::Completed { pending_outbox, .. } => {
            tracing::debug!(queue = %p.msg.queue, message_id = %p.msg.id, key = %p.key, "duplicate of completed work; acking without running");
            shared.stats.record(&p.msg.queue, &plugin, Event::Duplicate);
            finish(shared, queue, p.msg, &plugin, &p.scoped_key, pending_outbox).await
        }
        Acquired::Busy { retry_after } => {
            let delay = busy_delay(shared, &p.msg, retry_after);
            put_back(shared, queue, &p.msg, &plugin, delay, Event::Busy).await
        }
    }
}

fn handler_message(p: &Prepared, lease: &Lease, resolved: Option<Resolved>) -> HandlerMessage {
    let m = &p.msg;
    let (body, attributes) = match resolved {
        Some(r) => (r.body, r.attributes),
        None => (m.body.clone(), m.attributes.clone()),
    };
    HandlerMessage {
        id: m.id.clone(),
        idempotency_key: p.key.clone(),
        fencing_token: lease.fencing_token,
        queue: m.queue.clone(),
        body,
        attributes,
        receive_count: m.receive_count,
        sent_at_ms: m.sent_at_ms,
        group_id: m.group_id.clone(),
    }
}

/// Invokes the handler with a heartbeat running, then disposes of the message.
async fn run(shared: &Shared, queue: &QueueCtx, p: Prepared, lease: Lease) -> Fate {
    let plugin = Arc::clone(&p.plugin);
    let heartbeat = super::poller::heartbeat(shared, queue, &p.msg.receipt, &lease);
    let resolved = match shared
        .payloads
        .resolve(&p.msg.body, &p.msg.attributes)
        .await
    {
        Ok(resolved) => resolved,
        Err(e) => {
            heartbeat.cancel();
            return payload_unusable(shared, queue, p, lease, e).await;
        }
    };
    let input = handler_message(&p, &lease, resolved);
    let result = tokio::select! {
        result = invoke(shared, &plugin, input) => result,
        _ = shared.abandon.cancelled() => {
            heartbeat.cancel();
            tracing::warn!(queue = %p.msg.queue, message_id = %p.msg.id, "shutdown grace over; releasing unfinished message");
            release(shared, &plugin, &lease).await;
            return put_back(shared, queue, &p.msg, &plugin.name, Duration::ZERO, Event::Released).await;
        }
    };
    heartbeat.cancel();
    dispose(shared, queue, p, lease, result).await
}

/// A pointer that cannot be followed: a reject for a bad or dangling pointer, a retry while the
/// store is unreachable (however long that lasts; the queue's redrive policy, if any, is the
/// backstop).
async fn payload_unusable(
    shared: &Shared,
    queue: &QueueCtx,
    p: Prepared,
    lease: Lease,
    error: ResolveError,
) -> Fate {
    let plugin = Arc::clone(&p.plugin);
    let id = (plugin.name.as_str(), plugin.version.as_str());
    release(shared, &plugin, &lease).await;
    match error {
        ResolveError::Reject(reason) => {
            let verdict = Verdict {
                plugin: id.0,
                version: id.1,
                reason,
            };
            dead_letter(shared, queue, p.msg, verdict).await
        }
        ResolveError::Retry(reason) => {
            // The message is fine and the handler never ran: like an unreachable idempotency
            // store, an outage of the payload store puts messages back on the backoff schedule
            // without using up their attempts toward dead-lettering.
            tracing::warn!(queue = %p.msg.queue, message_id = %p.msg.id, %reason, "payload store unavailable; putting the message back");
            let delay = backoff::delay(&shared.config.retry, p.msg.receive_count, 0);
            put_back(shared, queue, &p.msg, id.0, delay, Event::Retried).await
        }
    }
}

/// Waits for a slot under the plugin's own concurrency limit (if it has one), then calls it on
/// the blocking pool, in a span naming the plugin version so that every line logged during the
/// call says which build ran.
async fn invoke(
    shared: &Shared,
    plugin: &Arc<Plugin>,
    input: HandlerMessage,
) -> Result<Invocation, Failure> {
    let slot = match plugin.slots() {
        Some(slots) => Some(Arc::clone(slots).acquire_owned().await.map_err(|_| {
            Failure::Instantiate("the plugin's concurrency limit was closed".into())
        })?),
        None => None,
    };
    shared
        .stats
        .record(&input.queue, &plugin.name, Event::Invoked);
    shared
        .stats
        .record_invocation(&plugin.name, &plugin.version);
    let span = tracing::info_span!("invoke", plugin = %plugin.name, version = %plugin.version, message_id = %input.id);
    let plugin = Arc::clone(plugin);
    let call = tokio::task::spawn_blocking(move || {
        let _slot = slot; // held until the call returns, even if the caller stops waiting
        span.in_scope(|| plugin.invoke(input))
    });
    call.await
        .unwrap_or_else(|e| Err(Failure::Trap(format!("handler panicked: {e}"))))
}

async fn dispose(
    shared: &Shared,
    queue: &QueueCtx,
    p: Prepared,
    lease: Lease,
    result: Result<Invocation, Failure>,
) -> Fate {
    let plugin = Arc::clone(&p.plugin);
    let id = (plugin.name.as_str(), plugin.version.as_str());
    let max_attempts = plugin.manifest.limits.max_attempts;
    match result {
        Ok(Invocation {
            outcome: Outcome::Ack,
            outbox,
        }) => ack(shared, queue, p, lease, outbox).await,
        Ok(Invocation {
            outcome: Outcome::Retry(secs),
            ..
        }) => {
            release(shared, &plugin, &lease).await;
            let reason = "the handler asked for a retry".to_string();
            retry_or_give_up(shared, queue, p.msg, id, max_attempts, secs, reason).await
        }
        Ok(Invocation {
            outcome: Outcome::Reject(reason),
            ..
        }) => {
            let verdict = Verdict {
                plugin: id.0,
                version: id.1,
                reason,
            };
            let fate = dead_letter(shared, queue, p.msg, verdict).await;
            release(shared, &plugin, &lease).await;
            fate
        }
        Err(failure) => {
            shared
                .stats
                .record(&p.msg.queue, &plugin.name, Event::Failed);
            release(shared, &plugin, &lease).await;
            retry_or_give_up(
                shared,
                queue,
                p.msg,
                id,
                max_attempts,
                0,
                failure.to_string(),
            )
            .await
        }
    }
}

/// An outbox that cannot be sent: too large with no payload store is a reject (the handler
/// would produce it again), an unreachable store a retry.
async fn outbox_unsendable(
    shared: &Shared,
    queue: &QueueCtx,
    p: Prepared,
    lease: Lease,
    error: OffloadError,
) -> Fate {
    let error = match error {
        OffloadError::TooLarge(reason) => ResolveError::Reject(format!("outbox: {reason}")),
        OffloadError::Unavailable(reason) => {
            ResolveError::Retry(format!("outbox payload not stored: {reason}"))
        }
    };
    payload_unusable(shared, queue, p, lease, error).await
}

/// Commits the outbox with the completed record, then sends it and deletes the message.
async fn ack(
    shared: &Shared,
    queue: &QueueCtx,
    p: Prepared,
    lease: Lease,
    outbox: Vec<Outgoing>,
) -> Fate {
    let plugin = p.plugin.name.clone();
    let outbox = dispose::stamp_outbox(&p.key, &p.plugin, outbox);
    // Large messages are offloaded before the outbox is recorded, so the completed record holds
    // pointers, and a re-send after a crash reuses the same payload keys.
    let outbox = match shared
        .payloads
        .offload_all(&shared.config.namespace, outbox)
        .await
    {
        Ok(outbox) => outbox,
        Err(e) => return outbox_unsendable(shared, queue, p, lease, e).await,
    };
    let completion = Completion {
        lease,
        outbox: outbox.clone(),
        window: p.plugin.manifest.dedup_window(),
    };
    match shared.completer.complete(completion).await {
        Ok(true) => {
            shared.stats.record(&p.msg.queue, &plugin, Event::Acked);
            finish(shared, queue, p.msg, &plugin, &p.scoped_key, outbox).await
        }
        Ok(false) => {
            // Another worker owns the key now; its result stands. Ours is dropped, and the
            // message comes back when its visibility lapses, to be found completed or leased.
            shared.stats.record(&p.msg.queue, &plugin, Event::LostLease);
            tracing::warn!(queue = %p.msg.queue, message_id = %p.msg.id, key = %p.key, "lease lost before completion; discarding this result");
            Fate::Back
        }
        Err(e) => {
            tracing::error!(queue = %p.msg.queue, message_id = %p.msg.id, error = %format!("{e:#}"), "could not record completion; the message will come back");
            let delay = backoff::delay(&shared.config.retry, p.msg.receive_count, 0);
            put_back(shared, queue, &p.msg, &plugin, delay, Event::Retried).await
        }
    }
}
