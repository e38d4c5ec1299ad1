//! A schedule's record in the store, shared by the fleet: how far its ticks are decided, the last
//! one fired and by which host, its counts, whether it is paused, and a tick held back by
//! `overlap = "buffer-one"`.
//!
//! It is a shared record (`idempotency::records`), replaced whole by compare-and-set as a
//! rollout record is: two hosts that read the same record cannot both move it, so counts add
//! up once. The record is a watermark, not the proof of once: each fired tick's own key is
//! (`Claims::claim`), so a host that acts on a stale record at worst finds a tick claimed.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::idempotency::{SharedRecords, StoreResult, records};

/// How long a record is kept after its last change.
const KEEP: Duration = Duration::from_secs(400 * 24 * 3600);
/// Missed ticks listed by time in the record (the count has them all).
pub(crate) const RECENT_MISSED: usize = 20;

/// The store key of schedule `name`'s record (one key: one slot on a cluster).
pub(crate) fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}:schedule:{{{name}}}")
}

/// A schedule's shared record. Times are Unix seconds (ticks) or milliseconds (events).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// Every tick at or before this one is decided: fired, missed or skipped. `None` until a
    /// host first sees the schedule; it then starts from that moment, firing nothing older.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<i64>,
    /// The newest tick fired, by whom and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fired: Option<Fired>,
    /// Ticks fired (catch-up, backfill and `fire` included).
    #[serde(default)]
    pub fired: u64,
    /// Ticks no host was up for, older than the catch-up window (or passed over by
    /// `catch-up-policy = "latest"`).
    #[serde(default)]
    pub missed: u64,
    /// Ticks not fired because the previous tick's message was still being handled, or because
    /// the schedule was paused.
    #[serde(default)]
    pub skipped: u64,
    /// The newest missed ticks, oldest first (at most [`RECENT_MISSED`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_missed: Vec<i64>,
    /// Set while paused: who paused it, when (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Paused>,
    /// `buffer-one`: the tick waiting for the previous tick's message to complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<i64>,
}

/// A fired tick.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fired {
    /// The tick (Unix seconds), or for a tick fired by hand its time.
    pub tick: i64,
    /// The tick as its message carries it (`qhost-tick`).
    pub label: String,
    /// Whether it was an extra tick, fired by hand.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_hand: bool,
    /// The host that fired it.
    pub host: String,
    /// When it was sent (ms, on the fleet's clock: the store's).
    pub at_ms: u64,
    /// How far that host's clock was ahead of the store's when it fired (ms; negative: behind).
    #[serde(default)]
    pub skew_ms: i64,
}

impl Fired {
    /// How long after its tick it was sent (ms; a tick fired by hand: after it was asked for).
    pub fn lag_ms(&self) -> i64 {
        let at = i64::try_from(self.at_ms).unwrap_or(i64::MAX);
        match self.by_hand {
            true => self
                .label
                .parse::<jiff::Timestamp>()
                .map_or(0, |t| at - t.as_millisecond()),
            false => at.saturating_sub(self.tick.saturating_mul(1000)),
        }
    }
}

/// Who paused a schedule, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paused {
    /// Who: a user and host, as the CLI or console says.
    pub by: String,
    /// When (ms).
    pub at_ms: u64,
}

impl ScheduleRecord {
    /// Counts `ticks` as missed, keeping the newest of `listed` by time.
    pub(crate) fn miss(&mut self, count: u64, listed: &[i64]) {
        self.missed += count;
        self.recent_missed.extend_from_slice(listed);
        let extra = self.recent_missed.len().saturating_sub(RECENT_MISSED);
        self.recent_missed.drain(..extra);
    }

    /// Records `fired` as the newest fired tick, unless a newer one is recorded.
    pub(crate) fn fired(&mut self, fired: Fired) {
        if self
            .last_fired
            .as_ref()
            .is_none_or(|l| l.tick <= fired.tick)
        {
            self.last_fired = Some(fired);
        }
    }
}

/// What the store's errors call a schedule record.
const WHAT: &str = "schedule record";

/// The record at `key`.
pub(crate) async fn read(
    store: &dyn SharedRecords,
    key: &str,
) -> StoreResult<Option<ScheduleRecord>> {
    records::read(store, key, WHAT).await
}

/// Applies `change` to the record at `key` (the default record when there is none) by
/// compare-and-set, until it holds; `change` returns `false` to leave the record as it is.
/// The record as it is after, and whether this call changed it.
pub(crate) async fn update(
    store: &dyn SharedRecords,
    key: &str,
    mut change: impl FnMut(&mut ScheduleRecord) -> bool,
) -> StoreResult<(ScheduleRecord, bool)> {
    let (record, changed) = records::update(store, key, KEEP, WHAT, |current| {
        let mut next = current.cloned().unwrap_or_default();
        (change(&mut next) && current != Some(&next)).then_some(next)
    })
    .await?;
    Ok((record.unwrap_or_default(), changed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::local::LocalStore;

    #[tokio::test]
    async fn two_hosts_moving_the_watermark_at_once_count_once() {
        let store = LocalStore::open(None).unwrap();
        let k = key("ns", "monthly");
        let advance = |r: &mut ScheduleRecord| {
            if r.through >= Some(60) {
                return false;
            }
            r.through = Some(60);
            r.fired += 1;
            true
        };
        let (a, b) = tokio::join!(update(&store, &k, advance), update(&store, &k, advance));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.0, b.0, "both see one record");
        assert!(a.1 != b.1, "and one of them changed it");
        assert_eq!(read(&store, &k).await.unwrap().unwrap().fired, 1);
    }

    #[test]
    fn missed_ticks_are_counted_all_and_listed_newest() {
        let mut r = ScheduleRecord::default();
        r.miss(3, &[1, 2, 3]);
        r.miss(30, &(10..40).collect::<Vec<_>>());
        assert_eq!(r.missed, 33);
        assert_eq!(r.recent_missed, (20..40).collect::<Vec<_>>());
        let fired = |tick| Fired {
            tick,
            label: String::new(),
            by_hand: false,
            host: "h".into(),
            at_ms: 0,
            skew_ms: 0,
        };
        r.fired(fired(5));
        r.fired(fired(4));
        assert_eq!(
            r.last_fired.unwrap().tick,
            5,
            "an older tick (a backfill) stays behind"
        );
    }
}
