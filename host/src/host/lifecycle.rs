//! The host's lifecycle: run (pollers, readiness, the plugin watcher), drain at shutdown, and
//! run until idle.

use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::lanes::Common;
use super::{Host, RELEASE_DEADLINE};
use crate::admin::health;
use crate::fleet::HostEntry;
use crate::fleet::follow::Follower;
use crate::pipeline::{
    AckTask, Acker, Batches, Completer, Heartbeats, LineParts, OutboxMarks, PutBacks, QueueCtx,
    Shared, SlotReleases, WaitLines, run_poller,
};
use crate::plugin::registry::Registry;
use crate::plugin::{status, watch};
use crate::schedule::run::Scheduler;
use crate::stats::Fates;

/// A host's backends in words: `sqs + redis`, `local + redis-cluster`.
fn backends(config: &crate::config::Config) -> String {
    use crate::config::{SourceKind, StoreKind};
    let queue = match config.source {
        SourceKind::Local => "local",
        SourceKind::Sqs(_) => "sqs",
        SourceKind::Rabbitmq(_) => "rabbitmq",
        SourceKind::Pgmq(_) => "pgmq",
        SourceKind::Nats(_) => "nats",
    };
    let store = match &config.store {
        StoreKind::Local => "local",
        StoreKind::Redis(t) if t.cluster => "redis-cluster",
        StoreKind::Redis(_) => "redis",
        StoreKind::Postgres(_) => "postgres",
    };
    format!("{queue} + {store}")
}

impl Host {
    /// Runs until `shutdown` is cancelled, then drains. Meanwhile the queues and the store are
    /// checked for readiness, which ends with `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let watcher = self.watch_plugins()?;
        let checks = self.watch_health(&shutdown);
        let (schedules, scheduler) = self.fire_schedules(&shutdown);
        let (fleet, follower) = self.follow_fleet();
        let result = match self.config.lanes {
            1 => self.consume(shutdown, &self.common()).await,
            lanes => self.consume_in_lanes(lanes, shutdown).await,
        };
        fleet.cancel();
        // Its last entry says this host stopped. Bounded: a step under way when it was told to
        // stop, then the last write, each under the store's deadlines and this one.
        let _ = tokio::time::timeout(2 * crate::fleet::follow::LAST_WRITE, follower).await;
        schedules.cancel();
        // A pass under way finishes (a tick it sent is recorded fired); it sends nothing new.
        // Bounded as the follower is: each of its calls is under the store's and the queue's
        // deadlines.
        let _ = tokio::time::timeout(2 * crate::fleet::follow::LAST_WRITE, scheduler).await;
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
            store: self.store.clone(),
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

    /// Starts this host's scheduler (see [`crate::schedule`]), until `shutdown`: its stop, and
    /// its task, which ends once a pass under way has ended.
    fn fire_schedules(
        &self,
        shutdown: &CancellationToken,
    ) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let stop = shutdown.child_token();
        let scheduler = Scheduler {
            config: Arc::clone(&self.config),
            store: self.store.clone(),
            source: Arc::clone(&self.source),
            metrics: Arc::clone(&self.metrics),
            board: Arc::clone(&self.schedules),
        };
        let task = tokio::spawn(scheduler.run(stop.clone()));
        (stop, task)
    }

    /// Starts this host's fleet follower (see [`crate::fleet`]): its roster entry written, the
    /// fleet's pauses followed, once a tick, until the host has drained; the follower's task.
    fn follow_fleet(&self) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let stop = CancellationToken::new();
        let (config, health) = (Arc::clone(&self.config), Arc::clone(&self.health));
        let (registry, stats) = (Arc::clone(&self.registry), Arc::clone(&self.stats));
        let started_ms = crate::message::now_ms();
        let backends = backends(&config);
        let entry = move || {
            let not_ready = health
                .readiness(&config, &registry)
                .err()
                .unwrap_or_default();
            HostEntry {
                pid: std::process::id(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                started_ms,
                seen_ms: crate::message::now_ms(),
                backends: backends.clone(),
                ready: not_ready.is_empty(),
                not_ready,
                stopped: false,
                queues: Fates::by_queue(&stats),
            }
        };
        let follower = Follower {
            store: self.store.clone(),
            fleet: Arc::clone(&self.fleet),
            namespace: self.config.namespace.clone(),
            id: crate::fleet::host_name(),
            entry: Box::new(entry),
        };
        let task = tokio::spawn(follower.run(stop.clone()));
        (stop, task)
    }

    /// Queue `q`'s capture, counted in the metrics, when it asks for one: under the data
    /// directory, or nowhere (with a warning) for a host that keeps nothing on disk.
    pub(super) fn capture(
        &self,
        q: &crate::config::QueueConfig,
    ) -> Option<crate::capture::Capture> {
        let config = q.capture.as_ref()?;
        let Some(data) = &self.config.data_dir else {
            tracing::warn!(queue = %q.name, "capture needs a data directory; this host keeps none, so nothing is captured");
            return None;
        };
        let capture = crate::capture::Capture::start(&data.join("capture"), &q.name, config);
        self.stats
            .track_capture(&q.name, std::sync::Arc::clone(&capture.counts));
        Some(capture)
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
        let publish = Arc::new(move |registry: &Registry| {
            if let Some(file) = &file
                && let Err(e) = status::write(file, registry)
            {
                tracing::warn!(error = %format!("{e:#}"), "could not publish plugin status");
            }
        });
        publish(&self.registry);
        if !self.config.watch_plugins {
            return Ok(None);
        }
        let stop = CancellationToken::new();
        let registry = Arc::clone(&self.registry);
        let on_reload = Arc::clone(&publish);
        watch::spawn(Arc::clone(plugins), stop.clone(), move |_| {
            on_reload(&registry)
        })?;
        // Canaries start only on a reload, so their follower runs where reloads do.
        tokio::spawn(crate::rollout::follow::run(
            self.store.clone(),
            Arc::clone(plugins),
            Arc::clone(&self.config),
            stop.clone(),
            publish,
        ));
        Ok(Some(stop))
    }

    /// Consumes every queue on this runtime until `shutdown`, then drains (one lane's work).
    pub(super) async fn consume(
        &self,
        shutdown: CancellationToken,
        common: &Common,
    ) -> anyhow::Result<()> {
        let shared = Arc::new(self.shared(common));
        let formats = crate::format::open(&self.config);
        let mut ackers = Vec::new();
        let pollers = TaskTracker::new();
        for (q, (progress, capture)) in self.config.queues.iter().zip(&common.queues) {
            let (acker, task) = Acker::spawn(
                Arc::clone(&self.source),
                q.name.clone(),
                Arc::clone(&self.stats),
                Arc::clone(progress),
            );
            ackers.push((q.name.clone(), task));
            let ctx = Arc::new(QueueCtx {
                shared: Arc::clone(&shared),
                config: q.clone(),
                format: crate::format::for_queue(&formats, q),
                acker,
                put_backs: PutBacks::spawn(Arc::clone(&self.source), q.name.clone()),
                capture: capture.clone(),
                heartbeats: Heartbeats::default(),
                tap: None,
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
        let watcher = tokio::spawn(super::idle::watch(
            Arc::clone(&self.source),
            self.config.clone(),
            Arc::clone(&self.registry),
            idle.clone(),
        ));
        let result = self.run(idle.clone()).await;
        idle.cancel();
        watcher.await.context("idle watcher failed")?;
        result
    }

    fn shared(&self, common: &Common) -> Shared {
        let abandon = self.abandon.child_token();
        let tasks = TaskTracker::new();
        let lines = WaitLines::new(LineParts {
            capacity: self.config.max_in_flight,
            store: self.store.clone(),
            fair: Arc::clone(&self.fair),
            in_flight: Arc::clone(&common.in_flight),
            abandon: abandon.clone(),
            tasks: tasks.clone(),
        });
        let stats = Arc::clone(&self.stats);
        Shared {
            config: Arc::clone(&self.config),
            source: Arc::clone(&self.source),
            store: self.store.clone(),
            registry: Arc::clone(&self.registry),
            stats: Arc::clone(&self.stats),
            metrics: Arc::clone(&self.metrics),
            in_flight: Arc::clone(&common.in_flight),
            fair: Arc::clone(&self.fair),
            priorities: Arc::clone(&common.priorities),
            slot_releases: SlotReleases::spawn(self.store.clone(), stats, Arc::clone(&lines)),
            lines,
            tasks,
            abandon: abandon.clone(),
            completer: Completer::spawn(self.store.clone()),
            payloads: Arc::clone(&self.payloads),
            tracer: self.tracer.clone(),
            outbox_marks: OutboxMarks::default(),
            recent: Arc::clone(&self.recent),
            fleet: Arc::clone(&self.fleet),
            batches: Batches::new(Arc::clone(&self.metrics), abandon),
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
