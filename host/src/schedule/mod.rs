//! Schedules: cron in qhost, each tick fired exactly once across a fleet.
//!
//! A schedule is a source of messages whose identity is time. Its ticks are instants computed
//! from a cron expression in a time zone ([`calendar`]); a tick's key is `schedule:NAME:TICK`
//! (the scheduled time, never a host's clock reading). Every host running the schedule may find
//! a tick due; firing it is one claim of that key in the idempotency store with the tick's
//! message as the claim's outbox ([`fire`]), so one host fires it, the others find it taken,
//! and a host that claimed and died is covered by the next host that finds the message unsent.
//! The message carries the key as its idempotency key, so a qhost consumer runs it once however
//! often it is sent.
//!
//! The fleet shares one record per schedule ([`record`]): how far ticks are decided, the last
//! one fired and by whom, counts, a pause and a held tick, replaced by compare-and-set and
//! followed by every host within a second, as rollout records are. What is due is a pure
//! function of the calendar, the record and the time ([`plan`]): ticks inside the catch-up
//! window fire (all, oldest first, or only the latest), older ones are counted as missed. The
//! overlap policy reads whether the previous tick's message is still being handled from the
//! consumer's own lease, when the consumer is qhost on this configuration ([`consumer`]).
//!
//! Layout: `calendar` (cron and zones, a leaf), `tick` (identity and message), `record` (the
//! fleet's record), `plan` (due and missed), `consumer` (where a tick runs), `fire` (claim and
//! send), `clock` (the host's clock against the store's), `run` (each host's loop), `ops` (the
//! operator's verbs), `board` (what the console shows).

mod board;
pub(crate) mod calendar;
mod clock;
mod consumer;
mod fire;
mod ops;
mod plan;
mod record;
pub(crate) mod run;
pub(crate) mod tick;

pub use board::Board;
pub use calendar::Calendar;
pub use ops::{
    Backfilled, Resumed, ScheduleCheck, ScheduleStatus, backfill, check, fire_now, list, pause,
    resume,
};
pub use record::{Fired, Paused, ScheduleRecord};

#[cfg(feature = "test-support")]
pub(crate) use clock::offset_by;

/// A record's time (Unix seconds) as RFC 3339, UTC.
pub fn time_text(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).map_or_else(|_| secs.to_string(), |t| t.to_string())
}

/// A signed span of milliseconds in seconds, as operators read a lag or a clock's skew:
/// `+4.002 s`, `-0.013 s`.
pub fn seconds_text(ms: i64) -> String {
    format!("{:+.3} s", ms as f64 / 1000.0)
}

pub(crate) use crate::fleet::host_name;
