//! The console's picture of the work: the fleet (every host sharing the store), each queue's
//! fates on this host and across the fleet with what is waiting, in flight and being retried,
//! and each queue's last hour.

use std::fmt::Write as _;

use super::chart::{hour_chart, sparkline};
use super::forms::form;
use super::text::{age, escape};
use super::views::{FleetView, QueueView};
use crate::fleet::Liveness;
use crate::message::now_ms;
use crate::stats::Fates;

/// The fleet table.
pub(super) fn fleet_table(page: &mut String, fleet: &FleetView) {
    page.push_str("<h2>Fleet</h2>");
    if fleet.hosts.is_empty() {
        page.push_str(
            "<p class=\"muted\">Not read yet: hosts write their entry once a second.</p>",
        );
        return;
    }
    page.push_str(
        "<table id=\"fleet\"><tr><th>host</th><th class=\"text\">state</th><th>pid</th>\
         <th class=\"text\">version</th><th class=\"text\">backends</th><th class=\"text\">ready</th>\
         <th>up</th><th>last heartbeat</th><th>received</th><th>acked</th></tr>",
    );
    for h in &fleet.hosts {
        let this = if h.id == fleet.this_host {
            " <span class=\"muted\">(this host)</span>"
        } else {
            ""
        };
        let (state, class) = match h.state {
            Liveness::Live => ("live", "ok"),
            Liveness::Stopped => ("stopped", "muted"),
            Liveness::Gone => ("gone", "bad"),
        };
        let ready = if h.ready {
            "<span class=\"ok\">yes</span>".to_string()
        } else {
            format!(
                "<span class=\"bad\">no</span> <span class=\"muted\">{}</span>",
                escape(&h.not_ready.join("; "))
            )
        };
        let _ = write!(
            page,
            "<tr data-host=\"{id}\"><td>{id}{this}</td><td class=\"text state {class}\">{state}</td>\
             <td>{}</td><td class=\"text\">{}</td><td class=\"text\">{}</td><td class=\"text\">{ready}</td>\
             <td>{}</td><td>{} ago</td><td>{}</td><td>{}</td></tr>",
            h.pid,
            escape(&h.version),
            escape(&h.backends),
            age(h.up_secs * 1000),
            age(h.heartbeat_age_ms),
            h.totals.received,
            h.totals.acked,
            id = escape(&h.id),
        );
    }
    page.push_str("</table>");
}

fn fate_cells(f: &Fates) -> String {
    (Fates::NAMES.iter().zip(f.values()))
        .map(|(name, v)| format!("<td class=\"{name}\">{v}</td>"))
        .collect()
}

/// The queues table: per queue a row for this host and one for the fleet, then the legend.
pub(super) fn queues_table(page: &mut String, queues: &[QueueView], actions: bool) {
    page.push_str("<h2>Queues</h2><table id=\"queues\"><tr><th class=\"text\">queue</th><th class=\"text\">counted on</th>");
    for name in Fates::NAMES {
        let _ = write!(page, "<th>{name}</th>");
    }
    page.push_str(
        "<th>ran</th><th>handled/min</th><th>waiting</th><th>in flight</th><th>retrying</th>\
         <th>dead-letter queue</th><th class=\"text\">last minutes</th></tr>",
    );
    let now = now_ms();
    for q in queues {
        let rate = q
            .per_minute
            .map_or("-".to_string(), |f| format!("{:.1}", f.handled()));
        let depth = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
        let retrying = match q.retrying.first() {
            Some(next) => format!(
                "{} <span class=\"muted\">next in {}</span>",
                q.retrying.len(),
                age(next.back_at_ms.saturating_sub(now))
            ),
            None => "0".to_string(),
        };
        let state = match &q.paused {
            Some(p) => format!(
                "<br><span class=\"bad paused\">paused by {}</span>",
                escape(&p.by)
            ),
            None => String::new(),
        };
        let toggle = match (actions, &q.paused) {
            (false, _) => String::new(),
            (true, None) => form("pause", &[("queue", &q.name)], "Pause on every host"),
            (true, Some(_)) => form("resume", &[("queue", &q.name)], "Resume on every host"),
        };
        let _ = write!(
            page,
            "<tr data-queue=\"{name}\"><td class=\"text\" rowspan=\"2\">{name}<br>\
             <span class=\"muted\">format: {format} · plugin: {plugin}</span>{state}{toggle}</td>\
             <td class=\"text\">this host</td>{}<td class=\"ran\">{}</td><td>{rate}</td>\
             <td class=\"visible\">{}</td><td class=\"in-flight\">{}</td><td class=\"retrying\">{retrying}</td>\
             <td><span class=\"dead-letter-depth\">{}</span> <span class=\"muted\">{dlq}</span></td>\
             <td class=\"text\">{}</td></tr>",
            fate_cells(&q.totals),
            q.ran,
            depth(q.depth.as_ref().map(|d| d.visible)),
            depth(q.depth.as_ref().map(|d| d.in_flight)),
            depth(q.dead_letter_depth),
            sparkline(&q.handled),
            name = escape(&q.name),
            format = q.format,
            plugin = escape(&q.plugin),
            dlq = escape(&q.dead_letter_queue),
        );
        let fleet = q.fleet.as_ref().map_or_else(
            || "<td colspan=\"10\" class=\"muted\">not read yet</td>".to_string(),
            fate_cells,
        );
        let _ = write!(
            page,
            "<tr data-fleet-queue=\"{}\" class=\"fleet-row\"><td class=\"text muted\">all hosts</td>{fleet}\
             <td colspan=\"7\"></td></tr>",
            escape(&q.name)
        );
    }
    let _ = write!(
        page,
        "</table><p class=\"muted legend\">{}</p>",
        escape(crate::stats::Fates::LEGEND)
    );
    retrying_tables(page, queues);
    hour_charts(page, queues);
}

/// The messages this host put back to retry, per queue that has any.
fn retrying_tables(page: &mut String, queues: &[QueueView]) {
    let now = now_ms();
    for q in queues.iter().filter(|q| !q.retrying.is_empty()) {
        let _ = write!(
            page,
            "<h2>Being retried from {}</h2><table class=\"retrying\"><tr><th class=\"text\">message</th>\
             <th class=\"text\">plugin</th><th>attempt</th><th class=\"text\">why</th><th>back in</th></tr>",
            escape(&q.name)
        );
        for r in &q.retrying {
            let _ = write!(
                page,
                "<tr><td class=\"text\"><code>{}</code></td><td class=\"text\">{}</td><td>{}</td>\
                 <td class=\"text\">{}</td><td>{}</td></tr>",
                escape(&r.message_id),
                escape(&r.plugin),
                r.attempt,
                escape(&r.reason),
                age(r.back_at_ms.saturating_sub(now)),
            );
        }
        page.push_str("</table>");
    }
}

/// Each queue's last hour on this host.
fn hour_charts(page: &mut String, queues: &[QueueView]) {
    page.push_str(
        "<h2>Last hour on this host</h2><p class=\"muted\">Messages handled (acked, \
        duplicate or dead-lettered) per minute, kept in memory since the host started.</p>",
    );
    for q in queues {
        let _ = write!(
            page,
            "<div class=\"chart\" data-queue=\"{name}\"><b>{name}</b><br>{}</div>",
            hour_chart(&q.handled_per_minute),
            name = escape(&q.name),
        );
    }
}
