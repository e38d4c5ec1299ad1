//! Waiting for a flow key's turn on the host, instead of in the queue.
//!
//! A message whose key is at its fleet-wide concurrency (`[flow] max-concurrency`), or whose
//! run under the key's rate is not due yet (`[flow] rate`), used to be put back for a second
//! or more: each of the key's slots then sat idle between runs while its messages were hidden
//! in the queue, and a key held to N runs at once used a fraction of N. Now the host keeps it:
//! its lease and visibility are extended by its heartbeat as for a running message, it holds
//! none of the host's in-flight slots while it waits, and it goes on as soon as its turn comes
//! (`turns` drives the lines and says when).
//!
//! What cannot be kept (its line or the host full, a part of a message, a FIFO group's message,
//! a queue without heartbeats) is put back as before, for the time its turn is likely to take:
//! a slot's, the key's run time; the rate's, until its run. Nothing waiting uses an attempt.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use super::delivery::{Fate, log_span};
use super::leased::Leased;
use super::turns::{GiveUp, Go, Parked, Took, Turn};
use crate::faults::Operation;
use crate::flow::HeldSlot;
use crate::flow::policy::FlowPolicy;
use crate::idempotency::IdempotencyError;
use crate::payload::Resolved;
use crate::stats::Event;

/// A delivery's stages from its turn on: given the delivery and what the handler sees, and
/// how long until its run under its key's rate (zero when it waited for a slot).
pub(super) type GoOn = fn(Leased, Option<Resolved>, Duration) -> BoxedFate;

/// A delivery's fate, boxed: a message that waited goes on through the stages that may send
/// it to wait again, and the compiler cannot see through that loop by itself.
pub(super) type BoxedFate = Pin<Box<dyn Future<Output = Fate> + Send>>;

/// A message kept while it waits.
struct Waiting {
    leased: Leased,
    resolved: Option<Resolved>,
    turn: Turn,
    go_on: GoOn,
}

/// Keeps `leased` waiting for `turn` when it may wait and its key's line has room, to go on
/// through `go_on` when its turn comes; otherwise puts it back for `otherwise`. Either way it
/// uses no attempt.
pub(super) fn keep(
    leased: Leased,
    resolved: Option<Resolved>,
    turn: Turn,
    (otherwise, go_on): (Duration, GoOn),
) -> BoxedFate {
    Box::pin(async move {
        if !leased.delivery().may_wait() {
            return put_back(leased, otherwise).await;
        }
        let lines = Arc::clone(&leased.delivery().shared().lines);
        let waiting = Box::new(Waiting {
            leased,
            resolved,
            turn,
            go_on,
        });
        match lines.keep(waiting) {
            Ok(()) => {
                tracing::debug!("the flow key's turn has not come; waiting for it on this host");
                Fate::Waiting
            }
            // Put back in a task of its own: this one has handed it over.
            Err(parked) => {
                parked.give_up(GiveUp::Back(otherwise), lines.tasks());
                Fate::Back
            }
        }
    })
}

/// Puts a message its key holds back into the queue for `delay`, counted `flow_limited`.
async fn put_back(leased: Leased, delay: Duration) -> Fate {
    if let Some(flow) = leased.flow() {
        let shared = leased.delivery().shared();
        shared.fair.limited(&leased.plugin().name, flow);
    }
    tracing::debug!(
        ?delay,
        "the flow key's turn has not come; putting the message back"
    );
    leased.put_back(delay, Event::FlowLimited).await
}

impl Parked for Waiting {
    fn turn(&self) -> &Turn {
        &self.turn
    }

    fn plugin(&self) -> &str {
        &self.leased.plugin().name
    }

    fn flow(&self) -> &str {
        self.leased.flow().unwrap_or_default()
    }

    fn policy(&self) -> &FlowPolicy {
        &self.leased.plugin().manifest.flow
    }

    fn start(self: Box<Self>, go: Go, tasks: &TaskTracker) {
        let Waiting {
            mut leased,
            resolved,
            go_on,
            ..
        } = *self;
        let wait = match go.took {
            Took::Slot(slot) => {
                let releases = leased.delivery().shared().slot_releases.sender();
                leased.hold_slot(HeldSlot::new(releases, slot));
                Duration::ZERO
            }
            Took::Rate(wait) => wait,
        };
        let span = log_span(leased.delivery().msg());
        let (permit, ticket) = (go.permit, go.ticket);
        let task = async move {
            let fate = go_on(leased, resolved, wait).await;
            fate.end_ticket(Some(ticket));
            drop(permit);
        };
        tasks.spawn(task.instrument(span));
    }

    fn give_up(self: Box<Self>, why: GiveUp, tasks: &TaskTracker) {
        let leased = self.leased;
        let span = log_span(leased.delivery().msg());
        match why {
            GiveUp::Back(delay) => tasks.spawn(put_back(leased, delay).instrument(span)),
            GiveUp::Shutdown => {
                let released = leased.put_back(Duration::ZERO, Event::Released);
                tasks.spawn(released.instrument(span))
            }
        };
    }

    fn unanswered(&self, e: &IdempotencyError) {
        let delivery = self.leased.delivery();
        if let Some(held_back) = delivery.backend_error(Operation::Acquire, e.is_timeout()) {
            tracing::warn!(error = %e, held_back, "could not ask for a waiting message's turn");
        }
    }
}
