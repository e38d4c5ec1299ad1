//! A received batch: route and key each message, lease them in one store call, and start a task
//! per message. Messages of a FIFO group run in order, one at a time, in a task of their own.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use crate::idempotency::LeaseRequest;
use crate::message::Received;
use crate::stats::Event;

use super::deadletter::Verdict;
use super::dispose::{Fate, dead_letter, put_back, retry_or_give_up};
use super::handle::leased;
use super::prepare::{Prepared, Unroutable, prepare};
use super::{QueueCtx, Shared, backoff};

/// Attempts allowed for messages whose plugin is not loaded, so a typo is not retried forever.
const MAX_ATTEMPTS_WITHOUT_PLUGIN: u32 = 5;

type Permit = Option<OwnedSemaphorePermit>;

/// Starts the work for a received batch; each message's task holds one in-flight permit.
pub async fn dispatch(
    shared: &Shared,
    queue: &Arc<QueueCtx>,
    batch: Vec<Received>,
    mut permits: Vec<OwnedSemaphorePermit>,
) {
    let mut groups: BTreeMap<String, Vec<(Received, Permit)>> = BTreeMap::new();
    let mut ready = Vec::new();
    for msg in batch {
        let permit = permits.pop();
        if let Some(group) = msg.group_id.clone() {
            groups.entry(group).or_default().push((msg, permit));
            continue;
        }
        match prepare(shared, queue, msg) {
            Ok(p) => ready.push((p, permit)),
            Err(u) => spawn(
                shared,
                unroutable(shared.clone(), Arc::clone(queue), u),
                permit,
            ),
        }
    }
    for chain in groups.into_values() {
        let task = run_group(shared.clone(), Arc::clone(queue), chain);
        spawn(shared, task, None);
    }
    lease_and_spawn(shared, queue, ready).await;
}

fn spawn<F: Future<Output = Fate> + Send + 'static>(shared: &Shared, task: F, permit: Permit) {
    shared.tasks.spawn(async move {
        task.await;
        drop(permit);
    });
}

fn request(queue: &QueueCtx, p: &Prepared) -> LeaseRequest {
    LeaseRequest {
        key: p.scoped_key.clone(),
        ttl: queue.config.visibility,
        window: p.plugin.manifest.dedup_window(),
    }
}

/// Leases the ready messages in one call and starts their tasks.
async fn lease_and_spawn(shared: &Shared, queue: &Arc<QueueCtx>, ready: Vec<(Prepared, Permit)>) {
    if ready.is_empty() {
        return;
    }
    for (p, _) in &ready {
        shared
            .stats
            .record(&p.msg.queue, &p.plugin.name, Event::Received);
    }
    let requests: Vec<LeaseRequest> = ready.iter().map(|(p, _)| request(queue, p)).collect();
    match shared.store.acquire(&requests).await {
        Ok(acquired) => {
            for ((p, permit), a) in ready.into_iter().zip(acquired) {
                let (shared2, queue2) = (shared.clone(), Arc::clone(queue));
                spawn(
                    shared,
                    async move { leased(&shared2, &queue2, p, a).await },
                    permit,
                );
            }
        }
        Err(e) => {
            tracing::error!(queue = %queue.config.name, error = %format!("{e:#}"), "idempotency store unavailable; putting the batch back");
            for (p, _permit) in ready {
                fail_closed(shared, queue, &p).await;
            }
        }
    }
}

/// No lease, no run: with the store unreachable the message goes back to the queue.
async fn fail_closed(shared: &Shared, queue: &QueueCtx, p: &Prepared) -> Fate {
    let delay = backoff::delay(&shared.config.retry, p.msg.receive_count, 0);
    put_back(shared, queue, &p.msg, &p.plugin.name, delay, Event::Retried).await
}

/// One message from routing to its fate, leasing it on its own.
async fn run_one(shared: &Shared, queue: &Arc<QueueCtx>, msg: Received) -> Fate {
    let p = match prepare(shared, queue, msg) {
        Ok(p) => p,
        Err(u) => return unroutable(shared.clone(), Arc::clone(queue), u).await,
    };
    shared
        .stats
        .record(&p.msg.queue, &p.plugin.name, Event::Received);
    match shared.store.acquire(&[request(queue, &p)]).await {
        Ok(mut acquired) if acquired.len() == 1 => {
            leased(shared, queue, p, acquired.remove(0)).await
        }
        Ok(_) => fail_closed(shared, queue, &p).await,
        Err(e) => {
            tracing::error!(queue = %queue.config.name, error = %format!("{e:#}"), "idempotency store unavailable; putting the message back");
            fail_closed(shared, queue, &p).await
        }
    }
}

/// A FIFO group's messages from one batch, in order. Once one is put back (to be retried), the
/// later ones are put back too, unrun, so the group never overtakes itself.
async fn run_group(shared: Shared, queue: Arc<QueueCtx>, chain: Vec<(Received, Permit)>) -> Fate {
    let mut messages = chain.into_iter();
    for (msg, _permit) in messages.by_ref() {
        if run_one(&shared, &queue, msg).await == Fate::Back {
            for (later, _permit) in messages {
                let plugin = queue.config.plugin.clone();
                put_back(
                    &shared,
                    &queue,
                    &later,
                    &plugin,
                    std::time::Duration::ZERO,
                    Event::Busy,
                )
                .await;
            }
            return Fate::Back;
        }
    }
    Fate::Gone
}

async fn unroutable(shared: Shared, queue: Arc<QueueCtx>, u: Box<Unroutable>) -> Fate {
    match *u {
        Unroutable::NoPlugin { msg, plugin } => {
            shared.stats.record(&msg.queue, &plugin, Event::Received);
            let reason = format!("no plugin named `{plugin}` is loaded");
            retry_or_give_up(
                &shared,
                &queue,
                msg,
                (&plugin, "-"),
                MAX_ATTEMPTS_WITHOUT_PLUGIN,
                0,
                reason,
            )
            .await
        }
        Unroutable::Poison {
            msg,
            plugin,
            reason,
        } => {
            shared.stats.record(&msg.queue, &plugin, Event::Received);
            dead_letter(
                &shared,
                &queue,
                msg,
                Verdict {
                    plugin: &plugin,
                    version: "-",
                    reason,
                },
            )
            .await
        }
    }
}
