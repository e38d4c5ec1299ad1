//! Prometheus metrics: what the host did, how long handlers took, what is in flight, and how
//! deep its queues are, in one registry per host, served by the admin listener's `/metrics`.
//!
//! Two kinds of figures. Counts qhost keeps anyway (per-message outcomes in [`Stats`], plugin
//! loads in the plugin [`Registry`]) are read at scrape time by a collector ([`collect`]), so
//! there is one source of truth and nothing is counted twice on the hot path. Figures that
//! exist only for metrics (the handler-duration histogram, the in-flight gauge, the polled
//! queue depth) are prometheus-client metrics held here.
//!
//! Names follow Prometheus conventions (`_total`, `_seconds`, base units). Where the
//! OpenTelemetry messaging conventions define a metric (consumed messages, process duration),
//! its name and attribute labels are used as an OpenTelemetry-to-Prometheus exporter would
//! write them, so dashboards built for those conventions work; the rest are `qhost_`.

mod collect;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry as PromRegistry, Unit};

use crate::config::Config;
use crate::flow::FairShares;
use crate::plugin::registry::Registry;
use crate::source::QueueDepth;
use crate::stats::Stats;

/// Upper bounds of the handler-duration buckets, in seconds: 1 ms to 5 min.
const DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0,
];

/// Labels of `messaging_process_duration_seconds`: the OpenTelemetry attributes, as labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessLabels {
    messaging_system: &'static str,
    messaging_destination_name: String,
    qhost_plugin: String,
    qhost_plugin_version: String,
}

/// Upper bounds of the batch-size buckets, in messages per call.
const BATCH_BUCKETS: [f64; 8] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0];

/// Labels of `qhost_batch_messages`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

/// Labels of `qhost_queue_messages`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DepthLabels {
    queue: String,
    state: &'static str,
}

/// Labels of `qhost_schedule_ticks_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TickLabels {
    schedule: String,
    result: &'static str,
}

/// Labels of `qhost_schedule_lag_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScheduleLabels {
    schedule: String,
}

/// The duration histogram last used per queue and plugin, with the version it is for.
type ProcessCache = HashMap<String, HashMap<String, (String, Histogram)>>;

/// One host's metrics.
pub struct Metrics {
    registry: PromRegistry,
    system: &'static str,
    process: Family<ProcessLabels, Histogram>,
    /// Spares each observation its label set: three `String`s to build and hash per message.
    process_cache: Mutex<ProcessCache>,
    in_flight: Gauge,
    depth: Family<DepthLabels, Gauge>,
    ticks: Family<TickLabels, Counter>,
    lag: Family<ScheduleLabels, Gauge<f64, AtomicU64>>,
    /// Registered only on a host with schedules: none measures its clock.
    clock_skew: Gauge<f64, AtomicU64>,
    batch: Family<PluginLabels, Histogram>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics for a host with this configuration, reading `stats`, `plugins` and the flow
    /// keys' put-backs (`fair`) at scrape time.
    pub(crate) fn new(
        config: &Config,
        stats: Arc<Stats>,
        plugins: Arc<Registry>,
        fair: Arc<FairShares>,
    ) -> Self {
        let system = config.source.messaging_system();
        let mut registry = PromRegistry::default();
        let process = Family::<ProcessLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(DURATION_BUCKETS)
        });
        registry.register_with_unit(
            "messaging_process_duration",
            "Time a handler took to process a message (OpenTelemetry messaging.process.duration)",
            Unit::Seconds,
            process.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "qhost_messages_in_flight",
            "Messages received and not yet finished (acked, put back or dead-lettered)",
            in_flight.clone(),
        );
        let depth = Family::<DepthLabels, Gauge>::default();
        registry.register(
            "qhost_queue_messages",
            "Approximate messages in a consumed queue, by state (visible, or invisible: in flight or delayed), polled every few seconds",
            depth.clone(),
        );
        let ticks = Family::<TickLabels, Counter>::default();
        registry.register(
            "qhost_schedule_ticks",
            "Schedule ticks this host decided, by result: fired (claimed and sent), missed (no host was up for it inside the catch-up window), skipped (the previous tick's message was still being handled); summed across a fleet, each tick counts once",
            ticks.clone(),
        );
        let lag = Family::<ScheduleLabels, Gauge<f64, AtomicU64>>::default();
        registry.register_with_unit(
            "qhost_schedule_lag",
            "How late the last tick this host fired was sent, after its scheduled time",
            Unit::Seconds,
            lag.clone(),
        );
        let clock_skew = Gauge::<f64, AtomicU64>::default();
        if !config.schedules.is_empty() {
            registry.register_with_unit(
                "qhost_schedule_clock_skew",
                "How far this host's clock is ahead of the store's (negative: behind), measured before every schedules pass; schedules run on the store's clock",
                Unit::Seconds,
                clock_skew.clone(),
            );
        }
        let batch = Family::<PluginLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(BATCH_BUCKETS)
        });
        registry.register(
            "qhost_batch_messages",
            "Messages per call of a batch handler",
            batch.clone(),
        );
        registry.register_collector(Box::new(collect::HostCollector::new(
            system, stats, plugins, fair,
        )));
        Metrics {
            registry,
            system,
            process,
            process_cache: Mutex::default(),
            in_flight,
            depth,
            ticks,
            lag,
            clock_skew,
            batch,
        }
    }

    /// Records a batch handler's call of `messages` messages.
    pub(crate) fn observe_batch(&self, plugin: &str, messages: usize) {
        let labels = PluginLabels {
            plugin: plugin.to_string(),
        };
        self.batch.get_or_create(&labels).observe(messages as f64);
    }

    /// The exposition in the Prometheus text format (version 0.0.4).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; an encoder error would be a bug in a collector.
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::error!(error = %e, "could not encode the metrics");
        }
        out
    }

    /// Records how long a handler call took.
    pub(crate) fn observe_process(&self, queue: &str, plugin: &str, version: &str, took: Duration) {
        self.process_histogram(queue, plugin, version)
            .observe(took.as_secs_f64());
    }

    /// The duration histogram of `queue`, `plugin` and `version`: from the cache, or created
    /// (and cached in place of the plugin's previous version) once per version.
    fn process_histogram(&self, queue: &str, plugin: &str, version: &str) -> Histogram {
        let mut cache = self
            .process_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((cached, histogram)) = cache.get(queue).and_then(|q| q.get(plugin))
            && cached == version
        {
            return histogram.clone();
        }
        let labels = ProcessLabels {
            messaging_system: self.system,
            messaging_destination_name: queue.to_string(),
            qhost_plugin: plugin.to_string(),
            qhost_plugin_version: version.to_string(),
        };
        let histogram = self.process.get_or_create(&labels).clone();
        (cache.entry(queue.to_string()).or_default())
            .insert(plugin.to_string(), (version.to_string(), histogram.clone()));
        histogram
    }

    /// Counts a message in flight until the returned guard is dropped.
    pub(crate) fn in_flight(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// Records a queue's depth as last read.
    pub(crate) fn set_depth(&self, queue: &str, depth: QueueDepth) {
        for (state, n) in [("visible", depth.visible), ("invisible", depth.invisible)] {
            let labels = DepthLabels {
                queue: queue.to_string(),
                state,
            };
            self.depth
                .get_or_create(&labels)
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

impl Metrics {
    /// Counts `n` ticks of `schedule` with `result` (fired, missed, skipped).
    pub(crate) fn count_ticks(&self, schedule: &str, result: &'static str, n: u64) {
        let labels = TickLabels {
            schedule: schedule.to_string(),
            result,
        };
        self.ticks.get_or_create(&labels).inc_by(n);
    }

    /// Records how late `schedule`'s last fired tick was sent.
    pub(crate) fn set_schedule_lag(&self, schedule: &str, seconds: f64) {
        let labels = ScheduleLabels {
            schedule: schedule.to_string(),
        };
        self.lag.get_or_create(&labels).set(seconds);
    }

    /// Records how far this host's clock is ahead of the store's, as schedules last measured.
    pub(crate) fn set_clock_skew(&self, seconds: f64) {
        self.clock_skew.set(seconds);
    }
}

/// One message counted in `qhost_messages_in_flight` while this lives.
#[derive(Debug)]
pub(crate) struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
