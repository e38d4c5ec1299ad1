//! Keeping the registry in step with the plugins directory.
//!
//! [`PluginDir::sync`] compares what is on disk with what was last loaded, by content: for
//! every `NAME.wasm` it hashes the file and its `NAME.toml`, and reloads only a name whose
//! hashes changed. Comparing content rather than trusting file events makes every way of
//! deploying work the same: copy-then-rename, an in-place overwrite, a manifest edit, a
//! symlink swap, or events the watcher missed.
//!
//! - A new or changed plugin is compiled (or taken from the compiled-code cache), checked
//!   against the world, and swapped into the registry; calls in flight finish on the version
//!   they started with.
//! - A file that does not load leaves the previous version serving, and its reason is kept in
//!   the registry for `qhost plugins list`. The same bad bytes are not retried until they
//!   change.
//! - A file still being written (its size or modification time moves while it is read) is
//!   skipped; the writer's next event brings it back.
//! - A deleted file unloads its plugin; its messages are retried, then dead-lettered.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::Context as _;
use sha2::{Digest, Sha256};

use super::kept;
use super::loader::{self, LoadError};
use super::manifest::Manifest;
use super::registry::Registry;
use crate::config::rollout::{RolloutConfig, RolloutPolicy};
use crate::runtime::Runtime;

/// What a name's files held when they were last loaded (or refused).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint {
    wasm: [u8; 32],
    manifest: Option<[u8; 32]>,
}

/// What one [`PluginDir::sync`] changed.
#[derive(Debug, Default)]
pub(crate) struct SyncReport {
    /// Plugins loaded or replaced: name and new version.
    pub loaded: Vec<(String, String)>,
    /// Files that did not load (the previous version, if any, still serves).
    pub failed: Vec<LoadError>,
    /// Plugins whose file was deleted.
    pub unloaded: Vec<String>,
}

impl SyncReport {
    /// Whether nothing changed.
    pub(crate) fn is_empty(&self) -> bool {
        self.loaded.is_empty() && self.failed.is_empty() && self.unloaded.is_empty()
    }

    /// Logs each change.
    pub(crate) fn log(&self, registry: &Registry) {
        self.log_except(registry, |_| false);
    }

    /// Logs each change, except the failures of the plugins `reported` says the caller
    /// reports itself (a start refused for them, or a queue that waits for them, says why in
    /// one place).
    pub(crate) fn log_except(&self, registry: &Registry, reported: impl Fn(&str) -> bool) {
        for (name, version) in &self.loaded {
            tracing::info!(plugin = %name, %version, "plugin loaded");
        }
        for e in &self.failed {
            let name = e.path.file_stem().map(|n| n.to_string_lossy().into_owned());
            if name.as_deref().is_some_and(&reported) {
                continue;
            }
            let serving = name
                .and_then(|n| registry.get(&n))
                .map(|p| p.version.clone());
            let serving = serving.as_deref().unwrap_or("nothing");
            let (path, reason) = (e.path.display(), format!("{:#}", e.reason));
            // A reason can span lines (a manifest's TOML error shows the line it is on): in
            // text it ends the line, after what names the file, rather than sit in a field.
            if crate::logging::is_json() {
                tracing::error!(%path, %reason, still_serving = serving, "plugin not loaded");
            } else {
                tracing::error!("plugin {path} not loaded (still serving: {serving}): {reason}");
            }
        }
        for name in &self.unloaded {
            tracing::warn!(plugin = %name, "plugin file removed; plugin unloaded");
        }
    }
}

/// The plugins directory and the registry it feeds.
#[derive(Debug)]
pub(crate) struct PluginDir {
    runtime: Runtime,
    dir: PathBuf,
    registry: Arc<Registry>,
    seen: Mutex<BTreeMap<String, Fingerprint>>,
    /// How a changed file takes traffic (immediately unless configured otherwise).
    rollout: RolloutConfig,
    /// Where versions served under a canary policy are kept (`plugin::kept`), if anywhere.
    data_dir: Option<PathBuf>,
}

/// A file's bytes, if it held still while it was read.
fn read_settled(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let stamp = |m: std::fs::Metadata| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH));
    let before = stamp(std::fs::metadata(path)?);
    let bytes = std::fs::read(path)?;
    let after = stamp(std::fs::metadata(path)?);
    Ok((before == after && before.0 == bytes.len() as u64).then_some(bytes))
}

/// The manifest beside a plugin: its text, or `None` if there is none.
fn read_manifest(wasm: &Path) -> anyhow::Result<Option<String>> {
    let path = wasm.with_extension("toml");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl PluginDir {
    /// The directory `dir`, loading into `registry` with `runtime`. Nothing is read until
    /// [`PluginDir::sync`].
    pub(crate) fn new(runtime: Runtime, dir: &Path, registry: Arc<Registry>) -> Self {
        PluginDir {
            runtime,
            dir: dir.to_path_buf(),
            registry,
            seen: Mutex::default(),
            rollout: RolloutConfig::default(),
            data_dir: None,
        }
    }

    /// The same, a changed file taking traffic by `rollout`, the versions it serves under a
    /// canary policy kept in `data_dir`.
    pub(crate) fn with_rollout(
        mut self,
        rollout: RolloutConfig,
        data_dir: Option<PathBuf>,
    ) -> Self {
        self.rollout = rollout;
        self.data_dir = data_dir;
        self
    }

    /// The data directory versions are kept in.
    pub(crate) fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref()
    }

    /// The directory watched.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The registry fed.
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The runtime plugins are compiled with.
    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Brings the registry in step with the directory (blocking: may compile).
    pub(crate) fn sync(&self) -> anyhow::Result<SyncReport> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut report = SyncReport::default();
        let mut present = BTreeSet::new();
        for path in loader::plugin_files(&self.dir)? {
            let Some(name) = loader::plugin_name(&path) else {
                present.insert(self.refuse_name(&mut seen, &mut report, path));
                continue;
            };
            present.insert(name.clone());
            self.sync_one(&mut seen, &mut report, path, name);
        }
        let gone: Vec<String> = seen
            .keys()
            .filter(|n| !present.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            seen.remove(&name);
            self.registry.clear_error(&name);
            if self.registry.get(&name).is_some() {
                self.registry.remove(&name);
                report.unloaded.push(name);
            }
        }
        Ok(report)
    }

    fn sync_one(
        &self,
        seen: &mut BTreeMap<String, Fingerprint>,
        report: &mut SyncReport,
        path: PathBuf,
        name: String,
    ) {
        let fail = |reason: anyhow::Error| LoadError {
            path: path.clone(),
            reason,
        };
        let (bytes, manifest) = match (read_settled(&path), read_manifest(&path)) {
            (Ok(None), _) => return, // still being written
            (Ok(Some(bytes)), Ok(manifest)) => (bytes, manifest),
            (Err(e), _) => {
                // Vanished between listing and reading, most likely: the next sync unloads it.
                tracing::debug!(path = %path.display(), error = %e, "could not read plugin file");
                return;
            }
            (_, Err(e)) => {
                self.refuse(report, &name, fail(e));
                return;
            }
        };
        let fingerprint = Fingerprint {
            wasm: sha256(&bytes),
            manifest: manifest.as_deref().map(|m| sha256(m.as_bytes())),
        };
        if seen.get(&name) == Some(&fingerprint) {
            return;
        }
        seen.insert(name.clone(), fingerprint);
        let parsed = match manifest.as_deref().map(Manifest::parse).transpose() {
            Ok(m) => m.unwrap_or_default(),
            Err(e) => {
                let manifest_path = path.with_extension("toml");
                let e = e.context(format!("in {}", manifest_path.display()));
                self.refuse(report, &name, fail(e));
                return;
            }
        };
        match loader::build(&self.runtime, &path, name.clone(), &bytes, parsed) {
            Ok(mut plugin) => {
                let serving = self.registry.get(&name);
                if let Some(old) = &serving {
                    plugin.share_slots_with(old);
                }
                report.loaded.push((name.clone(), plugin.version.clone()));
                let policy = self.rollout.policy(&name);
                if let (RolloutPolicy::Canary(_), Some(data)) = (&policy, &self.data_dir)
                    && let Err(e) =
                        kept::keep(data, &name, &plugin.version, &bytes, manifest.as_deref())
                {
                    tracing::warn!(plugin = %name, error = %e, "could not keep this version for rollouts");
                }
                match (policy, serving) {
                    (RolloutPolicy::Canary(canary), Some(old)) if old.version != plugin.version => {
                        self.registry.start_canary(plugin, canary.percent);
                    }
                    _ => self.registry.insert(plugin),
                }
            }
            Err(e) => self.refuse(report, &name, e),
        }
    }

    /// A `.wasm` whose stem is not a plugin name (`a.b.wasm`, a 100-character name): reported
    /// once, under its file name, until it is renamed or removed.
    fn refuse_name(
        &self,
        seen: &mut BTreeMap<String, Fingerprint>,
        report: &mut SyncReport,
        path: PathBuf,
    ) -> String {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let marker = Fingerprint {
            wasm: [0; 32],
            manifest: None,
        };
        if seen.insert(file.clone(), marker).is_none() {
            let reason = anyhow::anyhow!(
                "the file name is not a valid plugin name (letters, digits, - and _, up to 64)"
            );
            self.refuse(report, &file, LoadError { path, reason });
        }
        file
    }

    fn refuse(&self, report: &mut SyncReport, name: &str, error: LoadError) {
        self.registry.set_error(name, format!("{:#}", error.reason));
        report.failed.push(error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::EngineSettings;

    fn plugin_dir(dir: &Path) -> PluginDir {
        let runtime = Runtime::new(EngineSettings {
            max_instances: 2,
            max_memory_mib: 16,
            send: Default::default(),
            idle_instances: 1,
        })
        .unwrap();
        PluginDir::new(runtime, dir, Arc::default())
    }

    #[test]
    fn bad_files_are_reported_once_and_forgotten_when_removed() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = plugin_dir(dir.path());
        std::fs::write(dir.path().join("a.b.wasm"), b"x").unwrap();
        std::fs::write(dir.path().join("junk.wasm"), b"\0asm junk").unwrap();
        let first = plugins.sync().unwrap();
        let mut reasons: Vec<String> = first
            .failed
            .iter()
            .map(|e| format!("{:#}", e.reason))
            .collect();
        reasons.sort();
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(reasons[0].contains("not a valid WebAssembly component"));
        assert!(reasons[1].contains("not a valid plugin name"));
        assert!(
            plugins.sync().unwrap().is_empty(),
            "the same bytes are not retried"
        );
        assert_eq!(plugins.registry().status().len(), 2);
        std::fs::remove_file(dir.path().join("a.b.wasm")).unwrap();
        std::fs::remove_file(dir.path().join("junk.wasm")).unwrap();
        assert!(plugins.sync().unwrap().is_empty());
        assert!(
            plugins.registry().status().is_empty(),
            "errors go with their files"
        );
    }
}
