//! The rollout record: one per plugin, in the idempotency store, so every host of a fleet
//! splits keys the same way, adds its counts to one window and follows one decision.
//!
//! It is a small JSON text replaced whole by compare-and-set (`SharedRecords::swap_record`):
//! a host reads it, computes the next record with the pure functions here, and swaps it in only
//! if nobody changed it meanwhile, else reads again. So two hosts deciding at once produce one
//! decision, and counts are never lost or added twice.

use serde::{Deserialize, Serialize};

use crate::config::rollout::FailureKind;

/// Which rule decided a rollout, as the rollback metric labels it. A record written before
/// this was kept reads as `Other`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DecidedBy {
    /// Not known (an older record), or not decided.
    #[default]
    Other,
    /// A failure of a kind `rollback-on` lists.
    RollbackOn,
    /// The canary's failure share over the serving version's, past the margin.
    FailureShare,
    /// The promotion rules held.
    PromotionRules,
    /// An operator (`qhost plugins promote|rollback`, the console).
    ByHand,
}

impl DecidedBy {
    /// Its label in `qhost_rollout_rollbacks_total`.
    pub fn label(self) -> &'static str {
        match self {
            DecidedBy::Other => "other",
            DecidedBy::RollbackOn => "rollback-on",
            DecidedBy::FailureShare => "failure-share",
            DecidedBy::PromotionRules => "promotion-rules",
            DecidedBy::ByHand => "by-hand",
        }
    }
}

/// A rollout's decision: where it goes, which rule took it there, and why in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Promoted or rolled back.
    pub(crate) state: RolloutState,
    /// The rule.
    pub(crate) by: DecidedBy,
    /// Why, as operators read it.
    pub(crate) reason: String,
}

/// Where a rollout is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutState {
    /// The canary takes its share of keys; the counts are open.
    Canary,
    /// The canary took all traffic.
    Promoted,
    /// The canary was dropped; the serving version kept all traffic.
    RolledBack,
}

impl RolloutState {
    /// Its name in records, listings and metrics.
    pub fn name(self) -> &'static str {
        match self {
            RolloutState::Canary => "canary",
            RolloutState::Promoted => "promoted",
            RolloutState::RolledBack => "rolled-back",
        }
    }
}

/// How one version's runs ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tally {
    /// Runs that acked.
    pub ok: u64,
    /// Runs that trapped.
    pub trap: u64,
    /// Runs that ran past their deadline.
    pub timeout: u64,
    /// Runs that hit their memory limit.
    pub memory_limit: u64,
    /// Runs that rejected their message.
    pub reject: u64,
    /// Runs that asked for a retry.
    pub retry: u64,
}

impl Tally {
    /// Runs that failed, of any kind.
    pub fn failed(&self) -> u64 {
        FailureKind::ALL.iter().map(|k| self.of(*k)).sum()
    }

    /// Runs in all.
    pub fn runs(&self) -> u64 {
        self.ok + self.failed()
    }

    /// Runs that failed by `kind`.
    pub fn of(&self, kind: FailureKind) -> u64 {
        match kind {
            FailureKind::Trap => self.trap,
            FailureKind::Timeout => self.timeout,
            FailureKind::MemoryLimit => self.memory_limit,
            FailureKind::Reject => self.reject,
            FailureKind::Retry => self.retry,
        }
    }

    /// Counts one run: `None` when it acked.
    pub(crate) fn count(&mut self, failed: Option<FailureKind>) {
        let n = match failed {
            None => &mut self.ok,
            Some(FailureKind::Trap) => &mut self.trap,
            Some(FailureKind::Timeout) => &mut self.timeout,
            Some(FailureKind::MemoryLimit) => &mut self.memory_limit,
            Some(FailureKind::Reject) => &mut self.reject,
            Some(FailureKind::Retry) => &mut self.retry,
        };
        *n += 1;
    }

    pub(crate) fn add(&mut self, more: &Tally) {
        self.ok += more.ok;
        self.trap += more.trap;
        self.timeout += more.timeout;
        self.memory_limit += more.memory_limit;
        self.reject += more.reject;
        self.retry += more.retry;
    }

    /// Whether nothing was counted.
    pub(crate) fn is_empty(&self) -> bool {
        self.runs() == 0
    }
}

/// One plugin's rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutRecord {
    /// The version serving before the canary.
    pub serving: String,
    /// The canary's version.
    pub canary: String,
    /// Percent of keys the canary takes.
    pub percent: u8,
    /// Where it is.
    pub state: RolloutState,
    /// Why it was promoted or rolled back.
    #[serde(default)]
    pub reason: String,
    /// Which rule decided it.
    #[serde(default)]
    pub decided_by: DecidedBy,
    /// When it started, ms since the Unix epoch.
    pub started_ms: u64,
    /// When it was decided (0 while it runs).
    #[serde(default)]
    pub decided_ms: u64,
    /// The serving version's runs while the canary ran.
    #[serde(default)]
    pub serving_runs: Tally,
    /// The canary's runs.
    #[serde(default)]
    pub canary_runs: Tally,
}

/// A change to a plugin's record; each returns the new record, or `None` to leave it as it is.
#[derive(Clone, Debug)]
pub(crate) enum Change {
    /// A host loaded `canary` beside `serving`: start its rollout, or join the one running.
    Begin {
        serving: String,
        canary: String,
        percent: u8,
        now_ms: u64,
    },
    /// Counts a host gathered for `canary`'s rollout.
    Add {
        canary: String,
        serving: Tally,
        canary_runs: Tally,
    },
    /// Decides `canary`'s rollout, if it is still undecided.
    Decide {
        canary: String,
        decision: Decision,
        now_ms: u64,
    },
}

impl Change {
    /// The record after this change to `current`, or `None` when it stays as it is.
    pub(crate) fn apply(&self, current: Option<&RolloutRecord>) -> Option<RolloutRecord> {
        let running = |canary: &str| {
            current.filter(|r| r.canary == canary && r.state == RolloutState::Canary)
        };
        match self {
            Change::Begin {
                serving,
                canary,
                percent,
                now_ms,
            } => {
                // The same canary: joined, whatever became of it (a rolled-back version is not
                // tried again by a host that loads it late).
                if current.is_some_and(|r| &r.canary == canary) {
                    return None;
                }
                Some(RolloutRecord {
                    serving: serving.clone(),
                    canary: canary.clone(),
                    percent: *percent,
                    state: RolloutState::Canary,
                    reason: String::new(),
                    decided_by: DecidedBy::Other,
                    started_ms: *now_ms,
                    decided_ms: 0,
                    serving_runs: Tally::default(),
                    canary_runs: Tally::default(),
                })
            }
            Change::Add {
                canary,
                serving,
                canary_runs,
            } => {
                let mut next = running(canary)?.clone();
                next.serving_runs.add(serving);
                next.canary_runs.add(canary_runs);
                Some(next)
            }
            Change::Decide {
                canary,
                decision,
                now_ms,
            } => {
                let mut next = running(canary)?.clone();
                next.state = decision.state;
                next.decided_by = decision.by;
                next.reason = decision.reason.clone();
                next.decided_ms = *now_ms;
                Some(next)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn begin(serving: &str, canary: &str) -> Change {
        Change::Begin {
            serving: serving.into(),
            canary: canary.into(),
            percent: 20,
            now_ms: 1,
        }
    }

    #[test]
    fn a_canary_begins_once_counts_add_up_and_one_decision_sticks() {
        let record = begin("v1", "v2").apply(None).unwrap();
        assert_eq!((record.state, record.percent), (RolloutState::Canary, 20));
        assert_eq!(begin("v1", "v2").apply(Some(&record)), None, "joined");
        let mut runs = Tally::default();
        runs.count(None);
        runs.count(Some(FailureKind::Trap));
        let add = Change::Add {
            canary: "v2".into(),
            serving: runs.clone(),
            canary_runs: runs.clone(),
        };
        let record = add.apply(Some(&record)).unwrap();
        let record = add.apply(Some(&record)).unwrap();
        assert_eq!((record.canary_runs.ok, record.canary_runs.failed()), (2, 2));
        let stale = Change::Add {
            canary: "v0".into(),
            serving: runs.clone(),
            canary_runs: runs,
        };
        assert_eq!(
            stale.apply(Some(&record)),
            None,
            "counts for another canary"
        );
        let decide = |state| Change::Decide {
            canary: "v2".into(),
            decision: Decision {
                state,
                by: DecidedBy::FailureShare,
                reason: "why".into(),
            },
            now_ms: 9,
        };
        let decided = decide(RolloutState::RolledBack)
            .apply(Some(&record))
            .unwrap();
        assert_eq!(
            (decided.state, decided.decided_ms),
            (RolloutState::RolledBack, 9)
        );
        assert_eq!(
            decide(RolloutState::Promoted).apply(Some(&decided)),
            None,
            "the first decision stands"
        );
        assert_eq!(add.apply(Some(&decided)), None, "no counts after it");
        assert_eq!(begin("v1", "v2").apply(Some(&decided)), None, "not retried");
        let next = begin("v1", "v3").apply(Some(&decided)).unwrap();
        assert_eq!(
            (next.canary.as_str(), next.state),
            ("v3", RolloutState::Canary)
        );
        let text = serde_json::to_string(&next).unwrap();
        assert_eq!(serde_json::from_str::<RolloutRecord>(&text).unwrap(), next);
    }
}
