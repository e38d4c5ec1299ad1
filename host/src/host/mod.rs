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
//!
//! `open` opens the backends and makes the start-up checks; `lifecycle` runs and drains;
//! `lanes` runs the data path on a thread per lane; `idle` decides when a run until idle ends.

mod idle;
mod lanes;
mod lifecycle;
pub(crate) mod open;

pub(crate) use open::{open_payloads, open_plugins, open_source, open_store, runtime_for};

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::admin::{Health, HostView};
use crate::config::Config;
use crate::fleet::Fleet;
use crate::flow::FairShares;
use crate::idempotency::Store;
use crate::metrics::Metrics;
use crate::payload::Payloads;
use crate::plugin::registry::Registry;
use crate::plugin::reload::PluginDir;
use crate::recent::RecentDeadLetters;
use crate::schedule::Board;
use crate::source::QueueSource;
use crate::stats::Stats;
use crate::traces::Tracer;

/// How long releasing unfinished messages (after the grace period) and flushing the last acks
/// may take before the host stops waiting for them.
pub(crate) const RELEASE_DEADLINE: Duration = Duration::from_secs(10);
/// How often `run_until_idle` checks whether all work is done.
const IDLE_CHECK: Duration = Duration::from_millis(100);
/// Instances kept free beyond the in-flight cap, for checks, reloads and the idle instances of
/// plugins that reuse them.
const SPARE_INSTANCES: u32 = 16;

/// A configured host, ready to run.
pub struct Host {
    config: Arc<Config>,
    source: Arc<dyn QueueSource>,
    store: Arc<dyn Store>,
    registry: Arc<Registry>,
    plugins: Option<Arc<PluginDir>>,
    payloads: Arc<Payloads>,
    stats: Arc<Stats>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    /// The dead letters it sent lately, for the console.
    recent: Arc<RecentDeadLetters>,
    /// Its schedules as its scheduler last read them, for the console.
    schedules: Arc<Board>,
    /// The fleet as its follower last read it: the roster, the queues paused fleet-wide.
    fleet: Arc<Fleet>,
    /// Its flow keys' runs and put-backs, for fair shares and the console.
    fair: Arc<FairShares>,
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

impl Host {
    /// A host with the backends and plugins the configuration names.
    pub async fn from_config(config: Config) -> anyhow::Result<Self> {
        let plugins = open_plugins(&config).await?;
        let source: Arc<dyn QueueSource> = open_source(&config, None)
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
        let payloads = open_payloads(&config)
            .await
            .context("opening the payload stores")?;
        (plugins.runtime()).bind_state(store.clone(), &config.namespace);
        let mut host = Host::assemble(config, source, store, Arc::clone(plugins.registry()));
        host.plugins = Some(plugins);
        Ok(host.with_payloads(payloads))
    }

    /// A host from parts (for embedding, tests and benchmarks). Its plugins are the ones given;
    /// no directory is watched.
    pub fn new(
        config: Config,
        source: Arc<dyn QueueSource>,
        store: Arc<dyn Store>,
        registry: Registry,
    ) -> Self {
        Host::assemble(config, source, store, Arc::new(registry))
    }

    fn assemble(
        config: Config,
        source: Arc<dyn QueueSource>,
        store: Arc<dyn Store>,
        registry: Arc<Registry>,
    ) -> Self {
        // Plugins loaded by an engine of their own (a host built from parts) read their state
        // from this host's store too.
        for status in registry.status() {
            if let Some(plugin) = status.serving {
                plugin.bind_state(store.clone(), &config.namespace);
            }
        }
        let stats = Arc::new(Stats::default());
        let fair = FairShares::new(config.max_in_flight);
        let metrics = Metrics::new(
            &config,
            Arc::clone(&stats),
            Arc::clone(&registry),
            Arc::clone(&fair),
        );
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
            recent: Arc::default(),
            schedules: Arc::default(),
            fleet: Arc::default(),
            fair,
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
        payloads.count_into(self.stats.payload());
        self.payloads = Arc::new(payloads);
        self
    }

    /// The payload stores.
    #[cfg(feature = "test-support")]
    pub(crate) fn payloads(&self) -> Arc<Payloads> {
        Arc::clone(&self.payloads)
    }

    /// The plugins directory this host loads from, if it was built from a configuration.
    #[cfg(feature = "test-support")]
    pub(crate) fn plugin_dir(&self) -> Option<&Arc<PluginDir>> {
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
            stats: Arc::clone(&self.stats),
            recent: Arc::clone(&self.recent),
            source: Arc::clone(&self.source),
            schedules: Arc::clone(&self.schedules),
            fleet: Arc::clone(&self.fleet),
            store: self.store.clone(),
            fair: Arc::clone(&self.fair),
        }
    }

    /// The queue backend.
    #[cfg(feature = "test-support")]
    pub(crate) fn source(&self) -> Arc<dyn QueueSource> {
        Arc::clone(&self.source)
    }

    /// The idempotency backend.
    #[cfg(feature = "test-support")]
    pub(crate) fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }

    /// The loaded plugins.
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }
}
