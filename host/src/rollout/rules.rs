//! When a canary is promoted or rolled back, by its policy and the fleet's counts.
//!
//! Rolled back, first match:
//! 1. any failure of a kind listed in `rollback-on` (one is enough);
//! 2. over at least `rollback-min-messages` canary runs, its failure share (traps, timeouts,
//!    memory limits, rejects and retries asked, over its runs) exceeds the serving version's
//!    share over the same window by more than `rollback-margin-percent` points.
//!
//! Promoted when no rollback rule tripped and every promotion rule set holds:
//! `promote-after-messages` canary runs, `promote-after-secs` since it started (both, when both
//! are set).

use std::time::Duration;

use super::record::{DecidedBy, Decision, RolloutRecord, RolloutState};
use crate::config::rollout::Canary;

/// What the rules say about `record` at `now_ms`: a decision, or `None` while the canary
/// should keep running.
pub(crate) fn decide(policy: &Canary, record: &RolloutRecord, now_ms: u64) -> Option<Decision> {
    let canary = &record.canary_runs;
    for kind in &policy.rollback_on {
        if canary.of(*kind) > 0 {
            return Some(Decision {
                state: RolloutState::RolledBack,
                by: DecidedBy::RollbackOn,
                reason: format!(
                    "a {} on the canary (rollback-on lists it); {} of its {} runs failed",
                    kind.name(),
                    canary.failed(),
                    canary.runs()
                ),
            });
        }
    }
    let runs = canary.runs();
    if runs >= policy.rollback_min_messages {
        let share = |failed: u64, runs: u64| {
            if runs == 0 {
                0.0
            } else {
                failed as f64 / runs as f64
            }
        };
        let (mine, theirs) = (
            share(canary.failed(), runs),
            share(record.serving_runs.failed(), record.serving_runs.runs()),
        );
        if mine - theirs > policy.rollback_margin {
            return Some(Decision {
                state: RolloutState::RolledBack,
                by: DecidedBy::FailureShare,
                reason: format!(
                    "failure share {:.1}% on the canary against {:.1}% on the serving version over {runs} canary runs, above the margin of {:.1} points",
                    mine * 100.0,
                    theirs * 100.0,
                    policy.rollback_margin * 100.0
                ),
            });
        }
    }
    let ran = Duration::from_millis(now_ms.saturating_sub(record.started_ms));
    let enough_runs = policy.promote_after_messages.is_none_or(|n| runs >= n);
    let long_enough = policy.promote_after.is_none_or(|d| ran >= d);
    (enough_runs && long_enough).then(|| Decision {
        state: RolloutState::Promoted,
        by: DecidedBy::PromotionRules,
        reason: format!(
            "{runs} canary runs over {} s, {} failed, no rollback rule tripped",
            ran.as_secs(),
            canary.failed()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::rollout::FailureKind;
    use crate::rollout::record::Tally;

    fn policy() -> Canary {
        Canary {
            percent: 20,
            promote_after_messages: Some(100),
            promote_after: None,
            rollback_margin: 0.05,
            rollback_min_messages: 20,
            rollback_on: vec![],
        }
    }

    fn record(canary: Tally, serving: Tally) -> RolloutRecord {
        RolloutRecord {
            serving: "v1".into(),
            canary: "v2".into(),
            percent: 20,
            state: RolloutState::Canary,
            reason: String::new(),
            decided_by: DecidedBy::Other,
            started_ms: 0,
            decided_ms: 0,
            serving_runs: serving,
            canary_runs: canary,
        }
    }

    fn tally(ok: u64, trap: u64) -> Tally {
        Tally {
            ok,
            trap,
            ..Tally::default()
        }
    }

    #[test]
    fn a_failure_share_above_the_serving_versions_by_the_margin_rolls_back() {
        assert_eq!(
            decide(&policy(), &record(tally(10, 5), tally(100, 0)), 0),
            None,
            "too few runs"
        );
        let Decision { state, by, reason } =
            decide(&policy(), &record(tally(14, 6), tally(100, 0)), 0).unwrap();
        assert_eq!(
            (state, by),
            (RolloutState::RolledBack, DecidedBy::FailureShare)
        );
        assert!(
            reason.starts_with("failure share 30.0% on the canary against 0.0%"),
            "{reason}"
        );
        assert_eq!(
            decide(&policy(), &record(tally(19, 1), tally(90, 4)), 0),
            None,
            "5% against 4.3%: within the margin"
        );
    }

    #[test]
    fn a_listed_kind_rolls_back_at_once_and_promotion_needs_every_rule_set() {
        let mut at_once = policy();
        at_once.rollback_on = vec![FailureKind::MemoryLimit];
        let mut canary = tally(3, 0);
        canary.count(Some(FailureKind::MemoryLimit));
        let Decision { state, by, reason } =
            decide(&at_once, &record(canary, Tally::default()), 0).unwrap();
        assert_eq!(
            (state, by),
            (RolloutState::RolledBack, DecidedBy::RollbackOn)
        );
        assert!(
            reason.starts_with("a memory-limit on the canary"),
            "{reason}"
        );

        let decided = decide(&policy(), &record(tally(100, 0), tally(400, 0)), 0).unwrap();
        assert_eq!(
            (decided.state, decided.by),
            (RolloutState::Promoted, DecidedBy::PromotionRules)
        );
        let mut timed = policy();
        timed.promote_after = Some(Duration::from_secs(60));
        assert_eq!(
            decide(&timed, &record(tally(100, 0), tally(400, 0)), 59_000),
            None
        );
        let Decision { state, reason, .. } =
            decide(&timed, &record(tally(100, 0), tally(400, 0)), 60_000).unwrap();
        assert_eq!(state, RolloutState::Promoted);
        assert!(reason.starts_with("100 canary runs over 60 s"), "{reason}");
    }
}
