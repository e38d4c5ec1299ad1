//! Delay queues: how a delivery put back with a delay waits in RabbitMQ, which has no delayed
//! redelivery of its own. The copy goes to a queue of the same delay, whose messages expire
//! after it and dead-letter back to their own queue through the default exchange.
//!
//! One queue per delay, not per message TTL: RabbitMQ expires messages only at a queue's head,
//! so a short per-message TTL behind a long one would wait for it. Delays are rounded up to a
//! few steps (whole seconds to 10 s, then 5 s to a minute, 30 s to 10 minutes, then 5 minutes)
//! so a jittered backoff makes a bounded number of queues. Each expires when unused for twice
//! its delay plus a minute, and is declared again on every use, so it outlives every message
//! it holds and is gone once idle.

use std::time::Duration;

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

/// The delay a put-back of `after` waits: `after` rounded up to its step, at least a second.
pub(crate) fn step(after: Duration) -> Duration {
    let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
    let unit = match secs {
        0..=10 => 1,
        11..=60 => 5,
        61..=600 => 30,
        _ => 300,
    };
    Duration::from_secs(secs.max(1).div_ceil(unit) * unit)
}

/// The delay queue of `queue` for `delay` (a [`step`]).
pub(crate) fn name(queue: &str, delay: Duration) -> String {
    format!("{queue}.qhost-delay-{}s", delay.as_secs())
}

/// The delay queue's arguments: its messages live `delay`, then go back to `queue`.
pub(crate) fn arguments(queue: &str, delay: Duration) -> FieldTable {
    let ttl_ms = delay.as_millis() as i64;
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongLongInt(ttl_ms));
    args.insert(
        "x-expires".into(),
        AMQPValue::LongLongInt(2 * ttl_ms + 60_000),
    );
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from(queue)),
    );
    args.insert(
        ShortString::from("x-queue-type"),
        AMQPValue::LongString(LongString::from("classic")),
    );
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_round_up_to_few_steps_never_shorter() {
        let cases = [
            (0, 1),
            (400, 1),
            (1_000, 1),
            (1_001, 2),
            (10_000, 10),
            (10_500, 15),
            (61_000, 90),
            (3_600_000, 3_600),
            (3_600_001, 3_900),
        ];
        for (ms, secs) in cases {
            assert_eq!(step(Duration::from_millis(ms)).as_secs(), secs, "{ms} ms");
        }
        let distinct: std::collections::HashSet<u64> = (0..=3_600u64)
            .map(|s| step(Duration::from_secs(s)).as_secs())
            .collect();
        assert!(distinct.len() < 60, "{} queues for an hour", distinct.len());
    }
}
