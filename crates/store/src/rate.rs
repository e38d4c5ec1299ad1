//! A plugin's rate limit across the fleet: `[limits] rate = "50/s"` (or `/min`) holds for
//! every host sharing the idempotency store, because the limit lives in the store.
//!
//! The algorithm is GCRA (the generic cell rate algorithm): the store keeps one number per
//! plugin, the theoretical arrival time (TAT) of the next call, and each admission moves it on
//! by the interval (`1 s / 50`). A call may run once `TAT - tolerance` has come, where the
//! tolerance allows a short burst (a tenth of the rate's count, at least one call). One atomic
//! step per message, in Redis one script; the embedded store runs the same arithmetic
//! ([`decide`]) in one SQLite transaction.
//!
//! A message that would have to wait reserves its slot when the slot is near (within
//! [`MAX_WAIT`]): the store moves TAT on for it, and the host sleeps until the slot, holding
//! the lease. A message whose slot is further off reserves nothing and is put back to come
//! when the slot would have: no attempt is used up, and the handler never ran.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The longest a message waits in process for its slot; past it, it is put back.
pub const MAX_WAIT: Duration = Duration::from_secs(1);

/// Calls per period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Calls allowed per period.
    pub count: u32,
    /// The period: a second or a minute.
    pub per: Duration,
}

/// What the store said about one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Run after this wait (zero: now); the slot is reserved.
    After(Duration),
    /// Over the rate for longer than [`MAX_WAIT`]: no slot reserved; try again after this.
    Later(Duration),
}

impl Rate {
    /// Parses `N/s`, `N/sec`, `N/m` or `N/min`, N from 1 to 1,000,000.
    pub fn parse(text: &str) -> Result<Rate, String> {
        let bad = || format!("`{text}` is not a rate: write N/s or N/min");
        let (count, unit) = text.split_once('/').ok_or_else(bad)?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            _ => return Err(bad()),
        };
        if !(1..=1_000_000).contains(&count) {
            return Err(format!("`{text}`: the count must be between 1 and 1000000"));
        }
        Ok(Rate { count, per })
    }

    /// The time between calls at the rate, in microseconds.
    pub fn interval_us(&self) -> u64 {
        (self.per.as_micros() as u64 / u64::from(self.count)).max(1)
    }

    /// How far ahead of its slot a call may run: a burst of a tenth of the count (at least
    /// one call, so the first call of an idle period runs at once).
    pub fn tolerance_us(&self) -> u64 {
        let burst = u64::from((self.count / 10).max(1));
        self.interval_us() * (burst - 1)
    }
}

/// One GCRA step at `now_us` against the stored `tat_us`: the admission, and the TAT to store
/// if a slot was reserved.
pub fn decide(rate: Rate, now_us: u64, tat_us: Option<u64>) -> (Admission, Option<u64>) {
    let tat = tat_us.unwrap_or(now_us).max(now_us);
    let allowed_at = tat.saturating_sub(rate.tolerance_us());
    let wait = allowed_at.saturating_sub(now_us);
    if wait > MAX_WAIT.as_micros() as u64 {
        return (Admission::Later(Duration::from_micros(wait)), None);
    }
    (
        Admission::After(Duration::from_micros(wait)),
        Some(tat + rate.interval_us()),
    )
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = if self.per == Duration::from_secs(60) {
            "min"
        } else {
            "s"
        };
        write!(f, "{}/{unit}", self.count)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Rate::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The store key holding a plugin's TAT.
pub fn key(namespace: &str, plugin: &str) -> String {
    format!("{namespace}:rate:{{{plugin}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        assert_eq!(
            Rate::parse("50/s"),
            Ok(Rate {
                count: 50,
                per: Duration::from_secs(1)
            })
        );
        assert_eq!(
            Rate::parse("300/min").map(|r| r.to_string()),
            Ok("300/min".into())
        );
        assert_eq!(Rate::parse("20/s").map(|r| r.interval_us()), Ok(50_000));
        for bad in ["50", "50/h", "x/s", "0/s", "-1/s", "2000000/s"] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_steady_stream_is_held_to_the_rate() {
        let rate = Rate::parse("20/s").expect("a rate");
        // 20/s has a burst of 2: two calls at once, then one every 50 ms.
        let mut tat = None;
        let mut runs_at = Vec::new();
        let now = 1_000_000_000;
        for _ in 0..100 {
            match decide(rate, now, tat) {
                (Admission::After(wait), Some(next)) => {
                    runs_at.push(now + wait.as_micros() as u64);
                    tat = Some(next);
                }
                (Admission::Later(_), None) => break,
                other => panic!("{other:?}"),
            }
        }
        // Slots within MAX_WAIT were reserved: 1 s at 20/s plus the burst.
        assert_eq!(runs_at.len(), 22, "{runs_at:?}");
        assert_eq!(runs_at[0], now);
        assert_eq!(runs_at[1], now);
        assert!(runs_at.windows(2).skip(1).all(|w| w[1] - w[0] == 50_000));
        // The next one is told when to come back, and reserves nothing.
        let (admission, stored) = decide(rate, now, tat);
        assert_eq!(stored, None);
        assert_eq!(
            admission,
            Admission::Later(Duration::from_micros(1_050_000))
        );
    }

    #[test]
    fn an_idle_period_does_not_bank_more_than_the_burst() {
        let rate = Rate::parse("10/s").expect("a rate");
        let (_, tat) = decide(rate, 0, None);
        // An hour later: the old TAT is in the past and counts for nothing.
        let later = 3_600_000_000;
        assert_eq!(decide(rate, later, tat).0, Admission::After(Duration::ZERO));
        let (_, tat) = decide(rate, later, tat);
        // Burst of one at 10/s: the next call waits its full interval.
        assert_eq!(
            decide(rate, later, tat).0,
            Admission::After(Duration::from_millis(100))
        );
    }
}
