//! Firing a tick: one claim of its key in the store with its message as the outbox, then the
//! send, then the outbox marked sent.
//!
//! The claim is the once: of every host that finds the tick due, one wins and sends; the others
//! find it taken. A host that won and then died before its send (or before the mark) leaves the
//! message pending in the tick's record; a host that finds it still pending after
//! [`RESEND_AFTER`] takes it over (one step in the store, which restarts its pending clock, so
//! one host of those that find it overdue at once) and sends it again, under the same key, so
//! the consumer drops the copy if the first send did land.

use std::time::Duration;

use crate::config::schedule::ScheduleConfig;
use crate::idempotency::{Claimed, IdempotencyError, Store};
use crate::message::Outgoing;
use crate::source::{QueueSource, SourceError};

use super::tick::Tick;

/// How long a claimed tick's message may stay unsent before another host sends it.
pub(crate) const RESEND_AFTER: Duration = Duration::from_secs(10);

/// What firing a tick came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fired {
    /// This host claimed it and sent its message.
    Sent,
    /// Another host had claimed it, and its message is sent (or being sent).
    Elsewhere,
    /// Another host claimed it and did not send within [`RESEND_AFTER`]: this one sent it.
    Resent,
    /// Another host claimed it a moment ago and is sending: look again on the next pass.
    Pending,
}

/// Why a tick did not fire.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FireError {
    /// The store did not answer the claim (nothing was claimed, or it will be found pending).
    #[error("claiming the tick: {0}")]
    Store(#[from] IdempotencyError),
    /// The queue refused the send; the claim holds the message, and a later pass sends it.
    #[error("sending the tick's message to `{queue}`: {error}")]
    Send {
        /// The target queue.
        queue: String,
        /// What it said.
        error: SourceError,
    },
}

/// Fires `tick` of `schedule`.
pub(crate) async fn fire(
    store: &dyn Store,
    source: &dyn QueueSource,
    namespace: &str,
    schedule: &ScheduleConfig,
    tick: &Tick,
) -> Result<Fired, FireError> {
    let key = tick.stored_key(namespace);
    let message = tick.message(schedule);
    let claimed = store
        .claim(&key, std::slice::from_ref(&message), schedule.keep_ticks)
        .await?;
    let (outbox, fired) = match claimed {
        Claimed::Won => (vec![message], Fired::Sent),
        Claimed::Taken { pending_outbox, .. } if pending_outbox.is_empty() => {
            return Ok(Fired::Elsewhere);
        }
        Claimed::Taken { pending_for, .. } if pending_for < RESEND_AFTER => {
            return Ok(Fired::Pending);
        }
        // Overdue: of the hosts that find it so at once (they wake on the same tick), the one
        // that takes it over sends it; the others find it pending again.
        Claimed::Taken { .. } => match store.take_over(&key, RESEND_AFTER).await? {
            Some(pending_outbox) => (pending_outbox, Fired::Resent),
            None => return Ok(Fired::Pending),
        },
    };
    send(source, &outbox).await?;
    if let Err(e) = store.outbox_sent(&key).await {
        // Sent; a host that finds it pending later sends it again under the same key.
        tracing::warn!(key, error = %e, "tick sent, but not yet marked sent");
    }
    Ok(fired)
}

async fn send(source: &dyn QueueSource, outbox: &[Outgoing]) -> Result<(), FireError> {
    source
        .send(outbox)
        .await
        .map(drop)
        .map_err(|error| FireError::Send {
            queue: outbox.first().map(|m| m.queue.clone()).unwrap_or_default(),
            error,
        })
}
