//! A run while its plugin has a canary (`crate::rollout`): the key's bucket picks the version,
//! and a canary run that fails runs again at once on the serving version, under the same lease,
//! so the canary's failure costs the message nothing: no redelivery, no attempt, no dead
//! letter. Both versions' runs are counted for the rollout's rules.

use std::sync::Arc;

use super::delivery::Delivery;
use super::run::invoke;
use crate::config::rollout::FailureKind;
use crate::handler::{Failure, HandlerMessage, Invocation, Outcome};
use crate::plugin::Plugin;
use crate::plugin::canary::CanarySlot;

/// Runs `input` on the canary when its key falls in the canary's share, else (or when the
/// canary fails) on `serving`; the answer and the version that gave it (whose name and version
/// its outbox carries).
pub(super) async fn invoke_either(
    delivery: &Delivery,
    serving: &Arc<Plugin>,
    canary: &CanarySlot,
    input: HandlerMessage,
) -> (Result<Invocation, Failure>, Arc<Plugin>) {
    if canary.takes(&input.idempotency_key) {
        let result = invoke(delivery, &canary.plugin, input.clone()).await;
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
    let result = invoke(delivery, serving, input).await;
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
