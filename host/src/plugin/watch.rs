//! Hot reload: watch the plugins directory and sync the registry when it changes.
//!
//! File events are only a trigger. A debouncer waits until the directory has been quiet for
//! [`DEBOUNCE`] (a copy in progress produces a stream of events), then one [`PluginDir::sync`]
//! runs on the blocking pool and compares content. A sync also runs every `RESCAN`, so an
//! event lost by the kernel (an inotify queue overflow, a network filesystem) delays a reload
//! instead of missing it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use notify_debouncer_full::notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::reload::{PluginDir, SyncReport};

/// Quiet time after the last event before the directory is synced.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(200);
/// Sync this often even without events.
pub(crate) const RESCAN: Duration = Duration::from_secs(30);

/// Watches `plugins` until `stop` is cancelled, calling `on_sync` after each sync that changed
/// something. Fails only if the directory cannot be watched at all.
pub(crate) fn spawn(
    plugins: Arc<PluginDir>,
    stop: CancellationToken,
    on_sync: impl Fn(&SyncReport) + Send + Sync + 'static,
) -> anyhow::Result<JoinHandle<()>> {
    // Capacity one: a signal already pending covers any number of further events.
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut debouncer =
        new_debouncer(
            DEBOUNCE,
            None,
            move |result: DebounceEventResult| match result {
                Ok(events) if events.is_empty() => {}
                Ok(_) => {
                    let _ = tx.try_send(());
                }
                Err(errors) => {
                    for e in errors {
                        tracing::warn!(error = %e, "plugin directory watch error; rescanning");
                    }
                    let _ = tx.try_send(());
                }
            },
        )
        .context("starting the plugin directory watcher")?;
    debouncer
        .watch(plugins.dir(), RecursiveMode::NonRecursive)
        .with_context(|| format!("watching {}", plugins.dir().display()))?;
    tracing::info!(dir = %plugins.dir().display(), "watching for plugin changes");
    Ok(tokio::spawn(async move {
        // The first tick is immediate: it catches what changed between the host's initial load
        // and the watch starting.
        let mut rescan = tokio::time::interval(RESCAN);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                Some(()) = rx.recv() => {}
                _ = rescan.tick() => {}
            }
            sync(&plugins, &on_sync).await;
        }
        debouncer.stop_nonblocking();
    }))
}

async fn sync(plugins: &Arc<PluginDir>, on_sync: &impl Fn(&SyncReport)) {
    let dir = Arc::clone(plugins);
    match tokio::task::spawn_blocking(move || dir.sync()).await {
        // At debug, for whoever must know that what the directory held has been read (a
        // deploy that must not start while the start-up sync is reading).
        Ok(Ok(report)) if report.is_empty() => tracing::debug!("plugins directory synced"),
        Ok(Ok(report)) => {
            report.log(plugins.registry());
            on_sync(&report);
            tracing::debug!("plugins directory synced");
        }
        Ok(Err(e)) => tracing::error!(error = %format!("{e:#}"), "could not sync plugins"),
        Err(e) => tracing::error!(error = %e, "plugin sync panicked"),
    }
}
