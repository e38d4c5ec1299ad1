//! The host: backends chosen by configuration, plugins loaded, one poller per queue, and an
//! orderly shutdown.
//!
//! Shutdown is passed in as a token. When it fires, pollers stop receiving; in-flight handlers
//! get the grace period to finish; whatever is still running then is released (lease given
//! back, message made visible) so another worker can take it at once; ack batches are flushed.
//! The release and the flush each have a hard deadline ([`RELEASE_DEADLINE`]), so a call that
//! hangs (an SDK request, a guest blocked in a host call) cannot keep the process from ending:
//! what it held comes back when its visibility timeout lapses. A second token
//! ([`Host::abandon_on`]) skips the rest of the grace period and releases at once. Shutdown
//! reports what is true: deliveries still running after the release, and deletes handed to the
//! ack tasks but not confirmed, each counted on its own.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{Health, HostView, health};
use crate::config::{Config, SourceKind, StoreKind};
use crate::idempotency::IdempotencyStore;
use crate::idempotency::local::LocalStore;
use crate::idempotency::redis::RedisStore;
use crate::metrics::Metrics;
use crate::payload::Payloads;
use crate::pipeline::{AckTask, Acker, Completer, OutboxMarks, QueueCtx, Shared, run_poller};
use crate::progress::Progress;
use crate::runtime::engine::{EngineSettings, Runtime};
use crate::runtime::loader;
use crate::runtime::registry::Registry;
use crate::runtime::reload::PluginDir;
use crate::runtime::{status, watch};
use crate::source::local::{LocalQueue, Redrive};
use crate::source::sqs::SqsQueue;
use crate::source::{QueueSource, SourceError};
use crate::stats::Stats;
use crate::traces::Tracer;

/// How long releasing unfinished messages (after the grace period) and flushing the last acks
/// may take before the host stops waiting for them.
pub const RELEASE_DEADLINE: Duration = Duration::from_secs(10);
/// How often `run_until_idle` checks whether all work is done.
const IDLE_CHECK: Duration = Duration::from_millis(100);
/// Instances kept free beyond the in-flight cap, for checks, reloads and the idle instances of
/// plugins that reuse them.
const SPARE_INSTANCES: u32 = 16;

/// A configured host, ready to run.
pub struct Host {
    config: Arc<Config>,
    source: Arc<dyn QueueSource>,
    store: Arc<dyn IdempotencyStore>,
    registry: Arc<Registry>,
    plugins: Option<Arc<PluginDir>>,
    payloads: Arc<Payloads>,
    stats: Arc<Stats>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    abandon: CancellationToken,
    /// Starts each delivery's span, when traces are on.
    tracer: Option<Tracer>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The local queue's redrive policies, from the queue configuration.
fn redrives(config: &Config) -> HashMap<String, Redrive> {
    config
        .queues
        .iter()
        .filter_map(|q| {
            let max_receives = q.max_receives?;
            Some((
                q.name.clone(),
                Redrive {
                    dead_letter: q.dead_letter.clone(),
                    max_receives,
                },
            ))
        })
        .collect()
}

/// Opens the queue backend the configuration names. For SQS, every consumed queue and its
/// dead-letter queue must exist: a missing one (or an unreachable endpoint) is one clear error
/// here, not a stream of failures later.
pub async fn open_source(config: &Config) -> anyhow::Result<Arc<dyn QueueSource>> {
    open_source_checking(config, None).await
}

/// Opens the queue backend for a one-off command that uses only `queues`: for SQS those must
/// exist, and the configured consumed queues need not (sending to one queue works on a
/// configuration whose other queues are not created yet).
pub async fn open_source_for(
    config: &Config,
    queues: &[&str],
) -> anyhow::Result<Arc<dyn QueueSource>> {
    open_source_checking(config, Some(queues)).await
}

async fn open_source_checking(
    config: &Config,
    only: Option<&[&str]>,
) -> anyhow::Result<Arc<dyn QueueSource>> {
    match &config.source {
        SourceKind::Local => {
            let path = config.data_dir.as_ref().map(|d| d.join("qhost.db"));
            Ok(Arc::new(LocalQueue::open(
                path.as_deref(),
                redrives(config),
            )?))
        }
        SourceKind::Sqs(settings) => {
            settings.check().await?;
            let sqs = SqsQueue::connect(settings).await;
            for q in &config.queues {
                if let Some(url) = &q.url {
                    sqs.set_url(&q.name, url);
                }
            }
            match only {
                None => check_queues(&sqs, config).await?,
                Some(names) => {
                    for name in names {
                        check_queue(&sqs, name).await?;
                    }
                }
            }
            Ok(Arc::new(sqs))
        }
    }
}

async fn check_queue(sqs: &SqsQueue, name: &str) -> anyhow::Result<()> {
    sqs.url(name).await.map(drop).map_err(|e| match e {
        SourceError::UnknownQueue(_) => anyhow::anyhow!("SQS queue `{name}` does not exist"),
        other => anyhow::anyhow!("cannot reach SQS to resolve queue `{name}`: {other:#}"),
    })
}

async fn check_queues(sqs: &SqsQueue, config: &Config) -> anyhow::Result<()> {
    for (i, q) in config.queues.iter().enumerate() {
        for (field, name) in [("name", &q.name), ("dead-letter", &q.dead_letter)] {
            sqs.url(name).await.map_err(|e| match e {
                SourceError::UnknownQueue(_) => {
                    anyhow::anyhow!("queue[{i}].{field}: SQS queue `{name}` does not exist")
                }
                other => anyhow::anyhow!("cannot reach SQS to resolve queue `{name}`: {other:#}"),
            })?;
        }
    }
    Ok(())
}

/// Opens the idempotency backend the configuration names.
pub(crate) async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn IdempotencyStore>> {
    match &config.store {
        StoreKind::Local => {
            let path = config.data_dir.as_ref().map(|d| d.join("qhost.db"));
            Ok(Arc::new(LocalStore::open(path.as_deref())?))
        }
        StoreKind::Redis(target) => Ok(Arc::new(RedisStore::connect_to(target).await?)),
    }
}

/// The engine sized for this configuration, with its compiled-code cache.
pub fn runtime_for(config: &Config) -> anyhow::Result<Runtime> {
    let runtime = Runtime::new(EngineSettings {
        max_instances: config.max_in_flight as u32 + SPARE_INSTANCES,
        max_memory_mib: config.max_plugin_memory_mib,
        send: config.payload.send_shape(),
        idle_instances: SPARE_INSTANCES / 2,
    })?
    .with_secrets(config.secrets.clone());
    let runtime = match &config.http_ca_file {
        Some(ca_file) => runtime.with_http_ca(ca_file)?,
        None => runtime,
    };
    match &config.compiled_cache {
        Some(dir) => runtime.with_cache(dir),
        None => Ok(runtime),
    }
}

/// Loads the plugins directory into a new registry, logging each file that does not load, and
/// checks that every queue routes to a plugin that at least has a file there.
pub(crate) async fn open_plugins(config: &Config) -> anyhow::Result<Arc<PluginDir>> {
    let plugins = open_plugins_unchecked(config).await?;
    check_routes(config, &config.plugins_dir)?;
    check_loaded(config, plugins.registry())?;
    check_deadlines(config, plugins.registry())?;
    Ok(plugins)
}

/// A queue whose plugin (or one of its routes) did not load would take none of its messages:
/// refused at start with the load error, unless the configuration allows it (the queue then
/// waits, unconsumed, until the plugin loads).
fn check_loaded(config: &Config, registry: &Registry) -> anyhow::Result<()> {
    if config.allow_unloaded_plugins {
        return Ok(());
    }
    for (i, q) in config.queues.iter().enumerate() {
        for name in q.plugins() {
            if registry.get(name).is_some() {
                continue;
            }
            let file = config.plugins_dir.join(format!("{name}.wasm"));
            bail!(
                "queue[{i}]: queue `{}` routes to plugin `{name}`, which did not load: {}\n\
                 check it with `qhost plugins check {}`; to start anyway, with this queue \
                 waiting unconsumed until the plugin loads, set allow-unloaded-plugins = true \
                 (or `qhost run --allow-unloaded-plugins`)",
                q.name,
                registry.why_not_serving(name),
                file.display()
            );
        }
    }
    Ok(())
}

/// Loads the plugins directory into a new registry, without checking the queues' routes.
pub async fn open_plugins_unchecked(config: &Config) -> anyhow::Result<Arc<PluginDir>> {
    let dir = config.plugins_dir.clone();
    if !dir.is_dir() {
        let shown = std::path::absolute(&dir).unwrap_or(dir);
        bail!(
            "plugins directory {} does not exist: create it and put NAME.wasm files there, or \
             name another with plugins-dir (--plugins-dir)",
            shown.display()
        );
    }
    let runtime = runtime_for(config)?;
    let plugins = Arc::new(PluginDir::new(runtime, &dir, Arc::default()));
    let report = {
        let plugins = Arc::clone(&plugins);
        tokio::task::spawn_blocking(move || plugins.sync()).await??
    };
    report.log(plugins.registry());
    let counters = plugins.runtime().counters();
    tracing::info!(
        compiled = counters.compiled(),
        from_cache = counters.cache_hits(),
        "plugins ready"
    );
    Ok(plugins)
}

/// Without a heartbeat nothing extends a message's visibility while its handler runs, so a
/// plugin that may run longer than that would have its message delivered again mid-run:
/// refused at start.
fn check_deadlines(config: &Config, registry: &Registry) -> anyhow::Result<()> {
    for (i, q) in config
        .queues
        .iter()
        .enumerate()
        .filter(|(_, q)| !q.heartbeat)
    {
        for name in q.plugins() {
            let Some(plugin) = registry.get(name) else {
                continue;
            };
            let timeout = plugin.manifest.timeout();
            if timeout > q.visibility {
                bail!(
                    "queue[{i}].heartbeat is false and `{}` hides a message for {:?}, but plugin `{name}` may run for {timeout:?} (limits.timeout-ms): its messages would be delivered again while they run",
                    q.name,
                    q.visibility
                );
            }
        }
    }
    Ok(())
}

/// A queue naming a plugin with no file is a configuration mistake, refused at start.
fn check_routes(config: &Config, dir: &Path) -> anyhow::Result<()> {
    for (i, q) in config.queues.iter().enumerate() {
        if !dir.join(format!("{}.wasm", q.plugin)).is_file() {
            let found: Vec<String> = loader::plugin_files(dir)?
                .iter()
                .filter_map(|p| loader::plugin_name(p))
                .collect();
            bail!(
                "queue[{i}].plugin: queue `{}` routes to plugin `{}`, but there is no {}.wasm in {} (found: {})",
                q.name,
                q.plugin,
                q.plugin,
                dir.display(),
                if found.is_empty() {
                    "none".to_string()
                } else {
                    found.join(", ")
                }
            );
        }
    }
    Ok(())
}

impl Host {
    /// A host with the backends and plugins the configuration names.
    pub async fn from_config(config: Config) -> anyhow::Result<Self> {
        let plugins = open_plugins(&config).await?;
        let source = open_source(&config)
            .await
            .context("opening the queue backend")?;
        Self::with_plugins(config, source, plugins).await
    }

    /// A host with the plugins and idempotency store the configuration names, consuming from a
    /// queue backend the caller built (an SQS client with its own credentials, say).
    pub async fn with_source(config: Config, source: Arc<dyn QueueSource>) -> anyhow::Result<Self> {
        let plugins = open_plugins(&config).await?;
        Self::with_plugins(config, source, plugins).await
    }

    async fn with_plugins(
        config: Config,
        source: Arc<dyn QueueSource>,
        plugins: Arc<PluginDir>,
    ) -> anyhow::Result<Self> {
        let store = open_store(&config)
            .await
            .context("opening the idempotency store")?;
        let payloads = Payloads::open(&config)
            .await
            .context("opening the payload stores")?;
        let mut host = Host::assemble(config, source, store, Arc::clone(plugins.registry()));
        host.plugins = Some(plugins);
        Ok(host.with_payloads(payloads))
    }

    /// A host from parts (for embedding, tests and benchmarks). Its plugins are the ones given;
    /// no directory is watched.
    pub fn new(
        config: Config,
        source: Arc<dyn QueueSource>,
        store: Arc<dyn IdempotencyStore>,
        registry: Registry,
    ) -> Self {
        Host::assemble(config, source, store, Arc::new(registry))
    }

    fn assemble(
        config: Config,
        source: Arc<dyn QueueSource>,
        store: Arc<dyn IdempotencyStore>,
        registry: Arc<Registry>,
    ) -> Self {
        let stats = Arc::new(Stats::default());
        let metrics = Metrics::new(&config, Arc::clone(&stats), Arc::clone(&registry));
        Host {
            config: Arc::new(config),
            source,
            store,
            registry,
            plugins: None,
            payloads: Arc::new(Payloads::disabled()),
            stats,
            metrics: Arc::new(metrics),
            health: Arc::default(),
            abandon: CancellationToken::new(),
            tracer: None,
        }
    }

    /// Ends the grace period early when `abandon` fires (a second signal, say): unfinished
    /// messages are released at once.
    pub fn abandon_on(mut self, abandon: CancellationToken) -> Self {
        self.abandon = abandon;
        self
    }

    /// Traces each delivery with `tracer` (see [`crate::traces`]).
    pub fn traced_by(mut self, tracer: Tracer) -> Self {
        self.tracer = Some(tracer);
        self
    }

    /// Uses these payload stores (a host from parts has none).
    pub fn with_payloads(mut self, mut payloads: Payloads) -> Self {
        payloads.count_into(Arc::clone(&self.stats));
        self.payloads = Arc::new(payloads);
        self
    }

    /// The payload stores.
    pub fn payloads(&self) -> Arc<Payloads> {
        Arc::clone(&self.payloads)
    }

    /// The plugins directory this host loads from, if it was built from a configuration.
    pub fn plugin_dir(&self) -> Option<&Arc<PluginDir>> {
        self.plugins.as_ref()
    }

    /// The counters.
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// The metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// What the admin listener serves for this host.
    pub fn admin_view(&self) -> HostView {
        HostView {
            metrics: Arc::clone(&self.metrics),
            health: Arc::clone(&self.health),
            config: Arc::clone(&self.config),
            plugins: Arc::clone(&self.registry),
        }
    }

    /// The queue backend.
    pub fn source(&self) -> Arc<dyn QueueSource> {
        Arc::clone(&self.source)
    }

    /// The idempotency backend.
    pub fn store(&self) -> Arc<dyn IdempotencyStore> {
        Arc::clone(&self.store)
    }

    /// The loaded plugins.
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// Runs until `shutdown` is cancelled, then drains. Meanwhile the queues and the store are
    /// checked for readiness, which ends with `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let watcher = self.watch_plugins()?;
        let checks = self.watch_health(&shutdown);
        let result = self.consume(shutdown).await;
        checks.cancel();
        if let Some(stop) = watcher {
            stop.cancel();
        }
        if let Some(file) = self.status_file() {
            status::remove_own(&file);
        }
        result
    }

    /// Starts the readiness checks, and marks the host draining once `shutdown` fires.
    fn watch_health(&self, shutdown: &CancellationToken) -> CancellationToken {
        let stop = CancellationToken::new();
        let parts = health::Checked {
            config: Arc::clone(&self.config),
            source: Arc::clone(&self.source),
            store: Arc::clone(&self.store),
            metrics: Arc::clone(&self.metrics),
            stats: Arc::clone(&self.stats),
        };
        tokio::spawn(health::watch(Arc::clone(&self.health), parts, stop.clone()));
        let (health, shutdown, ended) = (Arc::clone(&self.health), shutdown.clone(), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => health.set_draining(),
                _ = ended.cancelled() => {}
            }
        });
        stop
    }

    /// The file where this host reports its plugins, if it has a data directory.
    fn status_file(&self) -> Option<std::path::PathBuf> {
        self.plugins.as_ref()?;
        self.config.data_dir.as_deref().map(status::path)
    }

    /// Publishes the plugin status and, if configured, starts watching the plugins directory.
    fn watch_plugins(&self) -> anyhow::Result<Option<CancellationToken>> {
        let Some(plugins) = &self.plugins else {
            return Ok(None);
        };
        let file = self.status_file();
        let publish = move |registry: &Registry| {
            if let Some(file) = &file
                && let Err(e) = status::write(file, registry)
            {
                tracing::warn!(error = %format!("{e:#}"), "could not publish plugin status");
            }
        };
        publish(&self.registry);
        if !self.config.watch_plugins {
            return Ok(None);
        }
        let stop = CancellationToken::new();
        let registry = Arc::clone(&self.registry);
        watch::spawn(Arc::clone(plugins), stop.clone(), move |_| {
            publish(&registry)
        })?;
        Ok(Some(stop))
    }

    async fn consume(&self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let shared = Arc::new(self.shared());
        let mut ackers = Vec::new();
        let pollers = TaskTracker::new();
        for q in &self.config.queues {
            let progress = Arc::new(Progress::new());
            self.health.track(&q.name, Arc::clone(&progress));
            let (acker, task) = Acker::spawn(
                Arc::clone(&self.source),
                q.name.clone(),
                Arc::clone(&self.stats),
                progress,
            );
            ackers.push((q.name.clone(), task));
            let ctx = Arc::new(QueueCtx {
                shared: Arc::clone(&shared),
                config: q.clone(),
                acker,
            });
            tracing::info!(queue = %q.name, plugin = %q.plugin, pollers = q.pollers, "consuming");
            for _ in 0..q.pollers {
                pollers.spawn(run_poller(Arc::clone(&ctx), shutdown.clone()));
            }
        }
        pollers.close();
        pollers.wait().await;
        self.drain(&shared).await;
        flush_acks(ackers).await;
        Ok(())
    }

    /// Runs until every consumed queue is empty and nothing is in flight (or `shutdown`).
    pub async fn run_until_idle(&self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let idle = shutdown.child_token();
        let watcher = tokio::spawn(watch_idle(
            self.source(),
            self.config.clone(),
            Arc::clone(&self.registry),
            idle.clone(),
        ));
        let result = self.run(idle.clone()).await;
        idle.cancel();
        watcher.await.context("idle watcher failed")?;
        result
    }

    fn shared(&self) -> Shared {
        Shared {
            config: Arc::clone(&self.config),
            source: Arc::clone(&self.source),
            store: Arc::clone(&self.store),
            registry: Arc::clone(&self.registry),
            stats: Arc::clone(&self.stats),
            metrics: Arc::clone(&self.metrics),
            in_flight: Arc::new(Semaphore::new(self.config.max_in_flight)),
            tasks: TaskTracker::new(),
            abandon: self.abandon.child_token(),
            completer: Completer::spawn(Arc::clone(&self.store)),
            payloads: Arc::clone(&self.payloads),
            tracer: self.tracer.clone(),
            outbox_marks: OutboxMarks::default(),
        }
    }

    /// Waits for in-flight messages for the grace period (or until abandoned), then releases
    /// the rest, waiting for that no longer than [`RELEASE_DEADLINE`].
    async fn drain(&self, shared: &Shared) {
        shared.tasks.close();
        let finished = tokio::select! {
            r = tokio::time::timeout(self.config.shutdown_grace, shared.tasks.wait()) => r.is_ok(),
            _ = shared.abandon.cancelled() => false,
        };
        if finished {
            return;
        }
        tracing::warn!(grace = ?self.config.shutdown_grace, running = shared.tasks.len(), "releasing unfinished messages");
        shared.abandon.cancel();
        if tokio::time::timeout(RELEASE_DEADLINE, shared.tasks.wait())
            .await
            .is_err()
        {
            tracing::error!(stuck = shared.tasks.len(), deadline = ?RELEASE_DEADLINE, "deliveries still waiting on a backend call after the release deadline; their messages come back when their visibility timeout lapses");
        }
    }
}

/// Closes every queue's ack task, together, and reports the deletes none could confirm.
async fn flush_acks(ackers: Vec<(String, AckTask)>) {
    let closing = ackers.into_iter().map(|(queue, task)| async move {
        if let Err(unconfirmed) = task.close(RELEASE_DEADLINE).await {
            tracing::error!(%queue, unconfirmed, deadline = ?RELEASE_DEADLINE, "deletes not confirmed at shutdown; those messages will be delivered again and found completed");
        }
    });
    futures_util::future::join_all(closing).await;
}

/// Cancels `idle` once all consumed queues hold no messages, visible or not. A queue whose
/// plugin is not loaded is not consumed, so it is not waited for (its messages stay).
async fn watch_idle(
    source: Arc<dyn QueueSource>,
    config: Arc<Config>,
    registry: Arc<Registry>,
    idle: CancellationToken,
) {
    while !idle.is_cancelled() {
        tokio::select! {
            _ = idle.cancelled() => return,
            _ = tokio::time::sleep(IDLE_CHECK) => {}
        }
        let mut empty = true;
        for q in (config.queues.iter()).filter(|q| registry.get(&q.plugin).is_some()) {
            match source.depth(&q.name).await {
                Ok(d) if d.total() == 0 => {}
                Ok(_) => empty = false,
                Err(e) => {
                    tracing::warn!(queue = %q.name, error = %e, "could not read queue depth");
                    empty = false;
                }
            }
        }
        if empty {
            idle.cancel();
        }
    }
}
