//! What the console shows, as data: the JSON the API serves and the page renders. Each view
//! is read from what the host already keeps (counters, the checker's last depths and samples,
//! the plugin registry, the dead letters it sent lately), so a page view costs no call to a
//! backend. Nothing secret is in them: a secret setting is named, never shown.

use serde::Serialize;

use super::super::HostView;
use super::super::history::Flow;
use crate::config::QueueConfig;
use crate::fleet::{HostStatus, Pause};
use crate::plugin::Plugin;
use crate::plugin::manifest::ConfigValue;
use crate::plugin::registry::LoadResult;
use crate::recent::{DeadLetter, Retrying};
use crate::stats::{Counts, Fates};

/// One consumed queue.
#[derive(Debug, Serialize)]
pub(crate) struct QueueView {
    pub(crate) name: String,
    /// `qhost` or `celery`.
    pub(crate) format: &'static str,
    /// The plugin its messages go to (a Celery queue's default, if it has one).
    pub(crate) plugin: String,
    pub(crate) dead_letter_queue: String,
    /// Who paused it fleet-wide, if it is paused.
    pub(crate) paused: Option<Pause>,
    /// Where this host's deliveries went since it started (they add up to `received`).
    pub(crate) totals: Fates,
    /// This host's handler calls, their failures, and the outbox messages they sent.
    pub(crate) ran: u64,
    pub(crate) failed: u64,
    pub(crate) outbox: u64,
    /// The same fates summed over every host in the fleet's roster (`None` before the first
    /// read of it).
    pub(crate) fleet: Option<Fates>,
    /// Messages this host put back to retry that are not due yet, soonest first.
    pub(crate) retrying: Vec<Retrying>,
    /// Per minute over the last `window_secs` (none until the checker sampled twice).
    pub(crate) per_minute: Option<Flow>,
    pub(crate) window_secs: u64,
    /// Messages visible and in flight at the last check, and in the dead-letter queue.
    pub(crate) depth: Option<Depth>,
    pub(crate) dead_letter_depth: Option<u64>,
    /// Messages handled between the checker's samples, oldest first.
    pub(crate) handled: Vec<u64>,
    /// Messages handled in each minute of the last hour, oldest first.
    pub(crate) handled_per_minute: Vec<u64>,
}

/// The hosts sharing this host's store.
#[derive(Debug, Serialize)]
pub(crate) struct FleetView {
    /// This host's id.
    pub(crate) this_host: String,
    /// Every host in the roster, this one first (none before the first read of it).
    pub(crate) hosts: Vec<HostStatus>,
}

/// A queue's depth at the last check.
#[derive(Debug, Serialize)]
pub(crate) struct Depth {
    pub(crate) visible: u64,
    pub(crate) in_flight: u64,
}

/// One plugin name: what serves it, what it may do, what it cost.
#[derive(Debug, Serialize)]
pub(crate) struct PluginView {
    pub(crate) name: String,
    /// The serving version, if one serves.
    pub(crate) version: Option<String>,
    /// When it was loaded, in milliseconds since the Unix epoch.
    pub(crate) loaded_at_ms: Option<u64>,
    /// Why the latest file did not load, if it did not.
    pub(crate) last_error: Option<String>,
    /// Loads that succeeded (the first and each reload) and that failed.
    pub(crate) loads: u64,
    pub(crate) failed_loads: u64,
    pub(crate) grants: Option<Grants>,
    pub(crate) limits: Option<crate::plugin::manifest::Limits>,
    pub(crate) costs: Option<Costs>,
    /// The canary taking a share of its keys, if one runs.
    pub(crate) canary: Option<CanaryView>,
}

/// A running canary.
#[derive(Debug, Serialize)]
pub(crate) struct CanaryView {
    pub(crate) version: String,
    /// The share of keys it takes (as this host last followed its rollout).
    pub(crate) percent: u8,
}

/// What the serving version may reach.
#[derive(Debug, Serialize)]
pub(crate) struct Grants {
    pub(crate) outbox_queues: Vec<String>,
    pub(crate) celery_queues: Vec<String>,
    pub(crate) http_origins: Vec<String>,
    /// The settings read from a secret, by setting name (never the value or where it is).
    pub(crate) secret_settings: Vec<String>,
}

/// Mean costs per call of the serving version, in microseconds.
#[derive(Debug, Serialize)]
pub(crate) struct Costs {
    pub(crate) calls: u64,
    pub(crate) instantiate_us: f64,
    pub(crate) call_us: f64,
    pub(crate) drop_us: f64,
}

/// Every consumed queue.
pub(crate) fn queues(host: &HostView) -> Vec<QueueView> {
    let counts = host.stats.snapshot();
    let history = &host.health.history;
    let fleet = host.fleet.roster().map(|r| r.totals());
    let pauses = host.fleet.pauses();
    (host.config.queues.iter())
        .map(|q| {
            let mut total = Counts::default();
            for ((queue, _), c) in &counts {
                if *queue == q.name {
                    total.add(c);
                }
            }
            let rate = history.per_minute(&q.name);
            QueueView {
                name: q.name.clone(),
                format: format_of(q),
                plugin: q.plugin.clone(),
                dead_letter_queue: q.dead_letter.clone(),
                paused: pauses.queues.get(&q.name).cloned(),
                totals: Fates::of(&total),
                ran: total.invoked,
                failed: total.failures,
                outbox: total.outbox_sent,
                fleet: fleet
                    .as_ref()
                    .map(|f| f.get(&q.name).copied().unwrap_or_default()),
                retrying: host.recent.retrying(&q.name),
                handled_per_minute: history.handled_per_minute(&q.name),
                per_minute: rate.map(|(flow, _)| flow),
                window_secs: rate.map_or(0, |(_, span)| span.as_secs()),
                depth: host.health.depth(&q.name).map(|d| Depth {
                    visible: d.visible,
                    in_flight: d.invisible,
                }),
                dead_letter_depth: host.health.depth(&q.dead_letter).map(|d| d.total()),
                handled: history.handled_per_sample(&q.name),
            }
        })
        .collect()
}

fn format_of(q: &QueueConfig) -> &'static str {
    q.format.name()
}

/// The fleet as this host last read it, this host first, then by id.
pub(crate) fn fleet(host: &HostView) -> FleetView {
    let this_host = crate::fleet::host_name();
    let roster = host.fleet.roster().unwrap_or_default();
    FleetView {
        hosts: roster.statuses(Some(&this_host)),
        this_host,
    }
}

/// Every plugin the host loaded or failed to load.
pub(crate) fn plugins(host: &HostView) -> Vec<PluginView> {
    let loads = host.plugins.loads();
    let seen = host.plugins.canaries.seen();
    let count = |name: &str, result: LoadResult| {
        loads.get(&(name.to_string(), result)).copied().unwrap_or(0)
    };
    (host.plugins.status().into_iter())
        .map(|s| {
            let serving = s.serving.as_deref();
            PluginView {
                loads: count(&s.name, LoadResult::Loaded),
                failed_loads: count(&s.name, LoadResult::Failed),
                version: serving.map(|p| p.version.clone()),
                loaded_at_ms: host.plugins.loaded_at_ms(&s.name),
                last_error: s.last_error,
                grants: serving.map(grants),
                limits: serving.map(|p| p.manifest.limits.clone()),
                costs: serving.and_then(costs),
                canary: host.plugins.canaries.get(&s.name).map(|slot| CanaryView {
                    version: slot.plugin.version.clone(),
                    percent: seen.get(&s.name).map_or(0, |r| r.percent),
                }),
                name: s.name,
            }
        })
        .collect()
}

fn grants(p: &Plugin) -> Grants {
    let m = &p.manifest;
    Grants {
        outbox_queues: m.outbox.queues.clone(),
        celery_queues: m.outbox.celery.clone(),
        http_origins: m.capabilities.http.clone(),
        secret_settings: (m.config.iter())
            .filter(|(_, v)| !matches!(v, ConfigValue::Text(_)))
            .map(|(k, _)| k.clone())
            .collect(),
    }
}

fn costs(p: &Plugin) -> Option<Costs> {
    let c = p.costs()?;
    let per = |d: std::time::Duration, n: u64| d.as_secs_f64() * 1e6 / n.max(1) as f64;
    Some(Costs {
        calls: c.calls,
        instantiate_us: per(c.instantiate, c.instances),
        call_us: per(c.call, c.calls),
        drop_us: per(c.drop, c.instances),
    })
}

/// The dead letters this host sent lately from `queue`, newest first; `None` when the host
/// does not consume it.
pub(crate) fn dead_letters(host: &HostView, queue: &str) -> Option<Vec<DeadLetter>> {
    (host.config.queues.iter().any(|q| q.name == queue)).then(|| host.recent.of(queue))
}
