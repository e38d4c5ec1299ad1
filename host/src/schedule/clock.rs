//! The fleet's clock for schedules: the store's time, as each host reads it through its own
//! clock corrected by how far that clock is from the store's.
//!
//! Ticks are instants computed from the calendar, so hosts a few seconds apart claim the same
//! tick; what a host's clock decides is *when* a tick is due. Planned on each host's own clock,
//! the fleet would fire every tick as early as its fastest host's clock runs ahead, and a new
//! schedule would start at whichever "now" the first host to see it believed. So every pass
//! measures the host's clock against the store's (Redis's `TIME`; the embedded store's is the
//! machine's) and plans, fires, skips and starts on the store's time: the host's reading less
//! the measured skew, good to about half the measuring round trip. Beyond a schedule's
//! `max-clock-skew-secs`, a host distrusts the measurement itself (a clock that far off is
//! likely still moving) and leaves firing to others until it is back.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};

use crate::idempotency::{Claims, StoreResult};

/// Added to this process's clock, for tests that run hosts with clocks apart (test builds only
/// set it).
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Sets this process's clock offset (for the test-only `offset_schedule_clock`).
#[cfg(feature = "test-support")]
pub(crate) fn offset_by(ms: i64) {
    OFFSET_MS.store(ms, Ordering::Relaxed);
}

/// The host's own time: what its wall clock says.
pub(crate) fn local_now() -> Timestamp {
    let offset = SignedDuration::from_millis(OFFSET_MS.load(Ordering::Relaxed));
    Timestamp::now()
        .checked_add(offset)
        .unwrap_or_else(|_| Timestamp::now())
}

/// The store's time as this host reads it: its own clock less its measured skew.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FleetClock {
    /// How far the host's clock is ahead of the store's (negative: behind).
    skew: SignedDuration,
}

impl FleetClock {
    /// Measures the host's clock against `store`'s, against the midpoint of the round trip.
    pub(crate) async fn measure(store: &dyn Claims) -> StoreResult<Self> {
        let (before, started) = (local_now(), Instant::now());
        let theirs = store.time().await?;
        Ok(Self::from_reading(before, started.elapsed(), theirs))
    }

    /// The clock for a reading of the store's time `theirs`, asked for at `before` (the host's
    /// clock) and answered `round_trip` later.
    pub(super) fn from_reading(
        before: Timestamp,
        round_trip: std::time::Duration,
        theirs: std::time::SystemTime,
    ) -> Self {
        let ours = before.checked_add(round_trip / 2).unwrap_or(before);
        let theirs = Timestamp::try_from(theirs).unwrap_or(Timestamp::UNIX_EPOCH);
        FleetClock {
            skew: ours.duration_since(theirs),
        }
    }

    /// How far the host's clock is ahead of the store's (negative: behind).
    pub(crate) fn skew(&self) -> SignedDuration {
        self.skew
    }

    /// How far the host's clock is ahead of the store's, in milliseconds.
    pub(crate) fn skew_ms(&self) -> i64 {
        i64::try_from(self.skew.as_millis()).unwrap_or(i64::MAX)
    }

    /// The fleet's time now.
    pub(crate) fn now(&self) -> Timestamp {
        self.at(local_now())
    }

    /// The fleet's time now, in milliseconds since the Unix epoch.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.now().as_millisecond()).unwrap_or(0)
    }

    /// The fleet's time when the host's clock reads `local`.
    pub(super) fn at(&self, local: Timestamp) -> Timestamp {
        local.checked_sub(self.skew).unwrap_or(local)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn system(text: &str) -> SystemTime {
        SystemTime::from(at(text))
    }

    #[test]
    fn a_host_four_seconds_ahead_reads_the_store_s_time() {
        // Asked at 10:00:04.000 by the host's clock, answered 10 ms later with 10:00:00.005.
        let clock = FleetClock::from_reading(
            at("2026-12-06T10:00:04Z"),
            Duration::from_millis(10),
            system("2026-12-06T10:00:00.005Z"),
        );
        assert_eq!(clock.skew(), SignedDuration::from_secs(4));
        assert_eq!(
            clock.at(at("2026-12-06T10:00:09.500Z")),
            at("2026-12-06T10:00:05.500Z")
        );
    }

    #[test]
    fn a_host_behind_reads_it_too() {
        let clock = FleetClock::from_reading(
            at("2026-12-06T09:59:51Z"),
            Duration::ZERO,
            system("2026-12-06T10:00:00Z"),
        );
        assert_eq!(clock.skew(), SignedDuration::from_secs(-9));
        assert_eq!(
            clock.at(at("2026-12-06T09:59:52Z")),
            at("2026-12-06T10:00:01Z")
        );
    }

    #[tokio::test]
    async fn measured_against_the_embedded_store_a_host_is_near_zero() {
        let store = crate::idempotency::local::LocalStore::open(None).unwrap();
        let clock = FleetClock::measure(&store).await.unwrap();
        assert!(
            clock.skew().abs() < SignedDuration::from_millis(100),
            "{clock:?}"
        );
        let gap = clock.now().duration_since(Timestamp::now()).abs();
        assert!(gap < SignedDuration::from_millis(100), "{gap:?}");
    }
}
