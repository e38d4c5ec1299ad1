//! An operator's promote and rollback: a decision written to the plugin's record, as a host's
//! own would be, so every host of the fleet follows it within a tick.

use anyhow::Context as _;

use super::record::{Change, DecidedBy, Decision, RolloutRecord, RolloutState};
use super::{change, key, read};
use crate::config::Config;

/// Promotes (`promote`) or rolls back `plugin`'s running canary; the record after.
pub async fn decide_by_hand(
    config: &Config,
    plugin: &str,
    promote: bool,
) -> anyhow::Result<RolloutRecord> {
    let store = crate::host::open_store(config).await?;
    decide_in(&*store, &config.namespace, plugin, promote).await
}

/// [`decide_by_hand`] in `store` under `namespace` (the console's door, on its host's store).
pub(crate) async fn decide_in(
    store: &dyn crate::idempotency::SharedRecords,
    namespace: &str,
    plugin: &str,
    promote: bool,
) -> anyhow::Result<RolloutRecord> {
    let at = key(namespace, plugin);
    let current = read(store, &at).await?;
    let Some(current) = current.filter(|r| r.state == RolloutState::Canary) else {
        anyhow::bail!("{plugin} has no canary running (qhost plugins list shows its rollout)");
    };
    let (state, reason) = if promote {
        (RolloutState::Promoted, "promoted by hand")
    } else {
        (RolloutState::RolledBack, "rolled back by hand")
    };
    let decision = Decision {
        state,
        by: DecidedBy::ByHand,
        reason: reason.to_string(),
    };
    let decide = Change::Decide {
        canary: current.canary.clone(),
        decision,
        now_ms: crate::message::now_ms(),
    };
    let after = change(store, &at, &decide)
        .await?
        .context("the rollout record vanished")?;
    if after.canary != current.canary || after.state != state {
        anyhow::bail!(
            "{plugin}'s rollout was decided meanwhile: {} ({})",
            after.state.name(),
            after.reason
        );
    }
    Ok(after)
}
