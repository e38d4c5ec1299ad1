//! The settings a plugin's calls read through `config.get`: its manifest's `[config]`, with
//! secrets already resolved when it loaded.

use std::collections::BTreeMap;

/// A plugin's settings, secrets resolved; `Debug` shows the keys, never the values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Settings(BTreeMap<String, String>);

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Settings {
    /// Settings with these values (secrets already resolved).
    pub fn new(values: BTreeMap<String, String>) -> Self {
        Settings(values)
    }

    /// The setting with this key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
}
