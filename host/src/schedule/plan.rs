//! Which ticks are due, and which were missed: a pure function of the calendar, the record's
//! watermark, the time and the catch-up rules, tested with any clock.
//!
//! Ticks after the watermark and inside the catch-up window are due, oldest first (only the
//! newest under `catch-up-policy = "latest"`, the rest missed). Ticks after the watermark and
//! older than the window are missed: counted, the newest listed by time, never fired (a
//! backfill fires them on purpose).

use std::time::Duration;

use jiff::Timestamp;

use super::calendar::Calendar;
use super::record::RECENT_MISSED;
use crate::config::schedule::CatchUpPolicy;

/// Due ticks looked at in one pass; a longer catch-up continues on the next pass.
pub(crate) const MAX_DUE: usize = 1000;
/// Missed ticks counted one by one; past this many a schedule's count says "at least".
const MAX_COUNTED: usize = 100_000;

/// What a pass finds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Ticks to fire, oldest first.
    pub(crate) due: Vec<Timestamp>,
    /// Ticks missed, counted.
    pub(crate) missed: u64,
    /// The newest of them (at most [`RECENT_MISSED`]).
    pub(crate) missed_listed: Vec<i64>,
    /// The newest missed tick, which the watermark moves to when nothing is due.
    pub(crate) missed_through: Option<Timestamp>,
}

/// The plan at `now` for a schedule decided through `through`.
pub(crate) fn plan(
    calendar: &Calendar,
    through: Timestamp,
    now: Timestamp,
    catch_up: Duration,
    policy: CatchUpPolicy,
) -> Plan {
    let window = now
        .checked_sub(jiff::SignedDuration::try_from(catch_up).unwrap_or(jiff::SignedDuration::MAX))
        .unwrap_or(Timestamp::MIN);
    let mut plan = Plan::default();
    if through < window {
        let missed = calendar.between(through, window, MAX_COUNTED);
        plan.missed_listed = newest(&missed);
        plan.missed = missed.len() as u64;
        plan.missed_through = missed.last().copied();
    }
    let mut due = calendar.between(through.max(window), now, MAX_DUE);
    if policy == CatchUpPolicy::Latest && due.len() > 1 {
        let last = due.pop().into_iter().collect::<Vec<_>>();
        plan.missed += due.len() as u64;
        plan.missed_listed.extend(newest(&due));
        plan.missed_listed = newest_of(plan.missed_listed);
        plan.missed_through = due.last().copied();
        due = last;
    }
    plan.due = due;
    plan
}

fn newest(ticks: &[Timestamp]) -> Vec<i64> {
    let from = ticks.len().saturating_sub(RECENT_MISSED);
    ticks[from..].iter().map(|t| t.as_second()).collect()
}

fn newest_of(mut listed: Vec<i64>) -> Vec<i64> {
    let extra = listed.len().saturating_sub(RECENT_MISSED);
    listed.drain(..extra);
    listed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn every_minute() -> Calendar {
        Calendar::parse("* * * * *", "UTC").unwrap()
    }

    #[test]
    fn a_host_up_at_every_tick_fires_the_one_due() {
        let p = plan(
            &every_minute(),
            at("2026-12-04T10:00:00Z"),
            at("2026-12-04T10:01:00.300Z"),
            Duration::from_secs(3600),
            CatchUpPolicy::All,
        );
        assert_eq!(p.due, [at("2026-12-04T10:01:00Z")]);
        assert_eq!((p.missed, p.missed_through), (0, None));
    }

    #[test]
    fn ticks_inside_the_window_are_caught_up_oldest_first_and_older_ones_missed() {
        let p = plan(
            &every_minute(),
            at("2026-12-04T10:00:00Z"),
            at("2026-12-04T10:10:30Z"),
            Duration::from_secs(180),
            CatchUpPolicy::All,
        );
        let due: Vec<String> = p.due.iter().map(|t| t.to_string()).collect();
        assert_eq!(
            due,
            [
                "2026-12-04T10:08:00Z",
                "2026-12-04T10:09:00Z",
                "2026-12-04T10:10:00Z"
            ]
        );
        assert_eq!(p.missed, 7, "10:01 to 10:07");
        assert_eq!(p.missed_through, Some(at("2026-12-04T10:07:00Z")));
        assert_eq!(p.missed_listed.len(), 7);
        assert_eq!(p.missed_listed[0], at("2026-12-04T10:01:00Z").as_second());
    }

    #[test]
    fn latest_fires_only_the_newest_due_and_misses_the_rest() {
        let p = plan(
            &every_minute(),
            at("2026-12-04T10:00:00Z"),
            at("2026-12-04T10:10:30Z"),
            Duration::from_secs(180),
            CatchUpPolicy::Latest,
        );
        assert_eq!(p.due, [at("2026-12-04T10:10:00Z")]);
        assert_eq!(p.missed, 9);
        assert_eq!(p.missed_through, Some(at("2026-12-04T10:09:00Z")));
    }

    /// A host whose clock is 4 s ahead plans on the store's clock: the 10:01 tick is due when
    /// the store's clock reaches 10:01, not when the host's does (which would send it 4 s early);
    /// a host 9 s behind finds it due on time, not 9 s late.
    #[test]
    fn a_skewed_host_plans_on_the_store_s_clock() {
        use super::super::clock::FleetClock;
        let (through, tick) = (at("2026-12-04T10:00:00Z"), at("2026-12-04T10:01:00Z"));
        let due_at = |clock: &FleetClock, local: &str| {
            let now = clock.at(at(local));
            plan(
                &every_minute(),
                through,
                now,
                Duration::from_secs(3600),
                CatchUpPolicy::All,
            )
            .due
        };
        let store_reads = |local: &str, store: &str| {
            let store = std::time::SystemTime::from(at(store));
            FleetClock::from_reading(at(local), Duration::ZERO, store)
        };
        let ahead = store_reads("2026-12-04T10:00:30Z", "2026-12-04T10:00:26Z");
        assert_eq!(
            due_at(&ahead, "2026-12-04T10:01:00.500Z"),
            [],
            "on its own clock it is due"
        );
        assert_eq!(due_at(&ahead, "2026-12-04T10:01:03.999Z"), []);
        assert_eq!(due_at(&ahead, "2026-12-04T10:01:04.001Z"), [tick]);
        let behind = store_reads("2026-12-04T10:00:30Z", "2026-12-04T10:00:39Z");
        assert_eq!(due_at(&behind, "2026-12-04T10:00:50.999Z"), []);
        assert_eq!(
            due_at(&behind, "2026-12-04T10:00:51.001Z"),
            [tick],
            "not 9 s late"
        );
    }

    #[test]
    fn a_long_outage_counts_every_missed_tick_and_lists_the_newest() {
        let p = plan(
            &Calendar::parse("* * * * * *", "UTC").unwrap(),
            at("2026-12-04T00:00:00Z"),
            at("2026-12-04T02:00:00Z"),
            Duration::from_secs(60),
            CatchUpPolicy::All,
        );
        assert_eq!(p.missed, 7140, "two hours of seconds less the last minute");
        assert_eq!(p.missed_listed.len(), RECENT_MISSED);
        assert_eq!(p.due.len(), 60);
    }
}
