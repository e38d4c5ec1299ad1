//! The set of loaded plugins, readable on the hot path without locks.
//!
//! Readers take a snapshot (an `Arc` of the map) per message; a reload swaps in a new map
//! atomically. A call already running keeps the `Arc<Plugin>` it started with, so in-flight
//! work finishes on the old version.
//!
//! Beside the plugins it keeps the last load error of each name, so an operator can see why a
//! dropped file is not serving (the previous version keeps serving meanwhile), and counts the
//! loads of each name by result, for the metrics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::plugin::Plugin;
use crate::plugin::canary::Canaries;
use crate::rollout::record::DecidedBy;

/// Loaded plugins by name.
#[derive(Debug, Default)]
pub struct Registry {
    plugins: ArcSwap<BTreeMap<String, Arc<Plugin>>>,
    errors: Mutex<BTreeMap<String, String>>,
    loads: Mutex<BTreeMap<(String, LoadResult), u64>>,
    /// When each serving version was loaded, in milliseconds since the Unix epoch.
    loaded_at: Mutex<BTreeMap<String, u64>>,
    /// New versions taking a share of keys while their rollout runs.
    pub(crate) canaries: Canaries,
}

/// How a load of a plugin's files ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LoadResult {
    /// A version was loaded and serves (first load or reload).
    Loaded,
    /// The file or its manifest was refused; the previous version, if any, still serves.
    Failed,
    /// The file was deleted and the plugin unloaded.
    Removed,
}

impl LoadResult {
    /// Its name in metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            LoadResult::Loaded => "loaded",
            LoadResult::Failed => "failed",
            LoadResult::Removed => "removed",
        }
    }
}

/// One plugin as an operator sees it: what serves, and what last failed to load.
#[derive(Clone, Debug)]
pub struct PluginStatus {
    /// The plugin name.
    pub name: String,
    /// The version serving its messages, if any.
    pub serving: Option<Arc<Plugin>>,
    /// Why the latest file (or manifest) under this name did not load, if it did not.
    pub last_error: Option<String>,
}

impl Registry {
    /// A registry holding these plugins.
    pub fn new(plugins: impl IntoIterator<Item = Plugin>) -> Self {
        let map: BTreeMap<String, Arc<Plugin>> = plugins
            .into_iter()
            .map(|p| (p.name.clone(), Arc::new(p)))
            .collect();
        let now = crate::message::now_ms();
        let loaded_at = map.keys().map(|name| (name.clone(), now)).collect();
        Registry {
            plugins: ArcSwap::from_pointee(map),
            errors: Mutex::default(),
            loads: Mutex::default(),
            loaded_at: Mutex::new(loaded_at),
            canaries: Canaries::default(),
        }
    }

    /// The plugin with this name.
    pub fn get(&self, name: &str) -> Option<Arc<Plugin>> {
        self.plugins.load().get(name).cloned()
    }

    /// Adds or replaces a plugin, and forgets why an earlier file under its name did not load.
    /// Both happen under the errors' lock, so no reader sees the new version beside the old
    /// error.
    pub(crate) fn insert(&self, plugin: Plugin) {
        self.count(&plugin.name, LoadResult::Loaded);
        self.serve(Arc::new(plugin));
    }

    /// Makes `plugin` its name's serving version, ending any canary of that name.
    ///
    /// The new version serves before the canary ends: a run reads the canary first and the
    /// serving version after (`pipeline::canary::versions`), so a promoted canary is never
    /// missing from both while it moves from one to the other.
    fn serve(&self, plugin: Arc<Plugin>) {
        (self.loaded_at.lock().unwrap_or_else(|e| e.into_inner()))
            .insert(plugin.name.clone(), crate::message::now_ms());
        let mut errors = self.errors_mut();
        errors.remove(&plugin.name);
        self.plugins.rcu(|map| {
            let mut map = BTreeMap::clone(map);
            map.insert(plugin.name.clone(), Arc::clone(&plugin));
            map
        });
        drop(errors);
        self.canaries.end(&plugin.name, None);
    }

    /// Starts `plugin` as a canary beside its name's serving version, at `percent` of keys.
    pub(crate) fn start_canary(&self, plugin: Plugin, percent: u8) {
        self.count(&plugin.name, LoadResult::Loaded);
        self.errors_mut().remove(&plugin.name);
        self.join_canary(Arc::new(plugin), percent);
    }

    /// Runs `plugin` as its name's canary at `percent` of keys.
    pub(crate) fn join_canary(&self, plugin: Arc<Plugin>, percent: u8) {
        tracing::info!(plugin = %plugin.name, version = %plugin.version, percent, "canary started");
        self.canaries.start(plugin, percent);
    }

    /// Makes `plugin` its name's serving version (a kept version the rollout falls back on).
    pub(crate) fn serve_kept(&self, plugin: Plugin) {
        self.serve(Arc::new(plugin));
    }

    /// Promotes `name`'s canary, if it is `version`: it takes all traffic.
    pub(crate) fn promote(&self, name: &str, version: &str, reason: &str) {
        let canary = self.canaries.get(name);
        if let Some(slot) = canary.filter(|slot| slot.plugin.version == version) {
            tracing::info!(plugin = %name, %version, %reason, "canary promoted");
            self.serve(Arc::clone(&slot.plugin));
        }
    }

    /// Rolls `name`'s canary back, if it is `version`: the serving version keeps all traffic,
    /// and why is shown as the name's load error until another file loads.
    pub(crate) fn roll_back(&self, name: &str, version: &str, by: DecidedBy, reason: &str) {
        if self.canaries.end(name, Some(version)).is_some() {
            tracing::warn!(plugin = %name, %version, %reason, "canary rolled back");
            self.canaries.rolled_back(name, by.label());
            self.rolled_back(name, version, reason);
        }
    }

    /// Shows that `name`'s `version` was rolled back, as its load error.
    pub(crate) fn rolled_back(&self, name: &str, version: &str, reason: &str) {
        self.errors_mut().insert(
            name.to_string(),
            format!(
                "version {version} was rolled back: {reason}; the previous version serves, and the file is not tried again until it changes"
            ),
        );
    }

    /// Removes a plugin; calls in flight finish.
    pub(crate) fn remove(&self, name: &str) {
        self.count(name, LoadResult::Removed);
        self.plugins.rcu(|map| {
            let mut map = BTreeMap::clone(map);
            map.remove(name);
            map
        });
    }

    /// Records why the latest file under `name` did not load.
    pub(crate) fn set_error(&self, name: &str, reason: String) {
        self.count(name, LoadResult::Failed);
        self.errors_mut().insert(name.to_string(), reason);
    }

    /// Why `name` is not serving: its last load error, or that no file of that name loaded.
    pub fn why_not_serving(&self, name: &str) -> String {
        (self.errors_mut().get(name).cloned())
            .unwrap_or_else(|| format!("no {name}.wasm has loaded from the plugins directory"))
    }

    /// Forgets the load error of `name` (its latest file loaded, or is gone).
    pub(crate) fn clear_error(&self, name: &str) {
        self.errors_mut().remove(name);
    }

    fn count(&self, name: &str, result: LoadResult) {
        // Plain counters: a panic while the lock was held left nothing half-done.
        let mut loads = self.loads.lock().unwrap_or_else(|e| e.into_inner());
        *loads.entry((name.to_string(), result)).or_default() += 1;
    }

    /// When the version of `name` serving now was loaded, in milliseconds since the Unix epoch.
    pub(crate) fn loaded_at_ms(&self, name: &str) -> Option<u64> {
        self.get(name)?;
        let loaded_at = self.loaded_at.lock().unwrap_or_else(|e| e.into_inner());
        loaded_at.get(name).copied()
    }

    /// Loads of each plugin name by result, since the host started.
    pub(crate) fn loads(&self) -> BTreeMap<(String, LoadResult), u64> {
        self.loads.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn errors_mut(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        // The map holds plain strings, so a panic while it was held left nothing half-done.
        self.errors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every plugin that is loaded or failed to load, by name.
    pub fn status(&self) -> Vec<PluginStatus> {
        let plugins = self.plugins.load();
        let errors = self.errors_mut().clone();
        let mut names: Vec<&String> = plugins.keys().chain(errors.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|name| PluginStatus {
                name: name.clone(),
                serving: plugins.get(name).cloned(),
                last_error: errors.get(name).cloned(),
            })
            .collect()
    }
}
