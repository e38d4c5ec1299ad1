//! The console's picture of the work: the fleet (every host sharing the store), each queue's
//! fates on this host and across the fleet with what is waiting, in flight and being retried,
//! and each queue's last hour.

use maud::{Markup, html};

use super::chart::{hour_chart, sparkline};
use super::forms::form;
use super::text::age;
use super::views::{FleetView, QueueView};
use crate::fleet::Liveness;
use crate::message::now_ms;
use crate::stats::Fates;

/// The fleet table.
pub(super) fn fleet_table(fleet: &FleetView) -> Markup {
    html! {
        h2 { "Fleet" }
        @if fleet.hosts.is_empty() {
            p.muted { "Not read yet: hosts write their entry once a second." }
        } @else {
            table #fleet {
                tr {
                    th { "host" } th.text { "state" } th { "pid" } th.text { "version" }
                    th.text { "backends" } th.text { "ready" } th { "up" }
                    th { "last heartbeat" } th { "received" } th { "acked" }
                }
                @for h in &fleet.hosts {
                    @let (state, class) = match h.state {
                        Liveness::Live => ("live", "ok"),
                        Liveness::Stopped => ("stopped", "muted"),
                        Liveness::Gone => ("gone", "bad"),
                    };
                    tr data-host=(h.id) {
                        td {
                            (h.id)
                            @if h.id == fleet.this_host { " " span.muted { "(this host)" } }
                        }
                        td class={ "text state " (class) } { (state) }
                        td { (h.pid) }
                        td.text { (h.version) }
                        td.text { (h.backends) }
                        td.text {
                            @if h.ready {
                                span.ok { "yes" }
                            } @else {
                                span.bad { "no" } " " span.muted { (h.not_ready.join("; ")) }
                            }
                        }
                        td { (age(h.up_secs * 1000)) }
                        td { (age(h.heartbeat_age_ms)) " ago" }
                        td { (h.totals.received) }
                        td { (h.totals.acked) }
                    }
                }
            }
        }
    }
}

fn fate_cells(f: &Fates) -> Markup {
    html! {
        @for (name, v) in Fates::NAMES.iter().zip(f.values()) {
            td class=(name) { (v) }
        }
    }
}

/// The queues table: per queue a row for this host and one for the fleet, then the legend.
pub(super) fn queues_table(queues: &[QueueView], actions: bool) -> Markup {
    let now = now_ms();
    let depth = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
    html! {
        h2 { "Queues" }
        table #queues {
            tr {
                th.text { "queue" } th.text { "counted on" }
                @for name in Fates::NAMES { th { (name) } }
                th { "ran" } th { "handled/min" } th { "waiting" } th { "in flight" }
                th { "retrying" } th { "dead-letter queue" } th.text { "last minutes" }
            }
            @for q in queues {
                tr data-queue=(q.name) {
                    td.text rowspan="2" {
                        (q.name) br;
                        span.muted { "format: " (q.format) " · plugin: " (q.plugin) }
                        @if let Some(p) = &q.paused {
                            br; span.bad.paused { "paused by " (p.by) }
                        }
                        @if actions {
                            @match &q.paused {
                                None => (form("pause", &[("queue", &q.name)], "Pause on every host")),
                                Some(_) => (form("resume", &[("queue", &q.name)], "Resume on every host")),
                            }
                        }
                    }
                    td.text { "this host" }
                    (fate_cells(&q.totals))
                    td.ran { (q.ran) }
                    td { (q.per_minute.map_or("-".to_string(), |f| format!("{:.1}", f.handled()))) }
                    td.visible { (depth(q.depth.as_ref().map(|d| d.visible))) }
                    td.in-flight { (depth(q.depth.as_ref().map(|d| d.in_flight))) }
                    td.retrying {
                        @match q.retrying.first() {
                            Some(next) => {
                                (q.retrying.len()) " "
                                span.muted { "next in " (age(next.back_at_ms.saturating_sub(now))) }
                            }
                            None => "0",
                        }
                    }
                    td {
                        span.dead-letter-depth { (depth(q.dead_letter_depth)) }
                        " " span.muted { (q.dead_letter_queue) }
                    }
                    td.text { (sparkline(&q.handled)) }
                }
                tr.fleet-row data-fleet-queue=(q.name) {
                    td.text.muted { "all hosts" }
                    @match &q.fleet {
                        Some(fleet) => (fate_cells(fleet)),
                        None => td.muted colspan="10" { "not read yet" },
                    }
                    td colspan="7" {}
                }
            }
        }
        p.muted.legend { (Fates::LEGEND) }
        (retrying_tables(queues))
        (hour_charts(queues))
    }
}

/// The messages this host put back to retry, per queue that has any.
fn retrying_tables(queues: &[QueueView]) -> Markup {
    let now = now_ms();
    html! {
        @for q in queues.iter().filter(|q| !q.retrying.is_empty()) {
            h2 { "Being retried from " (q.name) }
            table.retrying {
                tr {
                    th.text { "message" } th.text { "plugin" } th { "attempt" }
                    th.text { "why" } th { "back in" }
                }
                @for r in &q.retrying {
                    tr {
                        td.text { code { (r.message_id) } }
                        td.text { (r.plugin) }
                        td { (r.attempt) }
                        td.text { (r.reason) }
                        td { (age(r.back_at_ms.saturating_sub(now))) }
                    }
                }
            }
        }
    }
}

/// Each queue's last hour on this host.
fn hour_charts(queues: &[QueueView]) -> Markup {
    html! {
        h2 { "Last hour on this host" }
        p.muted {
            "Messages handled (acked, duplicate or dead-lettered) per minute, kept in memory \
             since the host started."
        }
        @for q in queues {
            div.chart data-queue=(q.name) { b { (q.name) } br; (hour_chart(&q.handled_per_minute)) }
        }
    }
}
