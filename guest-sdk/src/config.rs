//! Per-plugin settings, from the `[config]` table of the plugin's manifest.

/// The setting with this key, if the manifest has one.
pub fn get(key: &str) -> Option<String> {
    crate::bindings::qhost::handler::config::get(key)
}
