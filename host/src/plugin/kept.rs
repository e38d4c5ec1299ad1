//! The versions a host has served, kept under `DATA_DIR/versions/NAME/VERSION.wasm` (with the
//! manifest they were loaded with), so a rollout can fall back on a version whose file the
//! plugins directory no longer holds: a host restarted while a canary runs takes the serving
//! version from here and joins the rollout, and one restarted after a rollback serves the
//! previous version, not the rolled-back file. The newest [`KEEP`] versions of each plugin are
//! kept.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::Plugin;
use super::loader::{self, LoadError};
use super::manifest::Manifest;
use crate::runtime::Runtime;

/// Versions kept per plugin.
const KEEP: usize = 4;

/// Where `name`'s kept versions are.
fn dir_of(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("versions").join(name)
}

/// Keeps `wasm` (and `manifest`, if any) as `name`'s `version`, pruning the oldest.
pub(crate) fn keep(
    data_dir: &Path,
    name: &str,
    version: &str,
    wasm: &[u8],
    manifest: Option<&str>,
) -> std::io::Result<()> {
    let dir = dir_of(data_dir, name);
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("{version}.wasm"));
    if !file.exists() {
        let tmp = dir.join(format!(".{version}.tmp"));
        std::fs::write(&tmp, wasm)?;
        std::fs::rename(&tmp, &file)?;
    }
    let toml = file.with_extension("toml");
    match manifest {
        Some(text) => std::fs::write(&toml, text)?,
        None if toml.exists() => std::fs::remove_file(&toml)?,
        None => {}
    }
    prune(&dir)
}

/// Removes all but the newest [`KEEP`] versions in `dir`.
fn prune(dir: &Path) -> std::io::Result<()> {
    let mut kept: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    kept.sort();
    let old = kept.len().saturating_sub(KEEP);
    for (_, path) in kept.into_iter().take(old) {
        std::fs::remove_file(&path)?;
        let _ = std::fs::remove_file(path.with_extension("toml"));
    }
    Ok(())
}

/// Loads `name`'s kept `version` (blocking: may compile).
pub(crate) fn load(
    runtime: &Runtime,
    data_dir: &Path,
    name: &str,
    version: &str,
) -> Result<Plugin, LoadError> {
    let path = dir_of(data_dir, name).join(format!("{version}.wasm"));
    let fail = |reason: anyhow::Error| LoadError {
        path: path.clone(),
        reason,
    };
    let bytes = std::fs::read(&path)
        .context("this host never served that version")
        .map_err(fail)?;
    let manifest = match std::fs::read_to_string(path.with_extension("toml")) {
        Ok(text) => Manifest::parse(&text).map_err(fail)?,
        Err(_) => Manifest::default(),
    };
    loader::build(runtime, &path, name.to_string(), &bytes, manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_versions_are_kept_with_their_manifests() {
        let data = tempfile::tempdir().unwrap();
        for v in 0..6 {
            let manifest = (v % 2 == 0).then_some("[limits]\ntimeout-ms = 100\n");
            keep(data.path(), "mail", &format!("v{v}"), b"bytes", manifest).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(15));
        }
        let dir = dir_of(data.path(), "mail");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "v2.toml", "v2.wasm", "v3.wasm", "v4.toml", "v4.wasm", "v5.wasm"
            ]
        );
    }
}
