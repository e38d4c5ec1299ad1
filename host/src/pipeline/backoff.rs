//! Retry delays: exponential in the attempt number, capped, with jitter so that a burst of
//! failures does not come back as a burst. A handler's own `retry(seconds)` is a minimum.

use std::time::Duration;

use crate::config::RetryPolicy;

/// The exponential delay for `attempt` (1-based), before jitter.
pub(crate) fn ceiling(policy: &RetryPolicy, attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(30);
    policy.base.saturating_mul(1 << doublings).min(policy.max)
}

/// The delay before the next delivery: "equal jitter" (between half the ceiling and the
/// ceiling), never less than what the handler asked for.
pub(crate) fn delay(policy: &RetryPolicy, attempt: u32, asked_secs: u32) -> Duration {
    let ceiling = ceiling(policy, attempt);
    let half = ceiling / 2;
    let jittered = half + half.mul_f64(fastrand::f64());
    jittered.max(Duration::from_secs(asked_secs.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        base: Duration::from_secs(2),
        max: Duration::from_secs(60),
    };

    #[test]
    fn doubles_per_attempt_up_to_the_cap() {
        let secs: Vec<u64> = (1..=7).map(|a| ceiling(&POLICY, a).as_secs()).collect();
        assert_eq!(secs, vec![2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(ceiling(&POLICY, u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_between_half_and_the_ceiling() {
        for attempt in 1..10 {
            let c = ceiling(&POLICY, attempt);
            for _ in 0..100 {
                let d = delay(&POLICY, attempt, 0);
                assert!(d >= c / 2 && d <= c, "{d:?} outside [{:?}, {c:?}]", c / 2);
            }
        }
    }

    #[test]
    fn the_handlers_request_is_a_minimum() {
        assert_eq!(delay(&POLICY, 1, 600), Duration::from_secs(600));
        let zero = RetryPolicy {
            base: Duration::ZERO,
            max: Duration::ZERO,
        };
        assert_eq!(delay(&zero, 3, 0), Duration::ZERO);
    }
}
