//! `qhost test --watch`: waits until a test file, a plugin file or its manifest changes (a
//! rebuild that replaces the `.wasm`, an edited case), so the run can start again. The folders
//! holding them are watched, not the files, because a build or an editor often replaces a file
//! (write elsewhere, rename over) rather than writing into it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context as _;
use notify_debouncer_full::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

/// How long a burst of changes (a build writing a file in pieces) settles before a rerun.
const SETTLE: Duration = Duration::from_millis(300);

/// A watch on a test run's files, armed from the moment it is started: a change made after
/// [`Watch::start`] returns is seen by [`Watch::next`].
pub struct Watch {
    watched: BTreeSet<PathBuf>,
    changes: mpsc::Receiver<Vec<PathBuf>>,
    _debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("watched", &self.watched)
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// Watches `paths`: files, or folders whose test, plugin and manifest files count.
    pub fn start(paths: &[PathBuf]) -> anyhow::Result<Watch> {
        let watched: BTreeSet<PathBuf> = paths.iter().map(|p| absolute(p)).collect();
        let (tx, changes) = mpsc::channel::<Vec<PathBuf>>();
        let mut debouncer = new_debouncer(SETTLE, None, move |result: DebounceEventResult| {
            if let Ok(events) = result {
                let changed = events.into_iter().flat_map(|e| e.event.paths).collect();
                let _ = tx.send(changed);
            }
        })
        .context("starting the file watcher")?;
        let folders: BTreeSet<PathBuf> = (watched.iter())
            .map(|p| if p.is_dir() { p.clone() } else { parent(p) })
            .collect();
        for folder in &folders {
            debouncer
                .watch(folder, RecursiveMode::NonRecursive)
                .with_context(|| format!("watching {}", folder.display()))?;
        }
        Ok(Watch {
            watched,
            changes,
            _debouncer: debouncer,
        })
    }

    /// Blocks until a watched file changes; returns what changed, each once.
    pub fn next(&self) -> anyhow::Result<Vec<PathBuf>> {
        loop {
            let changed = self.changes.recv().context("the file watcher stopped")?;
            let mut relevant: Vec<PathBuf> = (changed.into_iter())
                .filter(|p| counts(p, &self.watched))
                .collect();
            relevant.sort();
            relevant.dedup();
            if !relevant.is_empty() {
                return Ok(relevant);
            }
        }
    }
}

/// Whether a change to `path` counts: one of the files, or a test, plugin or manifest file in
/// one of the folders.
fn counts(path: &Path, watched: &BTreeSet<PathBuf>) -> bool {
    if watched.contains(path) {
        return true;
    }
    let kind = path.extension().and_then(|e| e.to_str());
    matches!(kind, Some("wasm" | "toml")) && watched.contains(&parent(path))
}

fn parent(path: &Path) -> PathBuf {
    path.parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
