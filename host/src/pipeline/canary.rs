//! A run while its plugin has a canary (`crate::rollout`): the key's bucket picks the version,
//! and a canary run that fails runs again at once on the serving version, under the same lease,
//! so the canary's failure costs the message nothing: no redelivery, no attempt, no dead
//! letter. Both versions' runs are counted for the rollout's rules.

use std::sync::Arc;

use super::batches::Gathering;
use super::delivery::Delivery;
use super::invoke::invoke;
use crate::config::rollout::FailureKind;
use crate::handler::{Failure, HandlerMessage, Invocation, Outcome};
use crate::plugin::Plugin;
use crate::plugin::canary::CanarySlot;
use crate::plugin::registry::Registry;

/// The versions a run of a message routed to `routed` meets, as they are when the run starts:
/// the serving one, and the canary if one of another version runs beside it.
///
/// Not the versions of when the message was routed: a promotion can land in between, and a key
/// in the promoted canary's share must not go back to the version it left. The canary is read
/// first and the serving version after, the reverse of the order a promotion writes them in,
/// so the promoted version is seen in one or the other: arc-swap's default strategy puts a
/// `SeqCst` operation in every load and store, so operations on the two `ArcSwap`s have one
/// global order. A plugin removed in between runs as routed (calls already under way finish).
pub(super) fn versions(
    registry: &Registry,
    routed: Arc<Plugin>,
) -> (Arc<Plugin>, Option<Arc<CanarySlot>>) {
    let canary = registry.canaries.get(&routed.name);
    let serving = registry.get(&routed.name).unwrap_or(routed);
    let canary = canary.filter(|slot| slot.plugin.version != serving.version);
    (serving, canary)
}

/// The two versions a message may run on: the one serving, and a canary beside it.
pub(super) struct Versions<'a> {
    pub(super) serving: &'a Arc<Plugin>,
    pub(super) canary: &'a CanarySlot,
}

/// Runs `input` on the canary when its key falls in the canary's share, else (or when the
/// canary fails) on the serving version; the answer and the version that gave it (whose name
/// and version its outbox carries).
pub(super) async fn invoke_either(
    delivery: &Delivery,
    versions: Versions<'_>,
    input: HandlerMessage,
    gathering: Gathering,
) -> (Result<Invocation, Failure>, Arc<Plugin>) {
    let Versions { serving, canary } = versions;
    if canary.takes(&input.idempotency_key) {
        let result = invoke(delivery, &canary.plugin, input.clone(), gathering).await;
        let failed = failure_kind(&result);
        canary.count(true, failed);
        let Some(kind) = failed else {
            return (result, Arc::clone(&canary.plugin));
        };
        tracing::info!(
            plugin = %canary.plugin.name,
            canary = %canary.plugin.version,
            serving = %serving.version,
            failure = kind.name(),
            "the canary failed this message; running it on the serving version"
        );
    }
    let result = invoke(delivery, serving, input, gathering).await;
    canary.count(false, failure_kind(&result));
    (result, Arc::clone(serving))
}

/// How a run failed, as rollouts count it (`None`: it acked).
fn failure_kind(result: &Result<Invocation, Failure>) -> Option<FailureKind> {
    match result {
        Ok(invocation) => match invocation.outcome {
            Outcome::Ack => None,
            Outcome::Retry(_) => Some(FailureKind::Retry),
            Outcome::Reject(_) => Some(FailureKind::Reject),
        },
        Err(Failure::Timeout(_)) => Some(FailureKind::Timeout),
        Err(Failure::MemoryLimit(_)) => Some(FailureKind::MemoryLimit),
        Err(Failure::Trap(_) | Failure::Instantiate(_)) => Some(FailureKind::Trap),
        // The store's fault, not the version's: the message goes back as it would on either.
        Err(Failure::StateUnavailable(_)) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::manifest::Manifest;
    use crate::rollout::record::DecidedBy;

    fn version(version: &str) -> Plugin {
        let ack = |_msg| Ok(Invocation::new(Outcome::Ack));
        let manifest = Manifest::parse("").expect("an empty manifest");
        Plugin::new("worker", version, manifest, Arc::new(ack))
    }

    fn names(chosen: &(Arc<Plugin>, Option<Arc<CanarySlot>>)) -> (&str, Option<&str>) {
        let canary = chosen.1.as_ref().map(|slot| slot.plugin.version.as_str());
        (chosen.0.version.as_str(), canary)
    }

    #[test]
    fn a_message_routed_before_a_promotion_runs_on_the_promoted_version() {
        let registry = Registry::new([version("v1")]);
        let routed = registry.get("worker").expect("v1 serves");
        registry.start_canary(version("v2"), 100);
        let during = versions(&registry, Arc::clone(&routed));
        assert_eq!(names(&during), ("v1", Some("v2")));
        registry.promote("worker", "v2", "test");
        let after = versions(&registry, routed);
        assert_eq!(names(&after), ("v2", None), "not back on v1");
    }

    #[test]
    fn a_rollback_leaves_a_routed_message_on_the_serving_version() {
        let registry = Registry::new([version("v1")]);
        let routed = registry.get("worker").expect("v1 serves");
        registry.start_canary(version("v2"), 100);
        registry.roll_back("worker", "v2", DecidedBy::ByHand, "test");
        assert_eq!(names(&versions(&registry, routed)), ("v1", None));
    }

    #[test]
    fn a_plugin_removed_after_routing_runs_as_routed() {
        let registry = Registry::new([version("v1")]);
        let routed = registry.get("worker").expect("v1 serves");
        registry.remove("worker");
        assert_eq!(names(&versions(&registry, routed)), ("v1", None));
    }
}
