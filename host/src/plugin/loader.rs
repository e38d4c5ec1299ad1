//! Loading plugin files: compile, check against the world, wrap as a [`Plugin`].
//!
//! A plugin is `NAME.wasm` with an optional `NAME.toml` manifest beside it. Its version is a
//! prefix of the sha256 of the `.wasm`, so every log line and dead letter says exactly which
//! build handled a message. A file that fails to compile or does not implement the world is
//! reported with its path and the reason; the others load.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use wasmtime::component::Component;

use super::manifest::Manifest;
use super::secrets;
use crate::message::wire::valid_plugin_name;
use crate::plugin::Plugin;
use crate::runtime::Pre;
use crate::runtime::Runtime;
use crate::runtime::WIT_VERSION;
use crate::runtime::world::World;
use crate::runtime::{Sandbox, WasmInvoker};

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

/// Why a component did not compile: it does not fit this host's instance pool (its memory or
/// tables are larger than the host allows), or it is not a valid component at all.
fn compile_error(e: anyhow::Error) -> anyhow::Error {
    if format!("{e:#}").contains("pooling allocator") {
        e.context("it does not fit this host's limits (max-plugin-memory-mib, the instance pool)")
    } else {
        e.context("it is not a valid WebAssembly component")
    }
}

/// A core module is not a component: say how to make one, rather than the parser's words.
pub(crate) fn check_is_component(bytes: &[u8]) -> anyhow::Result<()> {
    const CORE_MODULE: [u8; 8] = *b"\0asm\x01\0\0\0";
    if bytes.starts_with(&CORE_MODULE) {
        anyhow::bail!(
            "it is a core WebAssembly module, not a component; wrap it with \
             `wasm-tools component new MODULE.wasm --adapt wasi_snapshot_preview1.reactor.wasm -o NAME.wasm` \
             (the WASI adapter comes with each wasmtime release), or build for wasm32-wasip2"
        );
    }
    Ok(())
}

/// A component built against another `qhost:handler` package version is refused naming both
/// versions, rather than with the linker's "wrong type" for the first item that differs.
fn check_version(runtime: &Runtime, component: &Component) -> anyhow::Result<()> {
    let ty = component.component_type();
    let built = ty
        .imports(runtime.engine())
        .filter_map(|(name, _)| name.strip_prefix("qhost:handler/"))
        .filter_map(|rest| rest.split_once('@').map(|(_, version)| version))
        .find(|version| !same_release(version, WIT_VERSION));
    match built {
        Some(version) => anyhow::bail!(
            "it was built against qhost:handler@{version}, and this host serves qhost:handler@{WIT_VERSION}: \
             rebuild it with this host's wit/handler.wit, or run a host that serves {version}"
        ),
        None => Ok(()),
    }
}

/// Whether two versions are one release as far as compatibility goes: the same major, and for
/// 0.x the same minor too (semver's rule).
fn same_release(a: &str, b: &str) -> bool {
    let parts = |v: &str| -> Vec<String> { v.split('.').take(2).map(str::to_string).collect() };
    let (a, b) = (parts(a), parts(b));
    if a.first().is_some_and(|major| major == "0") {
        a == b
    } else {
        a.first() == b.first()
    }
}

/// Checks that a compiled component implements the `qhost:handler` world with what the linker
/// provides, and returns the pre-instantiated handler (of one message, or a batch handler).
pub(crate) fn check_world(runtime: &Runtime, component: &Component) -> anyhow::Result<Pre> {
    check_version(runtime, component)?;
    let pre = runtime
        .linker()
        .instantiate_pre(component)
        .map_err(anyhow::Error::from)
        .context("its imports are not all provided by qhost")?;
    Pre::new(pre)
}

/// Loads the plugin at `path` (blocking: compiles).
pub fn load_file(runtime: &Runtime, path: &Path) -> Result<Plugin, LoadError> {
    load_file_with(runtime, path, |_| {})
}

/// As [`load_file`], with its manifest changed by `edit` first (`qhost invoke --config`).
pub(crate) fn load_file_with(
    runtime: &Runtime,
    path: &Path,
    edit: impl FnOnce(&mut Manifest),
) -> Result<Plugin, LoadError> {
    load_file_in(runtime, path, edit, None)
}

/// As [`load_file_with`], into `world` when given (`qhost test`, `qhost replay`): its granted
/// HTTP requests answered by the world, never sent, and its clock the world's.
pub(crate) fn load_file_in(
    runtime: &Runtime,
    path: &Path,
    edit: impl FnOnce(&mut Manifest),
    world: Option<Arc<World>>,
) -> Result<Plugin, LoadError> {
    load_as(runtime, LoadAs::file(path), edit, world)
}

/// A plugin file to load, and what it is called and governed by when that is not what its
/// place says (a test names a build's output, whose manifest lives in the project).
#[derive(Clone, Debug)]
pub(crate) struct LoadAs {
    /// The `.wasm` file.
    pub(crate) path: PathBuf,
    /// Its plugin name; `None`: the file stem.
    pub(crate) name: Option<String>,
    /// Its manifest; `None`: `NAME.toml` beside it.
    pub(crate) manifest: Option<PathBuf>,
}

impl LoadAs {
    /// The file at `path`, named and governed as the plugins directory would have it.
    pub(crate) fn file(path: &Path) -> Self {
        LoadAs {
            path: path.to_path_buf(),
            name: None,
            manifest: None,
        }
    }
}

/// Loads the plugin `what` names, its manifest changed by `edit`, into `world` when given.
pub(crate) fn load_as(
    runtime: &Runtime,
    what: LoadAs,
    edit: impl FnOnce(&mut Manifest),
    world: Option<Arc<World>>,
) -> Result<Plugin, LoadError> {
    let path = what.path.as_path();
    let fail = |reason: anyhow::Error| LoadError {
        path: path.to_path_buf(),
        reason,
    };
    let name = match what.name {
        Some(name) if valid_plugin_name(&name) => name,
        Some(name) => return Err(fail(anyhow::anyhow!("`{name}` is not a valid plugin name"))),
        None => plugin_name(path)
            .ok_or_else(|| fail(anyhow::anyhow!("the file name is not a valid plugin name")))?,
    };
    let manifest_path = what.manifest.unwrap_or_else(|| path.with_extension("toml"));
    let mut manifest = Manifest::load_or_default(&manifest_path).map_err(fail)?;
    edit(&mut manifest);
    let bytes = std::fs::read(path).context("reading it").map_err(fail)?;
    build_in(runtime, path, (name, &bytes), manifest, world)
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
    build_in(runtime, path, (name, bytes), manifest, None)
}

/// As [`build`], into `world` when given.
fn build_in(
    runtime: &Runtime,
    path: &Path,
    (name, bytes): (String, &[u8]),
    manifest: Manifest,
    world: Option<Arc<World>>,
) -> Result<Plugin, LoadError> {
    let fail = |reason: anyhow::Error| LoadError {
        path: path.to_path_buf(),
        reason,
    };
    check_is_component(bytes).map_err(fail)?;
    let component = runtime.compile(bytes).map_err(|e| fail(compile_error(e)))?;
    let pre = check_world(runtime, &component).map_err(fail)?;
    if manifest.batch.is_some() && !pre.is_batch() {
        return Err(fail(anyhow::anyhow!(
            "its manifest has a [batch] table, and it exports `handle` (one message per call): \
             only a batch handler (`handle-batch`) is called with batches"
        )));
    }
    let most = runtime.max_memory_mib();
    if manifest.limits.memory_mib > most {
        return Err(fail(anyhow::anyhow!(
            "its manifest asks for limits.memory-mib = {}, above this host's max-plugin-memory-mib = {most}",
            manifest.limits.memory_mib
        )));
    }
    let settings = secrets::resolve(&manifest.config, runtime.secrets())
        .map_err(|why| fail(anyhow::anyhow!(why)))?;
    let version = version_of(bytes);
    let sandbox = Sandbox {
        world,
        ..manifest.sandbox()
    };
    let kv_counts = Arc::clone(&sandbox.kv_counts);
    let invoker =
        WasmInvoker::new(pre, (&name, &version), sandbox, settings, runtime).map_err(fail)?;
    // Instantiated once now, so a plugin that compiles but cannot run (an initial memory or
    // table over the pool's limits, a start function that traps) is refused at load, and the
    // version it would replace keeps serving.
    invoker
        .probe()
        .context("it cannot be instantiated")
        .map_err(fail)?;
    let plugin = Plugin::new(name, version, manifest, Arc::new(invoker));
    Ok(plugin.with_kv(kv_counts, Arc::clone(runtime.state())))
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
        assert!(same_release("0.1.0", "0.1.3") && !same_release("0.2.0", "0.1.0"));
        assert!(same_release("1.2.0", "1.0.0") && !same_release("2.0.0", "1.0.0"));
        let core = check_is_component(b"\0asm\x01\0\0\0")
            .unwrap_err()
            .to_string();
        assert!(core.contains("wasm-tools component new"), "{core}");
        assert_ne!(version_of(b"abc"), version_of(b"abd"));
    }
}
