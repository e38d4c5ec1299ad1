//! The set of loaded plugins, readable on the hot path without locks.
//!
//! Readers take a snapshot (an `Arc` of the map) per message; a reload swaps in a new map
//! atomically. A call already running keeps the `Arc<Plugin>` it started with, so in-flight
//! work finishes on the old version.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::handler::Plugin;

/// Loaded plugins by name.
#[derive(Debug, Default)]
pub struct Registry {
    plugins: ArcSwap<BTreeMap<String, Arc<Plugin>>>,
}

impl Registry {
    /// A registry holding these plugins.
    pub fn new(plugins: impl IntoIterator<Item = Plugin>) -> Self {
        let map = plugins
            .into_iter()
            .map(|p| (p.name.clone(), Arc::new(p)))
            .collect();
        Registry {
            plugins: ArcSwap::from_pointee(map),
        }
    }

    /// The plugin with this name.
    pub fn get(&self, name: &str) -> Option<Arc<Plugin>> {
        self.plugins.load().get(name).cloned()
    }

    /// Adds or replaces a plugin.
    pub fn insert(&self, plugin: Plugin) {
        let plugin = Arc::new(plugin);
        self.plugins.rcu(|map| {
            let mut map = BTreeMap::clone(map);
            map.insert(plugin.name.clone(), Arc::clone(&plugin));
            map
        });
    }

    /// Removes a plugin; calls in flight finish.
    pub fn remove(&self, name: &str) {
        self.plugins.rcu(|map| {
            let mut map = BTreeMap::clone(map);
            map.remove(name);
            map
        });
    }

    /// Names and versions of the loaded plugins.
    pub fn list(&self) -> Vec<(String, String)> {
        self.plugins
            .load()
            .values()
            .map(|p| (p.name.clone(), p.version.clone()))
            .collect()
    }
}
