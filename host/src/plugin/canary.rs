//! Canary versions beside the serving ones: which keys each takes, what their runs came to.
//!
//! While a plugin's rollout runs ([`crate::rollout`]), its new version sits here, not in the
//! registry's serving map: a message runs on it when a stable hash of its idempotency key falls
//! under the canary's percent, so every redelivery of a key, on any host, meets the same
//! version. Each slot counts the runs of both versions while it exists; the rollout follower
//! takes those counts into the fleet's record.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::rollout::FailureKind;
use crate::plugin::Plugin;
use crate::rollout::record::{RolloutRecord, Tally};

/// One plugin's canary.
#[derive(Debug)]
pub(crate) struct CanarySlot {
    /// The canary version.
    pub(crate) plugin: Arc<Plugin>,
    percent: AtomicU8,
    runs: Mutex<(Tally, Tally)>,
}

impl CanarySlot {
    /// Whether the message keyed `key` runs on the canary.
    pub(crate) fn takes(&self, key: &str) -> bool {
        crate::rollout::bucket(&self.plugin.name, key) < self.percent.load(Ordering::Relaxed)
    }

    /// Counts a run that ended `failed` (`None`: acked), on the canary or the serving version.
    pub(crate) fn count(&self, on_canary: bool, failed: Option<FailureKind>) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        if on_canary {
            runs.1.count(failed);
        } else {
            runs.0.count(failed);
        }
    }

    /// The counts since the last call: (serving, canary).
    pub(crate) fn take_runs(&self) -> (Tally, Tally) {
        std::mem::take(&mut *self.runs.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Gives counts back that could not be recorded, to be tried with the next ones.
    pub(crate) fn put_back_runs(&self, serving: Tally, canary: Tally) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.0.add(&serving);
        runs.1.add(&canary);
    }

    /// Follows the fleet's share.
    pub(crate) fn set_percent(&self, percent: u8) {
        self.percent.store(percent, Ordering::Relaxed);
    }
}

/// The canaries of one host, and what it last saw of each plugin's rollout.
#[derive(Debug, Default)]
pub(crate) struct Canaries {
    slots: ArcSwap<BTreeMap<String, Arc<CanarySlot>>>,
    /// The last record read for each plugin, for listings and metrics.
    seen: Mutex<BTreeMap<String, RolloutRecord>>,
    /// Rollbacks by plugin and reason kind.
    rollbacks: Mutex<BTreeMap<(String, &'static str), u64>>,
}

impl Canaries {
    /// The canary of `name`, while one runs.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<CanarySlot>> {
        self.slots.load().get(name).cloned()
    }

    /// Every canary running here.
    pub(crate) fn all(&self) -> Vec<Arc<CanarySlot>> {
        self.slots.load().values().cloned().collect()
    }

    /// Starts `plugin` as its name's canary at `percent` (replacing an earlier canary).
    pub(crate) fn start(&self, plugin: Arc<Plugin>, percent: u8) {
        let slot = Arc::new(CanarySlot {
            plugin,
            percent: AtomicU8::new(percent),
            runs: Mutex::default(),
        });
        self.slots.rcu(|map| {
            let mut map = BTreeMap::clone(map);
            map.insert(slot.plugin.name.clone(), Arc::clone(&slot));
            map
        });
    }

    /// Ends `name`'s canary, if it is version `version` (any version for `None`); the slot.
    pub(crate) fn end(&self, name: &str, version: Option<&str>) -> Option<Arc<CanarySlot>> {
        let slot = self.get(name)?;
        if version.is_some_and(|v| v != slot.plugin.version) {
            return None;
        }
        self.slots.rcu(|map| {
            let mut map = BTreeMap::clone(map);
            map.remove(name);
            map
        });
        Some(slot)
    }

    /// Notes the record last read for `name`.
    pub(crate) fn saw(&self, name: &str, record: RolloutRecord) {
        (self.seen.lock().unwrap_or_else(|e| e.into_inner())).insert(name.to_string(), record);
    }

    /// The records last read, by plugin.
    pub(crate) fn seen(&self) -> BTreeMap<String, RolloutRecord> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Counts a rollback of `name` for a reason of `kind`.
    pub(crate) fn rolled_back(&self, name: &str, kind: &'static str) {
        let mut map = self.rollbacks.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry((name.to_string(), kind)).or_default() += 1;
    }

    /// Rollbacks by plugin and reason kind.
    pub(crate) fn rollbacks(&self) -> BTreeMap<(String, &'static str), u64> {
        self.rollbacks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
