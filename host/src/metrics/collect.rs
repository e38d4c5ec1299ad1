//! The counts qhost keeps anyway ([`Stats`], plugin loads), written as metric families at
//! scrape time.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use crate::flow::FairShares;
use crate::payload::PayloadFlow;
use crate::plugin::Plugin;
use crate::plugin::registry::Registry;
use crate::stats::{Counts, Stats};

/// Reads the host's counters and plugins on each scrape.
#[derive(Debug)]
pub(super) struct HostCollector {
    system: &'static str,
    stats: Arc<Stats>,
    plugins: Arc<Registry>,
    fair: Arc<FairShares>,
}

impl HostCollector {
    pub(super) fn new(
        system: &'static str,
        stats: Arc<Stats>,
        plugins: Arc<Registry>,
        fair: Arc<FairShares>,
    ) -> Self {
        HostCollector {
            system,
            stats,
            plugins,
            fair,
        }
    }
}

/// One metric family: name, help, unit and type.
struct Descriptor<'a> {
    name: &'a str,
    help: &'a str,
    unit: Option<Unit>,
    kind: MetricType,
}

impl Descriptor<'_> {
    /// Writes the family with one sample per row (no sample when `rows` is empty).
    fn write<const N: usize>(
        &self,
        encoder: &mut DescriptorEncoder,
        rows: impl IntoIterator<Item = ([(&'static str, String); N], u64)>,
    ) -> fmt::Result {
        let mut family =
            encoder.encode_descriptor(self.name, self.help, self.unit.as_ref(), self.kind)?;
        for (labels, value) in rows {
            let sample = family.encode_family(&labels)?;
            match self.kind {
                MetricType::Counter => ConstCounter::new(value).encode(sample)?,
                _ => ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(sample)?,
            }
        }
        Ok(())
    }
}

const fn counter<'a>(name: &'a str, help: &'a str) -> Descriptor<'a> {
    Descriptor {
        name,
        help,
        unit: None,
        kind: MetricType::Counter,
    }
}

/// Reads one count.
type Read = fn(&Counts) -> u64;

/// What a delivery's outcome is called in `qhost_messages_handled_total`.
const OUTCOMES: [(&str, Read); 12] = [
    ("acked", |c| c.acked),
    ("duplicate", |c| c.duplicates),
    ("busy", |c| c.busy),
    ("rate_limited", |c| c.rate_limited),
    ("flow_limited", |c| c.flow_limited),
    ("fair_share", |c| c.fair_share),
    ("retried", |c| c.retried),
    ("deferred", |c| c.deferred),
    ("dead_lettered", |c| c.dead_lettered),
    ("released", |c| c.released),
    ("expired", |c| c.expired),
    ("ignored", |c| c.ignored),
];

/// Per queue and plugin counts that are not outcomes, each its own family.
const PER_PLUGIN: [(&str, &str, Read); 5] = [
    (
        "qhost_handler_invocations",
        "Handler calls (wasm or native), by queue and plugin",
        |c| c.invoked,
    ),
    (
        "qhost_handler_failures",
        "Handler calls that trapped, timed out or hit the memory limit",
        |c| c.failures,
    ),
    (
        "qhost_leases_lost",
        "Results discarded because the lease had passed to another worker",
        |c| c.lost_leases,
    ),
    (
        "qhost_outbox_messages_sent",
        "Outbox messages sent on behalf of handlers",
        |c| c.outbox_sent,
    ),
    (
        "qhost_conflicts",
        "Deliveries of a completed key whose body differs from the one that ran",
        |c| c.conflicts,
    ),
];

impl Collector for HostCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let counts = self.stats.snapshot();
        self.messages(&mut encoder, &counts)?;
        self.backends(&mut encoder)?;
        self.plugins(&mut encoder)?;
        self.flow(&mut encoder)?;
        build_info(&mut encoder)
    }
}

impl HostCollector {
    /// Put-backs and waits by flow key: the keys the shares name, the rest as `other`.
    fn flow(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let rows = self.fair.put_backs();
        let rows = rows.iter().flat_map(|(plugin, key, c)| {
            [
                ("fair_share", c.fair_share),
                ("flow_limited", c.flow_limited),
            ]
            .map(|(why, n)| {
                let labels = [
                    ("plugin", plugin.clone()),
                    ("key", key.clone()),
                    ("reason", why.to_string()),
                ];
                (labels, n)
            })
        });
        counter(
            "qhost_flow_put_backs",
            "Messages put back by flow key (docs/flow.md): fair_share (beyond the key's share of this host's slots) or flow_limited (over its fleet-wide concurrency or rate); the first 20 keys held back are named, the rest summed as key=\"other\"",
        )
        .write(encoder, rows)?;
        let waits = self.fair.put_backs();
        let waits = waits.iter().map(|(plugin, key, c)| {
            let labels = [("plugin", plugin.clone()), ("key", key.clone())];
            (labels, c.waited)
        });
        counter(
            "qhost_flow_waits",
            "Messages kept waiting on this host for their flow key's turn (a slot of its fleet-wide concurrency, or its run under its rate) instead of put back (docs/flow.md); keys named as in qhost_flow_put_backs_total",
        )
        .write(encoder, waits)
    }

    fn messages(
        &self,
        encoder: &mut DescriptorEncoder,
        counts: &BTreeMap<(String, String), Counts>,
    ) -> fmt::Result {
        let mut received: BTreeMap<&str, u64> = BTreeMap::new();
        for ((queue, _), c) in counts {
            *received.entry(queue).or_default() += c.received;
        }
        counter(
            "messaging_client_consumed_messages",
            "Messages received from a queue (OpenTelemetry messaging.client.consumed.messages)",
        )
        .write(
            encoder,
            received.into_iter().map(|(queue, n)| {
                let labels = [
                    ("messaging_system", self.system.to_string()),
                    ("messaging_destination_name", queue.to_string()),
                ];
                (labels, n)
            }),
        )?;
        counter(
            "qhost_messages_handled",
            "Deliveries ended, by queue, plugin and outcome: acked (ran and completed), duplicate (completed before, acked without running), busy (leased elsewhere, put back), rate_limited, flow_limited (over a flow key's fleet-wide concurrency or rate), fair_share (over a flow key's share of the host's slots), retried (the handler failed or asked to retry), deferred (put back unrun: a backend did not answer; no attempt used), dead_lettered, released (given back at shutdown)",
        )
        .write(
            encoder,
            counts.iter().flat_map(|((queue, plugin), c)| {
                OUTCOMES.iter().map(move |(outcome, of)| {
                    let labels = [
                        ("queue", queue.clone()),
                        ("plugin", plugin.clone()),
                        ("outcome", outcome.to_string()),
                    ];
                    (labels, of(c))
                })
            }),
        )?;
        for (name, help, of) in PER_PLUGIN {
            counter(name, help).write(
                encoder,
                counts.iter().map(|((queue, plugin), c)| {
                    (
                        [("queue", queue.clone()), ("plugin", plugin.clone())],
                        of(c),
                    )
                }),
            )?;
        }
        Ok(())
    }

    fn backends(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        counter(
            "qhost_backend_errors",
            "Failed calls to a backend: queue (SQS or the local queue), idempotency (the lease store), payload (a claim-check store)",
        )
        .write(
            encoder,
            (self.stats.backend_errors().into_iter())
                .map(|(backend, n)| ([("backend", backend.name().to_string())], n)),
        )?;
        counter(
            "qhost_backend_call_failures",
            "Failed backend calls by operation and kind: timeout (no answer within its deadline, see [timeouts]) or error; operations are SQS's (ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibility, SendMessageBatch, GetQueueAttributes) and the stores' (acquire, extend, complete, release, outbox_sent, admit, ping, fetch, store)",
        )
        .write(
            encoder,
            (self.stats.failures_by_operation().into_iter()).flat_map(|(op, timeouts, errors)| {
                [("timeout", timeouts), ("error", errors)].map(|(kind, n)| {
                    let labels = [
                        ("backend", op.backend().name().to_string()),
                        ("operation", op.name().to_string()),
                        ("kind", kind.to_string()),
                    ];
                    (labels, n)
                })
            }),
        )?;
        counter(
            "qhost_capture_lines",
            "Lines of a queue's capture (see [[queue]] capture) by result: written, dropped (the writer was behind, a record over the cap, or the disk refused it), failed (of those dropped, the ones the disk refused)",
        )
        .write(
            encoder,
            (self.stats.captures().into_iter()).flat_map(|(queue, written, dropped, failed)| {
                [("written", written), ("dropped", dropped), ("failed", failed)].map(
                    |(result, n)| ([("queue", queue.clone()), ("result", result.to_string())], n),
                )
            }),
        )?;
        for (flow, name, help) in [
            (
                PayloadFlow::Fetched,
                "qhost_payload_fetched",
                "Payload bytes fetched from claim-check stores for handlers",
            ),
            (
                PayloadFlow::Stored,
                "qhost_payload_stored",
                "Payload bytes of outgoing messages stored in claim-check stores",
            ),
        ] {
            let descriptor = Descriptor {
                unit: Some(Unit::Bytes),
                ..counter(name, help)
            };
            descriptor.write(encoder, [([], self.stats.payload_bytes(flow))])?;
        }
        Ok(())
    }

    fn plugins(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let serving: Vec<_> = (self.plugins.status().into_iter())
            .filter_map(|s| s.serving)
            .collect();
        Descriptor {
            kind: MetricType::Gauge,
            ..counter(
                "qhost_plugin_info",
                "The plugin versions serving now (value 1)",
            )
        }
        .write(
            encoder,
            serving.iter().map(|p| {
                let labels = [("plugin", p.name.clone()), ("version", p.version.clone())];
                (labels, 1)
            }),
        )?;
        counter(
            "qhost_http_requests",
            "Outbound HTTP requests of the serving plugin versions that are granted HTTP, by result: sent (a response arrived), denied (not in the grant), prohibited (an address the host keeps out), too_many (over limits.http-requests), too_large (a body over limits.http-response-bytes), timeout, failed",
        )
        .write(
            encoder,
            serving
                .iter()
                .filter(|p| !p.manifest.capabilities.http.is_empty())
                .flat_map(|p| {
                    p.http_requests().into_iter().map(|(result, n)| {
                        let labels = [
                            ("plugin", p.name.clone()),
                            ("version", p.version.clone()),
                            ("result", result.to_string()),
                        ];
                        (labels, n)
                    })
                }),
        )?;
        self.write_kv(encoder, &serving)?;
        Descriptor {
            kind: MetricType::Gauge,
            ..counter(
                "qhost_rollout_state",
                "Each plugin's latest rollout as this host last read it (value 1): serving and canary versions, state canary, promoted or rolled-back",
            )
        }
        .write(
            encoder,
            self.plugins.canaries.seen().into_iter().map(|(plugin, r)| {
                let labels = [
                    ("plugin", plugin),
                    ("serving", r.serving),
                    ("canary", r.canary),
                    ("state", r.state.name().to_string()),
                ];
                (labels, 1)
            }),
        )?;
        counter(
            "qhost_rollout_rollbacks",
            "Canaries this host rolled back, by plugin and reason: failure-share, rollback-on, by-hand",
        )
        .write(
            encoder,
            (self.plugins.canaries.rollbacks().into_iter())
                .map(|((plugin, reason), n)| ([("plugin", plugin), ("reason", reason.to_string())], n)),
        )?;
        counter(
            "qhost_plugin_loads",
            "Loads of a plugin's files, first load and hot reloads, by result: loaded, failed (refused; the previous version keeps serving), removed",
        )
        .write(
            encoder,
            self.plugins.loads().into_iter().map(|((plugin, result), n)| {
                ([("plugin", plugin), ("result", result.name().to_string())], n)
            }),
        )
    }
}

impl HostCollector {
    /// `qhost_kv_*_total` for the serving versions granted state buckets (see `crate::kv`).
    fn write_kv(&self, encoder: &mut DescriptorEncoder, serving: &[Arc<Plugin>]) -> fmt::Result {
        let granted: Vec<&Arc<Plugin>> = (serving.iter())
            .filter(|p| !p.manifest.capabilities.keyvalue.is_empty())
            .collect();
        let id = |p: &Plugin| [("plugin", p.name.clone()), ("version", p.version.clone())];
        counter(
            "qhost_kv_reads",
            "State keys the serving plugin versions' runs read from the store",
        )
        .write(
            encoder,
            granted.iter().map(|p| (id(p), p.kv_counts().reads())),
        )?;
        counter(
            "qhost_kv_writes_committed",
            "State writes committed with their run's completion",
        )
        .write(
            encoder,
            (granted.iter()).map(|p| (id(p), p.kv_counts().committed_total())),
        )?;
        let by = |p: &Plugin, (why, n): (&'static str, u64)| {
            let [plugin, version] = id(p);
            ([plugin, version, ("reason", why.to_string())], n)
        };
        counter(
            "qhost_kv_writes_dropped",
            "State writes dropped with their run, by reason: failed (trap, timeout, memory limit), retry, reject, lease-lost, conflict (a key it read changed), unavailable (the payload store did not take the run's outbox before its commit)",
        )
        .write(
            encoder,
            (granted.iter()).flat_map(|p| p.kv_counts().dropped_by().into_iter().map(|r| by(p, r))),
        )?;
        counter(
            "qhost_kv_refused",
            "State calls refused, by reason: not-granted, key-bytes, value-bytes, keys-per-run, not-a-counter",
        )
        .write(
            encoder,
            (serving.iter()).flat_map(|p| p.kv_counts().refused_by().into_iter().map(|r| by(p, r))),
        )
    }
}

fn build_info(encoder: &mut DescriptorEncoder) -> fmt::Result {
    let labels = [
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        ("wit", crate::runtime::WIT_PACKAGE.to_string()),
        ("wasmtime", crate::runtime::WASMTIME_VERSION.to_string()),
    ];
    Descriptor {
        kind: MetricType::Gauge,
        ..counter(
            "qhost_build_info",
            "The qhost build: its version, the WIT package it serves and the wasmtime it embeds (value 1)",
        )
    }
    .write(encoder, [(labels, 1)])
}
