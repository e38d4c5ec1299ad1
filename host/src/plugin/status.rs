//! What a running host is serving, written where `qhost plugins list` can read it.
//!
//! After every change to its plugins a running host rewrites `DATA_DIR/plugins.json`
//! (atomically: temporary file, then rename) with each plugin's serving version, limits and
//! last load error, and its own process id. `qhost plugins list` shows that file while the
//! process that wrote it is alive, because only the running host knows that a bad drop is being
//! refused while the previous version keeps serving.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::manifest::Limits;
use super::registry::Registry;

/// The file name in the data directory.
pub(crate) const FILE_NAME: &str = "plugins.json";

/// The status of every plugin of one host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPlugins {
    /// The writing process.
    pub pid: u32,
    /// When it wrote this, in milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
    /// By name.
    pub plugins: Vec<PluginRow>,
}

/// One plugin's line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRow {
    /// Name.
    pub name: String,
    /// Serving version, if any.
    pub version: Option<String>,
    /// The serving version's limits.
    pub limits: Option<Limits>,
    /// The origins the serving version may call over HTTP (its `[capabilities] http`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<String>,
    /// Why the latest file did not load, if it did not.
    pub last_error: Option<String>,
    /// Its rollout as this host last read it, when it has had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::record::RolloutRecord>,
}

impl HostPlugins {
    /// The registry as it stands, from this process.
    pub fn of(registry: &Registry) -> Self {
        let mut rollouts = registry.canaries.seen();
        let plugins = registry
            .status()
            .into_iter()
            .map(|s| PluginRow {
                version: s.serving.as_ref().map(|p| p.version.clone()),
                limits: s.serving.as_ref().map(|p| p.manifest.limits.clone()),
                http: (s.serving.as_ref())
                    .map(|p| p.manifest.capabilities.http.clone())
                    .unwrap_or_default(),
                rollout: rollouts.remove(&s.name),
                name: s.name,
                last_error: s.last_error,
            })
            .collect();
        HostPlugins {
            pid: std::process::id(),
            updated_at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            plugins,
        }
    }
}

impl HostPlugins {
    /// What the host running on `data_dir` serves, if one runs there.
    pub fn read_live(data_dir: &Path) -> Option<HostPlugins> {
        read_live(&path(data_dir))
    }
}

/// The status file in `data_dir`.
pub(crate) fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE_NAME)
}

/// Writes the registry's status to `file` atomically, unless another live host owns the file
/// (two hosts on one data directory: the first one publishes, the second leaves it alone).
pub(crate) fn write(file: &Path, registry: &Registry) -> anyhow::Result<()> {
    if owned_by_another(file) {
        return Ok(());
    }
    let json = serde_json::to_vec_pretty(&HostPlugins::of(registry))?;
    let tmp = file.with_extension(format!("json.{}.tmp", std::process::id()));
    // The data directory exists once an embedded queue or store opened it; a host whose
    // queue and store are both remote makes it here.
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
    dir.map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&tmp, json))
        .and_then(|()| std::fs::rename(&tmp, file))
        .with_context(|| format!("writing {}", file.display()))
}

/// Removes `file` if this process wrote it: a host that stops never removes another's.
pub(crate) fn remove_own(file: &Path) {
    let ours = std::fs::read(file)
        .ok()
        .and_then(|text| serde_json::from_slice::<HostPlugins>(&text).ok())
        .is_some_and(|status| status.pid == std::process::id());
    if ours {
        let _ = std::fs::remove_file(file);
    }
}

/// Whether another process that still runs wrote `file`.
fn owned_by_another(file: &Path) -> bool {
    read_live(file).is_some_and(|status| status.pid != std::process::id())
}

/// The status a live host wrote to `file`, if there is one and its writer still runs.
pub(crate) fn read_live(file: &Path) -> Option<HostPlugins> {
    let text = std::fs::read(file).ok()?;
    let status: HostPlugins = serde_json::from_slice(&text).ok()?;
    Path::new(&format!("/proc/{}", status.pid))
        .exists()
        .then_some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_status_reads_back_while_its_writer_lives() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new([]);
        registry.set_error("broken", "it is not a valid WebAssembly component".into());
        let file = path(dir.path());
        write(&file, &registry).unwrap();
        let status = read_live(&file).expect("this process is alive");
        assert_eq!(status.pid, std::process::id());
        assert_eq!(status.plugins.len(), 1);
        assert_eq!(status.plugins[0].version, None);
        assert!(status.plugins[0].last_error.is_some());
    }

    #[test]
    fn a_second_host_on_the_data_directory_neither_overwrites_nor_removes_the_first_ones_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path());
        // Written by another live process (pid 1 always runs).
        let mut first = HostPlugins::of(&Registry::new([]));
        first.pid = 1;
        std::fs::write(&file, serde_json::to_vec(&first).unwrap()).unwrap();
        let registry = Registry::new([]);
        registry.set_error("mine", "this host's own".into());
        write(&file, &registry).unwrap();
        assert_eq!(read_live(&file).expect("still the first's").pid, 1);
        remove_own(&file);
        assert!(file.exists(), "not this process's to remove");
        std::fs::remove_file(&file).unwrap();
        write(&file, &registry).unwrap();
        remove_own(&file);
        assert!(!file.exists(), "its own file is removed");
    }

    #[test]
    fn a_row_shows_what_the_serving_version_may_call_and_its_rate() {
        let manifest = crate::plugin::manifest::Manifest::parse(
            "[capabilities]\nhttp = [\"https://api.example.com\"]\n[limits]\nrate = \"50/s\"\n",
        )
        .unwrap();
        let ack = |_msg| {
            Ok(crate::handler::Invocation::new(
                crate::handler::Outcome::Ack,
            ))
        };
        let plugin = crate::plugin::Plugin::new("mailer", "v1", manifest, std::sync::Arc::new(ack));
        let status = HostPlugins::of(&Registry::new([plugin]));
        let row = &status.plugins[0];
        assert_eq!(row.http, ["https://api.example.com"]);
        let limits = row.limits.as_ref().expect("limits");
        assert_eq!(limits.rate.map(|r| r.to_string()), Some("50/s".into()));
        // And through the file a running host writes.
        let text = serde_json::to_string(&status).unwrap();
        let back: HostPlugins = serde_json::from_str(&text).unwrap();
        assert_eq!(back.plugins[0], *row);
    }
}
