//! A received batch: read, route and key each message, lease them in one store call, and start
//! a task per message. Messages of a FIFO group run in order, one at a time, in a task of their
//! own; so do the runs of a message that holds several (`parts`).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tracing::{Instrument as _, Span};

use super::context::QueueCtx;
use super::delivery::{Delivery, Fate, PluginRef, log_span};
use super::gate::{self, Slotted};
use super::heartbeat::Hold;
use super::parts;
use super::route::{Read, Routed, Unroutable, needs_payload, read};
use super::run;
use super::tap::{Ended, RunEnd};
use crate::faults::Operation;
use crate::idempotency::{Acquired, IdempotencyError};
use crate::message::Received;
use crate::payload::Body;
use crate::stats::{Backend, Event};
use crate::traces::StepSpan;
use opentelemetry::KeyValue;

type Permit = Option<OwnedSemaphorePermit>;

/// Starts the work for a received batch; each message's task holds one in-flight permit.
pub(crate) async fn dispatch(
    queue: &Arc<QueueCtx>,
    batch: Vec<Received>,
    mut permits: Vec<OwnedSemaphorePermit>,
) {
    let mut groups: BTreeMap<String, Vec<(Received, Permit)>> = BTreeMap::new();
    let mut ready = Vec::new();
    for msg in batch {
        let permit = permits.pop();
        // In order within a group on a FIFO queue only: a standard queue's groups (SQS fair
        // queues) name tenants, not orders.
        if let Some(group) = msg.group_id.clone()
            && msg.malformed.is_none()
            && queue.config.name.ends_with(".fifo")
        {
            groups.entry(group).or_default().push((msg, permit));
            continue;
        }
        let span = log_span(&msg);
        if let Some(reason) = msg.malformed.clone() {
            let task = malformed(Arc::clone(queue), msg, reason);
            spawn(queue, Box::pin(task).instrument(span), permit);
            continue;
        }
        let body = Body::of(&msg.body, &msg.attributes);
        if needs_payload(queue, &msg, &body) {
            let task = run_one(Arc::clone(queue), msg, body, true);
            spawn(queue, Box::pin(task).instrument(span), permit);
            continue;
        }
        match span.in_scope(|| read(queue, msg, body, None)) {
            Read::One(Ok(routed)) => ready.push((routed, permit, span)),
            Read::One(Err(unroutable)) => {
                spawn(queue, Box::pin(unroutable.end()).instrument(span), permit)
            }
            other => spawn(
                queue,
                Box::pin(ended(Arc::clone(queue), other)).instrument(span),
                permit,
            ),
        }
    }
    for chain in groups.into_values() {
        spawn(queue, Box::pin(run_group(Arc::clone(queue), chain)), None);
    }
    lease_and_spawn(queue, ready).await;
}

/// A message that could not be read as it arrived is dead-lettered alone, with why.
async fn malformed(queue: Arc<QueueCtx>, msg: Received, reason: String) -> Fate {
    let plugin = PluginRef::Named(queue.config.plugin.clone());
    let delivery = Delivery::received(queue, msg, Body::Inline, plugin);
    let reason = format!("malformed message: {reason}");
    delivery.tell(|| RunEnd::bare(None, Ended::Refused(reason.clone())));
    delivery.dead_letter(reason).await
}

/// Carries a read message to its end: its one run leased alone, its parts one after another,
/// or, holding nothing to run, acked (counted as ignored).
async fn ended(queue: Arc<QueueCtx>, read: Read) -> Fate {
    match read {
        Read::One(Ok(routed)) => lease_one(routed).await,
        Read::One(Err(unroutable)) => unroutable.end().await,
        Read::Parts { msg, body, runs } => run_parts(queue, msg, body, runs).await,
        Read::Nothing(delivery) => {
            tracing::debug!("the message holds nothing to run; acking it");
            delivery.record(Event::Ignored);
            delivery.delete()
        }
    }
}

/// Spawns a message's task, boxed by the caller (`Box::pin(run).instrument(span)`): a run is a
/// large future (about 9 KiB, most of it the handler's call and the ack), and boxed before any
/// wrapper, it is copied once, into the box; each layer spawning adds (the span, this block,
/// the tracker, tokio's task cell) then moves a pointer.
fn spawn<F: Future<Output = Fate> + Send + 'static>(queue: &QueueCtx, task: F, permit: Permit) {
    queue.shared.tasks.spawn(async move {
        task.await;
        drop(permit);
    });
}

/// Admits the ready messages to their flow keys' shares, leases the admitted ones (with the
/// flow slots they need) in one call, and starts their tasks.
async fn lease_and_spawn(queue: &Arc<QueueCtx>, ready: Vec<(Routed, Permit, Span)>) {
    let mut admitted = Vec::with_capacity(ready.len());
    for (routed, permit, span) in ready {
        match gate::admit(&routed) {
            Ok(ticket) => admitted.push((routed, permit, span, ticket)),
            Err(why) => {
                let refused = Box::pin(gate::refused(routed, why));
                spawn(queue, refused.instrument(span), permit)
            }
        }
    }
    if admitted.is_empty() {
        return;
    }
    let routed: Vec<&Routed> = admitted.iter().map(|(r, ..)| r).collect();
    let steps: Vec<StepSpan> = routed.iter().map(|r| lease_step(r, routed.len())).collect();
    let answers = gate::lease(&routed).await;
    for (((routed, permit, span, ticket), answer), step) in
        admitted.into_iter().zip(answers).zip(steps)
    {
        let task = async move {
            let fate = leased(routed, answer, step).await;
            fate.end_ticket(ticket);
            fate
        };
        spawn(queue, Box::pin(task).instrument(span), permit);
    }
}

/// A message whose lease was asked for: run as the store answered, or put back when it could
/// not answer for this key or its flow key is at its limit.
async fn leased(routed: Routed, answer: gate::Answer, mut step: StepSpan) -> Fate {
    let (answer, slot) = answer;
    match answer {
        Ok(acquired) => {
            lease_found(&mut step, &acquired);
            drop(step);
            match gate::slotted(&routed, &acquired, slot) {
                Slotted::Go(slot) => run::leased(routed, acquired, slot).await,
                Slotted::Stop(lease, why) => Box::pin(gate::over_limit(routed, lease, why)).await,
            }
        }
        Err(e) => {
            step.error(Backend::Idempotency.error_type(), &e);
            drop(step);
            fail_closed(routed.delivery, &e).await
        }
    }
}

/// The span of leasing `routed`'s key, in a store call for `batch` keys.
fn lease_step(routed: &Routed, batch: usize) -> StepSpan {
    let mut step = routed.delivery.span().step("lease");
    step.set(|| vec![KeyValue::new("qhost.lease.batch_size", batch as i64)]);
    step
}

/// Records on a lease step what the store found.
fn lease_found(step: &mut StepSpan, acquired: &Acquired) {
    let found = match acquired {
        Acquired::Granted(_) => "granted",
        Acquired::Completed { .. } => "completed",
        Acquired::Busy { .. } => "busy",
    };
    step.set(|| vec![KeyValue::new("qhost.lease.result", found)]);
}

/// No lease, no run: with the store unreachable the message goes back to the queue, without
/// using up an attempt.
async fn fail_closed(delivery: Delivery, error: &IdempotencyError) -> Fate {
    if let Some(held_back) = delivery.backend_error(Operation::Acquire, error.is_timeout()) {
        tracing::error!(%error, held_back, "idempotency store unavailable; putting the message back");
    }
    delivery.back_off().await
}

/// One message from reading to its fate, leasing it on its own; `fetch`: whether its payload
/// is fetched before it is read (its format or its key needs it).
async fn run_one(queue: Arc<QueueCtx>, msg: Received, body: Body, fetch: bool) -> Fate {
    let fetched = match (&body, fetch) {
        (Body::Pointer(pointer), true) => {
            match queue.shared.payloads.fetch(pointer, &msg.attributes).await {
                Ok(resolved) => Some(resolved),
                Err(e) => {
                    let plugin = PluginRef::Named(queue.config.plugin.clone());
                    let delivery = Delivery::received(Arc::clone(&queue), msg, body, plugin);
                    return run::unfetchable(delivery, e).await;
                }
            }
        }
        (Body::BadPointer(e), true) => {
            let plugin = PluginRef::Named(queue.config.plugin.clone());
            let reason = e.to_string();
            let delivery = Delivery::received(Arc::clone(&queue), msg, body, plugin);
            return delivery.dead_letter(reason).await;
        }
        _ => None,
    };
    let read = read(&queue, msg, body, fetched);
    ended(queue, read).await
}

/// Runs a message's parts in order, then ends the message by how they ended (`parts`).
async fn run_parts(
    queue: Arc<QueueCtx>,
    msg: Received,
    body: Body,
    runs: Vec<Result<Routed, Box<Unroutable>>>,
) -> Fate {
    let mut parts = None;
    let mut verified = false;
    for run in runs {
        let delivery = match &run {
            Ok(routed) => &routed.delivery,
            Err(unroutable) => &unroutable.delivery,
        };
        verified |= delivery.is_payload_verified();
        parts = delivery.part().map(|p| Arc::clone(&p.parts)).or(parts);
        let span = tracing::info_span!("part");
        match run {
            Ok(routed) => lease_one(routed).instrument(span).await,
            Err(unroutable) => unroutable.end().instrument(span).await,
        };
    }
    let fates = parts.map(|p| p.fates()).unwrap_or_default();
    let plugin = PluginRef::Named(queue.config.plugin.clone());
    let mut whole = Delivery::new(queue, msg, body, plugin);
    if verified {
        whole.payload_verified();
    }
    parts::settle(whole, &fates).await
}

/// Leases one routed delivery on its own (admitted to its flow key's share first) and carries
/// it to its fate.
async fn lease_one(routed: Routed) -> Fate {
    let ticket = match gate::admit(&routed) {
        Ok(ticket) => ticket,
        Err(why) => return gate::refused(routed, why).await,
    };
    let step = lease_step(&routed, 1);
    let answer = gate::lease(&[&routed]).await.remove(0);
    let fate = leased(routed, answer, step).await;
    fate.end_ticket(ticket);
    fate
}

/// A FIFO group's messages from one batch, in order. The later ones are kept hidden while they
/// wait. Once one is put back (to be retried), the later ones are put back too, unrun, so the
/// group never overtakes itself.
async fn run_group(queue: Arc<QueueCtx>, chain: Vec<(Received, Permit)>) -> Fate {
    let waiting = chain
        .iter()
        .skip(1)
        .map(|(m, _)| m.handle.clone())
        .collect();
    let hold = Hold::start(&queue, waiting);
    let mut messages = chain.into_iter();
    for (msg, _permit) in messages.by_ref() {
        hold.let_go(&msg.handle).await;
        let span = log_span(&msg);
        let body = Body::of(&msg.body, &msg.attributes);
        let fetch = needs_payload(&queue, &msg, &body);
        if run_one(Arc::clone(&queue), msg, body, fetch)
            .instrument(span)
            .await
            == Fate::Back
        {
            for (later, _permit) in messages {
                hold.let_go(&later.handle).await;
                let span = log_span(&later);
                let plugin = PluginRef::Named(queue.config.plugin.clone());
                let body = Body::Inline;
                let delivery = Delivery::new(Arc::clone(&queue), later, body, plugin);
                let put_back = delivery.put_back(std::time::Duration::ZERO, Event::Busy);
                put_back.instrument(span).await;
            }
            return Fate::Back;
        }
    }
    Fate::Gone
}

#[cfg(test)]
mod tests {
    /// The size of a future returned by an async fn of three arguments.
    fn future_size<A, B, C, F: Future>(_: fn(A, B, C) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every message's task is a `leased` future, copied once into its box: the paths few
    /// messages take are boxed where they are awaited (`run`, `leased`, `delivery`) so it stays
    /// near 9 KiB (it was 16 KiB with them inline). A new large future awaited inline on the
    /// way shows here.
    #[test]
    fn a_message_s_task_stays_small() {
        let size = future_size(super::leased);
        assert!(size <= 10 * 1024, "a message's task is {size} bytes");
    }
}
