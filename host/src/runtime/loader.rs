//! Loading plugin files: compile, check against the world, wrap as a [`Plugin`].
//!
//! A plugin is `NAME.wasm` with an optional `NAME.toml` manifest beside it. Its version is a
//! prefix of the sha256 of the `.wasm`, so every log line and dead letter says exactly which
//! build handled a message. A file that fails to compile or does not implement the world is
//! reported with its path and the reason; the others load.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use wasmtime::component::Component;

use super::bindings::HandlerPre;
use super::engine::Runtime;
use super::manifest::Manifest;
use super::wasm::WasmInvoker;
use crate::handler::Plugin;
use crate::message::wire::valid_plugin_name;

/// Hex digits of the content hash used as the version.
const VERSION_LEN: usize = 12;

/// A plugin file that could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("plugin {path} was not loaded: {reason:#}")]
pub struct LoadError {
    /// The `.wasm` (or manifest) at fault.
    pub path: PathBuf,
    /// Why.
    pub reason: anyhow::Error,
}

/// The plugin name for a `.wasm` path: its file stem, if it is a valid name.
pub(crate) fn plugin_name(path: &Path) -> Option<String> {
    if path.extension()? != "wasm" {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    valid_plugin_name(stem).then(|| stem.to_string())
}

/// The version string for a plugin's bytes.
pub fn version_of(bytes: &[u8]) -> String {
    let mut v = crate::digest::sha256_hex(bytes);
    v.truncate(VERSION_LEN);
    v
}

/// Checks that a compiled component implements the `qhost:handler` world with what the linker
/// provides, and returns the pre-instantiated handler.
pub(crate) fn check_world(
    runtime: &Runtime,
    component: &Component,
) -> anyhow::Result<HandlerPre<super::state::HostState>> {
    let pre = runtime
        .linker()
        .instantiate_pre(component)
        .map_err(anyhow::Error::from)
        .context("its imports are not all provided by qhost")?;
    HandlerPre::new(pre)
        .map_err(anyhow::Error::from)
        .context("it does not export the qhost:handler world")
}

/// Loads the plugin at `path` (blocking: compiles).
pub fn load_file(runtime: &Runtime, path: &Path) -> Result<Plugin, LoadError> {
    let fail = |reason: anyhow::Error| LoadError {
        path: path.to_path_buf(),
        reason,
    };
    let name = plugin_name(path)
        .ok_or_else(|| fail(anyhow::anyhow!("the file name is not a valid plugin name")))?;
    let manifest = Manifest::load_or_default(&path.with_extension("toml")).map_err(fail)?;
    let bytes = std::fs::read(path).context("reading it").map_err(fail)?;
    build(runtime, path, name, &bytes, manifest)
}

/// Compiles (or takes from the cache) the component in `bytes`, read from `path`, checks it
/// against the world and wraps it as plugin `name` with its manifest (blocking).
pub(crate) fn build(
    runtime: &Runtime,
    path: &Path,
    name: String,
    bytes: &[u8],
    manifest: Manifest,
) -> Result<Plugin, LoadError> {
    let fail = |reason: anyhow::Error| LoadError {
        path: path.to_path_buf(),
        reason,
    };
    let component = runtime
        .compile(bytes)
        .context("it is not a valid WebAssembly component")
        .map_err(fail)?;
    let pre = check_world(runtime, &component).map_err(fail)?;
    let version = version_of(bytes);
    let invoker = WasmInvoker::new(pre, (&name, &version), &manifest, runtime.send_shape());
    Ok(Plugin::new(
        name,
        version,
        manifest,
        std::sync::Arc::new(invoker),
    ))
}

/// The `.wasm` files in `dir`, sorted.
pub(crate) fn plugin_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading plugins directory {}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_file_stems_and_are_never_paths() {
        assert_eq!(
            plugin_name(Path::new("/p/email-reminder.wasm")).as_deref(),
            Some("email-reminder")
        );
        assert_eq!(plugin_name(Path::new("/p/a.b.wasm")), None);
        assert_eq!(plugin_name(Path::new("/p/x.toml")), None);
        assert!(!valid_plugin_name("../x"));
        assert!(!valid_plugin_name(""));
    }

    #[test]
    fn versions_are_short_content_hashes() {
        assert_eq!(version_of(b"abc"), "ba7816bf8f01");
        assert_ne!(version_of(b"abc"), version_of(b"abd"));
    }
}
