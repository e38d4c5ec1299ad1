//! The operator's verbs on the fleet: see it, pause a queue, resume it. They act on the
//! records every host follows within a second; `qhost fleet` and the console call these.

use anyhow::{Context as _, bail};

use super::follow::{read, set_paused};
use super::record::{Pauses, Roster};
use crate::config::Config;
use crate::host::open::open_store;

/// The fleet sharing `config`'s store: its roster and its pauses.
pub async fn status(config: &Config) -> anyhow::Result<(Roster, Pauses)> {
    let store = open_store(config).await?;
    Ok(read(store.as_ref(), &config.namespace).await?)
}

/// Pauses `queue` on every host (within a second); `false` when it already was.
pub async fn pause(config: &Config, queue: &str) -> anyhow::Result<bool> {
    set(config, queue, true).await
}

/// Resumes `queue` on every host; `false` when it was not paused.
pub async fn resume(config: &Config, queue: &str) -> anyhow::Result<bool> {
    set(config, queue, false).await
}

async fn set(config: &Config, queue: &str, paused: bool) -> anyhow::Result<bool> {
    if !config.queues.iter().any(|q| q.name == queue) {
        let names: Vec<&str> = config.queues.iter().map(|q| q.name.as_str()).collect();
        bail!(
            "no consumed queue `{queue}` in this configuration (consumed: {})",
            names.join(", ")
        );
    }
    let store = open_store(config).await?;
    let by = super::host_name();
    set_paused(store.as_ref(), &config.namespace, queue, paused, &by)
        .await
        .with_context(|| format!("writing the fleet's pauses for `{queue}`"))
}
