//! Each host's rollout follower: once a tick, for every canary it runs, it joins (or starts) the
//! plugin's rollout in the store, adds the runs it counted, applies the rules, and follows the
//! record: the share, a promotion, a rollback. A decision made anywhere (another host, an
//! operator) reaches this host within a tick.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::record::{Change, RolloutRecord, RolloutState};
use super::{change, key, read, rules};
use crate::config::Config;
use crate::config::rollout::RolloutPolicy;
use crate::idempotency::{SharedRecords, StoreResult};
use crate::plugin::canary::CanarySlot;
use crate::plugin::kept;
use crate::plugin::registry::Registry;
use crate::plugin::reload::PluginDir;

/// How often a host follows its rollouts.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// Follows every canary of `registry` until `stop`, calling `changed` after each tick that
/// followed one (to publish the plugins' status, rollouts included).
pub(crate) async fn run(
    store: Arc<dyn SharedRecords>,
    plugins: Arc<PluginDir>,
    config: Arc<Config>,
    stop: CancellationToken,
    changed: Arc<dyn Fn(&Registry) + Send + Sync>,
) {
    let registry = Arc::clone(plugins.registry());
    join_at_start(&*store, &plugins, &config).await;
    changed(&registry);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        let running = registry.canaries.all();
        for slot in &running {
            match step(&*store, &registry, &config, slot).await {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(plugin = %slot.plugin.name, error = %e, "could not follow the rollout; the canary keeps its share, and its counts wait for the store");
                }
                Err(_) => {}
            }
        }
        if !running.is_empty() {
            changed(&registry);
        }
    }
}

/// A host that starts while one of its plugins' rollouts is undecided (or after it was rolled
/// back), its file being the rollout's canary, takes the serving version from the versions it
/// kept (`plugin::kept`) and joins the rollout (or serves the previous version). Without the
/// kept version it says so and serves its file for every key.
async fn join_at_start(store: &dyn SharedRecords, plugins: &Arc<PluginDir>, config: &Config) {
    let registry = plugins.registry();
    for status in registry.status() {
        let (name, Some(file)) = (status.name, status.serving) else {
            continue;
        };
        if !matches!(config.rollout.policy(&name), RolloutPolicy::Canary(_)) {
            continue;
        }
        let record = match read(store, &key(&config.namespace, &name)).await {
            Ok(Some(record)) => record,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(plugin = %name, error = %e, "could not read the plugin's rollout at start");
                continue;
            }
        };
        if record.canary != file.version || record.state == RolloutState::Promoted {
            continue;
        }
        let Some(data) = plugins.data_dir().map(std::path::Path::to_path_buf) else {
            continue;
        };
        let (dir, plugin, version) = (Arc::clone(plugins), name.clone(), record.serving.clone());
        let kept = tokio::task::spawn_blocking(move || {
            kept::load(dir.runtime(), &data, &plugin, &version)
        })
        .await;
        match kept {
            Ok(Ok(previous)) => {
                registry.serve_kept(previous);
                match record.state {
                    RolloutState::Canary => registry.join_canary(file, record.percent),
                    _ => registry.rolled_back(&name, &record.canary, &record.reason),
                }
                registry.canaries.saw(&name, record);
            }
            Ok(Err(e)) => tracing::warn!(
                plugin = %name,
                serving = %record.serving,
                state = record.state.name(),
                error = %format!("{e:#}"),
                "this host's file is the rollout's canary, but it does not have the serving version; it serves its file for every key"
            ),
            Err(_) => {}
        }
    }
}

/// One tick of one canary.
async fn step(
    store: &dyn SharedRecords,
    registry: &Registry,
    config: &Config,
    slot: &CanarySlot,
) -> StoreResult<()> {
    let name = slot.plugin.name.clone();
    let RolloutPolicy::Canary(policy) = config.rollout.policy(&name) else {
        registry.promote(
            &name,
            &slot.plugin.version,
            "the rollout policy is immediate",
        );
        return Ok(());
    };
    let Some(serving) = registry.get(&name) else {
        return Ok(());
    };
    let (at, canary) = (key(&config.namespace, &name), slot.plugin.version.clone());
    let now = crate::message::now_ms();
    let begin = Change::Begin {
        serving: serving.version.clone(),
        canary: canary.clone(),
        percent: policy.percent,
        now_ms: now,
    };
    let mut record = change(store, &at, &begin).await?;
    let (serving_runs, canary_runs) = slot.take_runs();
    if !(serving_runs.is_empty() && canary_runs.is_empty()) {
        let add = Change::Add {
            canary: canary.clone(),
            serving: serving_runs.clone(),
            canary_runs: canary_runs.clone(),
        };
        match change(store, &at, &add).await {
            Ok(after) => record = after,
            Err(e) => {
                slot.put_back_runs(serving_runs, canary_runs);
                return Err(e);
            }
        }
    }
    let Some(mut record) = record else {
        return Ok(());
    };
    if record.canary == canary
        && record.state == RolloutState::Canary
        && let Some(decision) = rules::decide(&policy, &record, now)
    {
        let decide = Change::Decide {
            canary: canary.clone(),
            decision,
            now_ms: now,
        };
        if let Some(after) = change(store, &at, &decide).await? {
            record = after;
        }
    }
    follow(registry, slot, &record);
    registry.canaries.saw(&name, record);
    Ok(())
}

/// Does here what the record says of this host's canary.
fn follow(registry: &Registry, slot: &CanarySlot, record: &RolloutRecord) {
    let (name, version) = (&slot.plugin.name, &slot.plugin.version);
    if &record.canary != version {
        return;
    }
    match record.state {
        RolloutState::Canary => slot.set_percent(record.percent),
        RolloutState::Promoted => registry.promote(name, version, &record.reason),
        RolloutState::RolledBack => {
            registry.roll_back(name, version, record.decided_by, &record.reason)
        }
    }
}
