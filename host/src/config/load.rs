//! A configuration as the `qhost` command reads it: a file (or the built-in defaults), with the
//! command line's overrides applied to the file form before anything is checked, so a flag and
//! the file field it overrides go through the same checks and say the same things when wrong.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::Config;
use super::file::{RawAdmin, RawConfig};

/// What a command line sets over the file. `None` leaves the file's value (or its default).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--plugins-dir`.
    pub plugins_dir: Option<PathBuf>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--admin-listen`: `HOST:PORT`, or `""` for no listener.
    pub admin_listen: Option<String>,
    /// `--allow-unloaded-plugins`: `true` turns it on whatever the file says.
    pub allow_unloaded_plugins: bool,
}

impl Overrides {
    fn apply(self, raw: &mut RawConfig) {
        if let Some(dir) = self.plugins_dir {
            raw.plugins_dir = Some(dir);
        }
        if let Some(dir) = self.data_dir {
            raw.data_dir = Some(dir);
        }
        if let Some(listen) = self.admin_listen {
            raw.admin.get_or_insert_with(RawAdmin::default).listen = Some(listen);
        }
        if self.allow_unloaded_plugins {
            raw.allow_unloaded_plugins = Some(true);
        }
    }
}

impl Config {
    /// Reads `file` (its relative paths taken from its own directory), or starts from the
    /// defaults when there is none, applies `overrides`, and checks the result. Errors name
    /// the file.
    pub fn load(file: Option<&Path>, overrides: Overrides) -> anyhow::Result<Self> {
        let mut raw = match file {
            Some(path) => read(path)?,
            None => RawConfig::default(),
        };
        overrides.apply(&mut raw);
        let context = file.map_or_else(
            || "in the configuration".to_string(),
            |p| format!("in config file {}", p.display()),
        );
        Config::from_raw(raw).context(context)
    }
}

fn read(path: &Path) -> anyhow::Result<RawConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    let mut raw =
        super::parse_raw(&text).with_context(|| format!("in config file {}", path.display()))?;
    let dir = std::path::absolute(path)?.parent().map(PathBuf::from);
    raw.relative_to(&dir.unwrap_or_default());
    Ok(raw)
}
