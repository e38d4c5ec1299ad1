//! Run: what acquiring the key found decides the delivery's path. A granted lease runs the
//! handler: resolve an offloaded payload, invoke the plugin (a task of its own, aborted if the
//! shutdown grace ends first), and end the delivery by the handler's outcome. Everything else
//! ends without running.

use std::sync::Arc;
use std::time::Duration;

use super::batches::Gathering;
use super::canary::{Versions, invoke_either, versions};
use super::delivery::{Delivery, Fate};
use super::invoke::invoke;
use super::leased::Leased;
use super::route::Routed;
use super::tap::{Ended, RunEnd};
use super::turns::Turn;
use super::waiting::{self, BoxedFate};
use crate::digest::sha256_hex;
use crate::faults::Operation;
use crate::flow::HeldSlot;
use crate::handler::{Failure, HandlerMessage, Invocation, Outcome};
use crate::idempotency::Acquired;
use crate::idempotency::rate::{self, Admission};
use crate::kv::Dropped;
use crate::payload::{Body, ResolveError, Resolved};
use crate::plugin::manifest::OnConflict;
use crate::stats::Event;

/// Shortest delay before a message whose key is leased elsewhere comes back.
const MIN_BUSY_DELAY: Duration = Duration::from_secs(1);

/// When to look again at a key leased elsewhere: the other worker usually finishes long
/// before its lease would lapse, so check back on the retry schedule, but never later than the
/// lapse itself.
pub(super) fn busy_delay(delivery: &Delivery, lease_left: Duration) -> Duration {
    delivery
        .backoff_delay(0)
        .max(MIN_BUSY_DELAY)
        .min(lease_left.max(MIN_BUSY_DELAY))
}

/// Acts on what acquiring the delivery's key found; `slot`: the flow slot taken with the lease
/// (given back as it drops, unless the run holds it).
pub(crate) async fn leased(mut routed: Routed, acquired: Acquired, slot: Option<HeldSlot>) -> Fate {
    let visibility = routed.delivery.queue().config.visibility;
    if let Acquired::Completed {
        digest: Some(done), ..
    } = &acquired
        && let Some(reason) = conflict(&routed, done)
    {
        return Box::pin(routed.delivery.dead_letter(reason)).await;
    }
    match acquired {
        // As `go_on`, written out: a call between would hold the delivery twice in every
        // message's task (see `batch::tests`).
        Acquired::Granted(lease) => {
            let resolved = routed.resolved.take();
            let leased = Leased::new(routed, lease, slot);
            match within_rates(&leased).await {
                RateSlot::Now => run(leased, resolved).await,
                held => Box::pin(held_back(leased, resolved, held)).await,
            }
        }
        Acquired::Completed {
            pending_outbox,
            pending_result,
            pending_for,
            ..
        } if (!pending_outbox.is_empty() || pending_result.is_some())
            && pending_for < visibility =>
        {
            // The worker that completed the key is most likely sending this outbox (or writing
            // its result) right now; doing it too would only make copies. Look again once that worker would have
            // finished, or been presumed dead.
            let delay = busy_delay(&routed.delivery, visibility - pending_for);
            Box::pin(routed.delivery.put_back(delay, Event::Busy)).await
        }
        Acquired::Completed {
            pending_outbox,
            pending_result,
            ..
        } => {
            tracing::debug!("duplicate of completed work; acking without running");
            routed.delivery.tell(|| RunEnd {
                outbox: pending_outbox.clone(),
                ..RunEnd::bare(Some(routed.key.handler.clone()), Ended::Duplicate)
            });
            routed.delivery.record(Event::Duplicate);
            Box::pin(routed.finish(pending_outbox, pending_result)).await
        }
        Acquired::Busy { retry_after } => {
            let delay = busy_delay(&routed.delivery, retry_after);
            Box::pin(routed.delivery.put_back(delay, Event::Busy)).await
        }
    }
}

/// A delivery whose key's slot came while it waited (`waiting::GoOn`): on through its rates.
pub(super) fn after_slot(leased: Leased, resolved: Option<Resolved>, _: Duration) -> BoxedFate {
    Box::pin(go_on(leased, resolved))
}

/// A delivery whose run under its key's rate came while it waited, `wait` from now
/// (`waiting::GoOn`): on through its plugin's rate.
fn after_rate(leased: Leased, resolved: Option<Resolved>, wait: Duration) -> BoxedFate {
    Box::pin(after_flow_rate(leased, resolved, wait))
}

/// Goes on with a leased delivery holding the flow slot it needs (its key's turn came while
/// it waited): within its flow key's rate and its plugin's, then its run.
async fn go_on(leased: Leased, resolved: Option<Resolved>) -> Fate {
    match within_rates(&leased).await {
        RateSlot::Now => run(leased, resolved).await,
        held => Box::pin(held_back(leased, resolved, held)).await,
    }
}

/// Goes on with a delivery whose run under its flow key's rate is reserved `wait` from now
/// (it waited on this host for it): within its plugin's rate, then its run.
async fn after_flow_rate(leased: Leased, resolved: Option<Resolved>, wait: Duration) -> Fate {
    tokio::time::sleep(wait).await;
    match within_plugin_rate(&leased).await {
        RateSlot::Now => run(leased, resolved).await,
        held => Box::pin(held_back(leased, resolved, held)).await,
    }
}

/// A run its rates hold back: under its flow key's rate it waits on this host for its run
/// (`waiting`); under its plugin's it is put back until its slot; with the store silent, on
/// the retry schedule.
async fn held_back(leased: Leased, resolved: Option<Resolved>, held: RateSlot) -> Fate {
    match held {
        RateSlot::Later(later, Event::FlowLimited) => wait_for_rate(leased, resolved, later).await,
        RateSlot::Later(later, why) => leased.put_back(later.max(MIN_BUSY_DELAY), why).await,
        RateSlot::Now | RateSlot::Unanswered => leased.back_off().await,
    }
}

/// Waits for the run's slots under its flow key's rate and its plugin's, when they have one
/// (see `idempotency::rate`): the flow key's first, so a run its key holds back does not
/// spend the plugin's.
async fn within_rates(leased: &Leased) -> RateSlot {
    match within_flow_rate(leased).await {
        RateSlot::Now => within_plugin_rate(leased).await,
        held => held,
    }
}

/// Waits on this host for the delivery's run under its flow key's rate, due `later` from now
/// (or, when the host cannot keep it, puts it back until then).
async fn wait_for_rate(leased: Leased, resolved: Option<Resolved>, later: Duration) -> Fate {
    let Some((key, limit)) = flow_rate(&leased) else {
        return leased.back_off().await;
    };
    let turn = Turn::Rate { key, limit };
    waiting::keep(
        leased,
        resolved,
        turn,
        (later.max(MIN_BUSY_DELAY), after_rate),
    )
    .await
}

/// Where a run stands under its plugin's rate limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RateSlot {
    /// It may run (its slot, if it has a limit, reached and reserved).
    Now,
    /// Its slot is too far off: it comes back (or waits) this long, counted as this.
    Later(Duration, Event),
    /// The store did not answer: the message goes back on the retry schedule.
    Unanswered,
}

/// Waits for the run's slot under its flow key's rate, when it has one (see
/// `idempotency::rate`).
async fn within_flow_rate(leased: &Leased) -> RateSlot {
    match flow_rate(leased) {
        Some((key, limit)) => within_rate(leased, &key, limit, Event::FlowLimited).await,
        None => RateSlot::Now,
    }
}

/// The store key and the limit of the delivery's flow key's rate, when its plugin has one.
fn flow_rate(leased: &Leased) -> Option<(String, rate::Rate)> {
    let plugin = leased.plugin();
    let limit = plugin.manifest.flow.rate?;
    let flow = leased.flow()?;
    let namespace = &leased.delivery().shared().config.namespace;
    let key = rate::key(namespace, &format!("{}:flow:{flow}", plugin.name));
    Some((key, limit))
}

/// Waits for the run's slot under its plugin's rate, when it has one.
async fn within_plugin_rate(leased: &Leased) -> RateSlot {
    let plugin = leased.plugin();
    let Some(limit) = plugin.manifest.limits.rate else {
        return RateSlot::Now;
    };
    let key = rate::key(&leased.delivery().shared().config.namespace, &plugin.name);
    within_rate(leased, &key, limit, Event::RateLimited).await
}

/// Waits for the slot under the rate kept at `key`; a put-back counts as `why`.
async fn within_rate(leased: &Leased, key: &str, limit: rate::Rate, why: Event) -> RateSlot {
    let (delivery, plugin) = (leased.delivery(), leased.plugin());
    let shared = delivery.shared();
    match shared.store.admit(key, limit).await {
        Ok(Admission::After(wait)) => {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            RateSlot::Now
        }
        Ok(Admission::Later(when)) => {
            tracing::debug!(plugin = %plugin.name, %limit, key, "over the rate limit: its run is not due yet");
            RateSlot::Later(when, why)
        }
        Err(e) => {
            if let Some(held_back) = delivery.backend_error(Operation::Admit, e.is_timeout()) {
                tracing::warn!(error = %e, held_back, "could not check the rate limit; putting the message back");
            }
            RateSlot::Unanswered
        }
    }
}

/// Resolves the payload (unless it was, to derive the key), invokes the handler (heartbeat
/// running), and ends the delivery by the outcome.
///
/// The paths most messages never take (a payload to fetch, a canary, a retry, a dead letter,
/// an outage) are boxed where they are awaited: inline, their futures made every message's
/// task several KiB larger, and a task's future is copied whole as it is spawned.
async fn run(mut leased: Leased, resolved: Option<Resolved>) -> Fate {
    let shared = Arc::clone(&leased.delivery().queue().shared);
    let plugin = Arc::clone(leased.plugin());
    let resolved = match resolved {
        Some(resolved) => Some(resolved),
        None => {
            let delivery = leased.delivery();
            let fetched = match delivery.body() {
                Body::Inline => Ok(None),
                Body::BadPointer(e) => Err(ResolveError::Reject(e.to_string())),
                Body::Pointer(pointer) => {
                    let mut step = delivery.span().step("payload fetch");
                    let attributes = &delivery.msg().attributes;
                    let fetched = Box::pin(shared.payloads.fetch(pointer, attributes)).await;
                    if let Err(e) = &fetched {
                        step.error(e.kind(), e);
                    }
                    fetched.map(Some)
                }
            };
            match fetched {
                Ok(resolved) => {
                    if resolved.is_some() {
                        leased.delivery_mut().payload_verified();
                    }
                    resolved
                }
                Err(e) => return Box::pin(unfetchable_leased(leased, e)).await,
            }
        }
    };
    if plugin.manifest.idempotency.key.may_name_other_bodies() {
        let sha256 = match &resolved {
            Some(r) => r.sha256.clone(),
            None => sha256_hex(&leased.delivery().msg().body),
        };
        leased.running_on(sha256);
    }
    if let Some(flow) = leased.flow() {
        shared.fair.ran(&plugin.name, flow);
    }
    let input = handler_message(&leased, resolved);
    if let Some(capture) = &leased.delivery().queue().capture {
        capture.offer(&input);
    }
    let (plugin, canary) = versions(&shared.registry, plugin);
    // A batch handler's message that has failed before is called alone (see `batches`).
    let gathering = if leased.has_failed_before() {
        Gathering::Alone
    } else {
        Gathering::Gathered
    };
    let call = async {
        match &canary {
            Some(slot) => {
                let delivery = leased.delivery();
                let both = Versions {
                    serving: &plugin,
                    canary: slot,
                };
                Box::pin(invoke_either(delivery, both, input, gathering)).await
            }
            None => (
                invoke(leased.delivery(), &plugin, input, gathering).await,
                plugin,
            ),
        }
    };
    // The grace's end first: a batch call dropped by it leaves its messages without an answer,
    // which must not count as a failure.
    let finished = tokio::select! {
        biased;
        _ = shared.abandon.cancelled() => None,
        result = call => Some(result),
    };
    let Some((result, ran)) = finished else {
        tracing::warn!("shutdown grace over; releasing unfinished message");
        return Box::pin(leased.put_back(Duration::ZERO, Event::Released)).await;
    };
    leased.ran_with(ran);
    leased.call_ended();
    told(&leased, &result);
    match result {
        Ok(Invocation {
            outcome: Outcome::Ack,
            outbox,
            result,
            state,
        }) => leased.ack(outbox, result, state).await,
        Ok(Invocation {
            outcome: Outcome::Retry(secs),
            state,
            ..
        }) => {
            leased.drop_state(Dropped::Retry, &state);
            let reason = "the handler asked for a retry".to_string();
            Box::pin(leased.retry(reason, secs)).await
        }
        Ok(Invocation {
            outcome: Outcome::Reject(reason),
            state,
            ..
        }) => {
            leased.drop_state(Dropped::Reject, &state);
            leased.delivery().span().error("rejected", &reason);
            Box::pin(leased.dead_letter(reason)).await
        }
        Err(Failure::StateUnavailable(reason)) => {
            let delivery = leased.delivery();
            if let Some(held_back) = delivery.backend_error(Operation::StateRead, false) {
                tracing::warn!(%reason, held_back, "the state store did not answer the handler; putting the message back");
            }
            Box::pin(leased.back_off()).await
        }
        Err(failure) => {
            leased.delivery().span().error(failure.kind(), &failure);
            leased.delivery().record(Event::Failed);
            Box::pin(leased.retry(failure.to_string(), 0)).await
        }
    }
}

/// Tells the queue's tap (when it has one) how the handler answered, before the fate that
/// carries the answer out: an ack is told as it commits (`Leased::ack`), with what it
/// committed.
fn told(leased: &Leased, result: &Result<Invocation, Failure>) {
    let key = || Some(leased.key().handler.clone());
    let ended = match result {
        Ok(Invocation {
            outcome: Outcome::Ack,
            ..
        }) => return,
        Ok(Invocation {
            outcome: Outcome::Retry(secs),
            ..
        }) => Ended::Retry(*secs),
        Ok(Invocation {
            outcome: Outcome::Reject(reason),
            ..
        }) => Ended::Reject(reason.clone()),
        Err(failure) => {
            let failure = failure.clone();
            return leased.delivery().tell(|| RunEnd {
                failure: Some(failure.clone()),
                ..RunEnd::bare(key(), Ended::Failed(failure.to_string()))
            });
        }
    };
    leased.delivery().tell(|| RunEnd::bare(key(), ended));
}

/// Whether a delivery of a completed key (whose run handled a body with sha256 `done`) carries
/// another body. Reported (logged, counted) when it does; the reason to dead-letter it is
/// returned when the plugin says `on-conflict = "reject"`, and otherwise it goes on as the
/// duplicate it claims to be.
fn conflict(routed: &Routed, done: &str) -> Option<String> {
    let delivery = &routed.delivery;
    let mine = routed
        .body_digest()
        .filter(|mine| !mine.eq_ignore_ascii_case(done))?;
    let key = routed.key.handler.as_str();
    tracing::warn!(key, ran = done, this = %mine, "a completed key came again with a different body");
    delivery.record(Event::Conflict);
    let on_conflict = routed.plugin.manifest.idempotency.on_conflict;
    (on_conflict == OnConflict::Reject).then(|| {
        format!("key `{key}` was completed on a body with sha256 {done}, and this one's is {mine}")
    })
}

/// Ends a delivery whose payload could not be fetched: a pointer that can never be followed
/// (malformed, disallowed, gone, too large, mismatched) is dead-lettered; an unreachable store
/// puts the message back, as an unreachable idempotency store does, without using up an
/// attempt (the message is fine, and the handler never ran).
pub(crate) async fn unfetchable(delivery: Delivery, error: ResolveError) -> Fate {
    match error {
        ResolveError::Reject(reason) => delivery.dead_letter(reason).await,
        ResolveError::Retry(reason) => {
            payload_unavailable(&delivery, &reason);
            delivery.back_off().await
        }
    }
}

/// As [`unfetchable`], for a delivery that holds its lease (released as it ends).
async fn unfetchable_leased(leased: Leased, error: ResolveError) -> Fate {
    match error {
        ResolveError::Reject(reason) => leased.dead_letter(reason).await,
        ResolveError::Retry(reason) => {
            payload_unavailable(leased.delivery(), &reason);
            leased.back_off().await
        }
    }
}

/// Counts (and, once per burst, logs) a payload store that did not answer.
fn payload_unavailable(delivery: &Delivery, reason: &str) {
    if let Some(held_back) = delivery.backend_error(Operation::PayloadFetch, false) {
        tracing::warn!(%reason, held_back, "payload store unavailable; putting the message back");
    }
}

/// What the handler sees: the message (its payload fetched) and what the host decided.
fn handler_message(leased: &Leased, resolved: Option<Resolved>) -> HandlerMessage {
    let m = leased.delivery().msg();
    let (body, attributes) = match resolved {
        Some(r) => (r.body, r.attributes),
        None => (m.body.clone(), m.attributes.clone()),
    };
    HandlerMessage {
        id: m.id.clone(),
        idempotency_key: leased.key().handler.clone(),
        fencing_token: leased.fencing_token(),
        queue: m.queue.clone(),
        body,
        attributes,
        receive_count: m.delivery_count,
        sent_at_ms: m.sent_at_ms,
        group_id: m.group_id.clone(),
        time_limit: leased.time_limit(),
    }
}
