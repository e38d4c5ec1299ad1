//! A host's clock for schedules, and how far it is from the store's.
//!
//! Ticks are instants computed from the calendar, so hosts a few seconds apart claim the same
//! tick; a host's clock only decides *when* it looks. A host far off would fire ticks early (or
//! late) for the whole fleet, so before firing it compares its clock with the store's (Redis's
//! `TIME`) and, beyond a schedule's `max-clock-skew-secs`, logs it and leaves firing to others
//! until it is back.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};

use crate::idempotency::{Claims, StoreResult};

/// Added to this process's clock, for tests that run hosts with clocks apart (test builds only
/// set it).
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Sets this process's clock offset (see [`crate::testing`]).
#[cfg(feature = "test-support")]
pub(crate) fn offset_by(ms: i64) {
    OFFSET_MS.store(ms, Ordering::Relaxed);
}

/// The host's time.
pub(crate) fn now() -> Timestamp {
    let offset = SignedDuration::from_millis(OFFSET_MS.load(Ordering::Relaxed));
    Timestamp::now()
        .checked_add(offset)
        .unwrap_or_else(|_| Timestamp::now())
}

/// How far the host's clock is ahead of the store's (negative: behind), measured against the
/// midpoint of the round trip.
pub(crate) async fn skew(store: &dyn Claims) -> StoreResult<SignedDuration> {
    let (before, started) = (now(), Instant::now());
    let theirs = store.time().await?;
    let half = started.elapsed() / 2;
    let ours = before.checked_add(half).unwrap_or(before);
    let theirs = Timestamp::try_from(theirs).unwrap_or(Timestamp::UNIX_EPOCH);
    Ok(ours.duration_since(theirs))
}
