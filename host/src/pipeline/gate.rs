//! The flow gate between routing and the lease (`crate::flow`): a routed delivery is admitted
//! to its key's fair share of this host's slots, then its lease and its flow slot are asked
//! for in one store call, and a run over its key's limit waits on this host for a slot
//! (`waiting`) or is put back, without using an attempt.

use std::time::Duration;

use super::delivery::Fate;
use super::leased::Leased;
use super::route::Routed;
use super::run::after_slot;
use super::run::busy_delay;
use super::turns::Turn;
use super::waiting;
use crate::faults::Operation;
use crate::flow::HeldSlot;
use crate::flow::fair::{Arrival, Refused, Ticket};
use crate::idempotency::slots::{self, SlotAnswer, SlotRequest};
use crate::idempotency::{Acquired, IdempotencyError, Lease, LeaseRequest, StoreResult};
use crate::stats::Event;

/// A lease's answer and, when the run needs a flow slot, the slot's.
pub(super) type Answer = (StoreResult<Acquired>, Option<StoreResult<SlotAnswer>>);

/// Admits `routed` to its flow key's share of this host's slots: a ticket to hold while it
/// runs (`None` when its plugin does not control flow), or why not.
pub(super) fn admit(routed: &Routed) -> Result<Option<Ticket>, Refused> {
    let Some(flow) = &routed.flow else {
        return Ok(None);
    };
    let policy = &routed.plugin.manifest.flow;
    let shared = routed.delivery.shared();
    let arrival = Arrival {
        returning: routed.delivery.msg().delivery_count > 1,
        // Over the key's limit it would wait on this host (`waiting`), so the store decides.
        may_wait: routed.delivery.may_wait() && !shared.lines.is_full(),
        waiting: false,
    };
    (shared
        .fair
        .admit(&routed.plugin.name, flow, policy, arrival))
    .map(Some)
}

/// Ends a delivery the host would not admit: put back for a while, using no attempt.
pub(super) async fn refused(routed: Routed, why: Refused) -> Fate {
    let delivery = routed.delivery;
    let flow = routed.flow.as_deref().unwrap_or_default();
    match why {
        // Counted by the shares as they refused it. It could not wait on this host: back
        // for the time a slot is likely to take to free.
        Refused::AtLimit => {
            tracing::debug!(
                flow,
                "this host runs the flow key's limit; putting the message back"
            );
            let delay = delivery.shared().fair.run_time(&routed.plugin.name, flow);
            delivery.put_back(delay, Event::FlowLimited).await
        }
        Refused::OverShare(delay) => {
            tracing::debug!(
                flow,
                ?delay,
                "the flow key holds its fair share; putting the message back"
            );
            delivery.put_back(delay, Event::FairShare).await
        }
    }
}

/// The flow slot `routed` needs (`[flow] max-concurrency`), if any.
fn slot_request(routed: &Routed) -> Option<SlotRequest> {
    let limit = routed.plugin.manifest.flow.max_concurrency?;
    let flow = routed.flow.as_deref()?;
    let shared = routed.delivery.shared();
    Some(SlotRequest {
        key: slots::key(&shared.config.namespace, &routed.plugin.name, flow),
        limit,
        ttl: routed.delivery.queue().config.visibility,
    })
}

/// Asks for each delivery's lease and the flow slots they need in one store call.
pub(super) async fn lease(routed: &[&Routed]) -> Vec<Answer> {
    let Some(first) = routed.first() else {
        return Vec::new();
    };
    let store = &first.delivery.shared().store;
    let requests: Vec<LeaseRequest> = routed.iter().map(|r| r.request.clone()).collect();
    let wanted: Vec<Option<SlotRequest>> = routed.iter().map(|r| slot_request(r)).collect();
    let slot_requests: Vec<SlotRequest> = wanted.iter().flatten().cloned().collect();
    if slot_requests.is_empty() {
        let answers = each_answer(routed.len(), store.acquire(&requests).await);
        return answers.into_iter().map(|a| (a, None)).collect();
    }
    let (leases, slots) = match store.acquire_with_slots(&requests, &slot_requests).await {
        Ok((leases, slots))
            if leases.len() == requests.len() && slots.len() == slot_requests.len() =>
        {
            (leases, slots)
        }
        Ok(_) => {
            let e = IdempotencyError::Corrupt("answers do not match the requests".into());
            (
                vec![Err(e.clone()); requests.len()],
                vec![Err(e); slot_requests.len()],
            )
        }
        Err(e) => (
            vec![Err(e.clone()); requests.len()],
            vec![Err(e); slot_requests.len()],
        ),
    };
    let mut slots = slots.into_iter();
    (leases.into_iter().zip(wanted))
        .map(|(lease, wanted)| (lease, wanted.and_then(|_| slots.next())))
        .collect()
}

/// The store's answer for each of `n` lease requests: its own, or the call's error for all.
pub(super) fn each_answer(
    n: usize,
    answer: StoreResult<Vec<StoreResult<Acquired>>>,
) -> Vec<StoreResult<Acquired>> {
    match answer {
        Ok(answers) if answers.len() == n => answers,
        Ok(answers) => {
            let e = IdempotencyError::Corrupt(format!("{} answers to {n} requests", answers.len()));
            vec![Err(e); n]
        }
        Err(e) => vec![Err(e); n],
    }
}

/// What the slot's answer means for a delivery whose lease was answered `acquired`: go on
/// (holding the slot, if granted one), or end here, over the key's limit.
pub(super) enum Slotted {
    /// Go on, holding this slot (`None`: none needed, or not granted a lease).
    Go(Option<HeldSlot>),
    /// Granted the lease, but its key is at its limit (or the slot went unanswered).
    Stop(Lease, Result<Duration, IdempotencyError>),
}

/// Sorts out a lease's answer and its slot's.
pub(super) fn slotted(
    routed: &Routed,
    acquired: &Acquired,
    slot: Option<StoreResult<SlotAnswer>>,
) -> Slotted {
    let releases = routed.delivery.shared().slot_releases.sender();
    match (slot, acquired) {
        (None, _) => Slotted::Go(None),
        // Not granted: a slot taken is given back as it drops; none was needed.
        (Some(Ok(SlotAnswer::Held(slot))), _) => Slotted::Go(Some(HeldSlot::new(releases, slot))),
        (Some(Ok(SlotAnswer::Full { retry_after })), Acquired::Granted(lease)) => {
            Slotted::Stop(lease.clone(), Ok(retry_after))
        }
        (Some(Err(e)), Acquired::Granted(lease)) => Slotted::Stop(lease.clone(), Err(e)),
        (Some(_), _) => Slotted::Go(None),
    }
}

/// Carries on a delivery granted its lease whose flow key is at its limit: it waits on this
/// host for one of the key's slots (`waiting`), or, when it cannot, the lease is given back
/// unrun and the message put back for the time a slot is likely to take to free (the key's
/// run time); when the slot went unanswered, on the retry schedule. It uses no attempt.
pub(super) async fn over_limit(
    mut routed: Routed,
    lease: Lease,
    slot: Result<Duration, IdempotencyError>,
) -> Fate {
    let request = slot_request(&routed);
    let resolved = routed.resolved.take();
    let leased = Leased::new(routed, lease, None);
    match (slot, request) {
        (Ok(_), Some(request)) => {
            let flow = leased.flow().unwrap_or_default();
            let shared = leased.delivery().shared();
            let otherwise = shared.fair.run_time(&leased.plugin().name, flow);
            let go_on = (otherwise, after_slot as waiting::GoOn);
            waiting::keep(leased, resolved, Turn::Slot(request), go_on).await
        }
        (Ok(retry_after), None) => {
            let delay = busy_delay(leased.delivery(), retry_after);
            leased.put_back(delay, Event::FlowLimited).await
        }
        (Err(e), _) => {
            let delivery = leased.delivery();
            if let Some(held_back) = delivery.backend_error(Operation::Acquire, e.is_timeout()) {
                tracing::warn!(error = %e, held_back, "could not take a flow slot; putting the message back");
            }
            leased.back_off().await
        }
    }
}
