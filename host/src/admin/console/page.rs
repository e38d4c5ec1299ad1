//! The console page: server-rendered HTML with a little CSS and one small script, which reloads
//! it every few seconds unless the operator is typing or reading a message's details.
//! It is written in maud, which escapes every value it interpolates (only the page's own
//! constants are marked pre-escaped), so a body holding `<script>` is shown as text; and the
//! page is served with a
//! content security policy that lets only that one script run ([`POLICY`]), so markup that got
//! through anyway would run nothing.

use std::sync::LazyLock;

use base64::Engine as _;
use maud::{DOCTYPE, Markup, PreEscaped, html};
use sha2::Digest as _;

use super::forms::{READ_ONLY, form};
use super::text::age;
use super::views::{FleetView, PluginView, QueueView};
use super::work::{fleet_table, queues_table};
use crate::flow::fair::KeyStatus;
use crate::message::now_ms;
use crate::recent::DeadLetter;
use crate::schedule::ScheduleStatus;

/// Seconds between the page's reloads.
pub(crate) const REFRESH_SECS: u32 = 5;

/// The page's one script: a reload every [`REFRESH_SECS`], skipped while a field has focus or a
/// message's details are open.
const REFRESH: &str = "setInterval(function(){if(!document.querySelector('input:focus,details[open]'))location.reload()},5000)";

/// The content security policy the console is served with: its own script (by hash) and inline
/// style, forms posting to itself, nothing else (no other script, frame, image or connection).
pub(crate) static POLICY: LazyLock<String> = LazyLock::new(|| {
    let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(REFRESH));
    format!(
        "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; \
         img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
});
/// Dead letters shown per queue.
const SHOWN: usize = 10;

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1f23;background:#fafbfc}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.6em 0 .4em}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002}
th,td{padding:.35em .7em;border-bottom:1px solid #e1e4e8;text-align:right;vertical-align:top}
th:first-child,td:first-child,td.text,th.text{text-align:left}
.muted{color:#6a737d}.bad{color:#b31d28}.ok{color:#22863a}
code,pre{font:12px ui-monospace,monospace}pre{white-space:pre-wrap;max-width:60em;margin:.3em 0}
details summary{cursor:pointer}svg{vertical-align:middle}
#queues th,#queues td{padding:.3em .4em;font-size:13px}form{display:inline-block;margin:.2em 0}tr.fleet-row td{border-bottom:2px solid #d1d5da;font-size:12px}
.chart{display:inline-block;margin:0 1.5em 1em 0}
";

/// What the page shows.
pub(crate) struct Views<'a> {
    pub(crate) fleet: &'a FleetView,
    pub(crate) queues: &'a [QueueView],
    pub(crate) plugins: &'a [PluginView],
    pub(crate) schedules: &'a [ScheduleStatus],
    /// This host's busiest flow keys.
    pub(crate) flow: &'a [KeyStatus],
    /// Each queue's recent dead letters.
    pub(crate) dead: &'a [(String, Vec<DeadLetter>)],
}

/// The whole page; with `actions` (an admin token is set) it has the action forms, and
/// without, a line that says what the token would enable.
pub(crate) fn render(views: &Views<'_>, actions: bool) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "qhost console" }
                style { (PreEscaped(STYLE)) }
                script { (PreEscaped(REFRESH)) }
            }
            body {
                h1 { "qhost" }
                p.muted {
                    (env!("CARGO_PKG_NAME")) " " (env!("CARGO_PKG_VERSION")) " on "
                    b { (views.fleet.this_host) }
                    ", serving qhost:handler@" (crate::runtime::WIT_VERSION) ". "
                    "Refreshes every " (REFRESH_SECS) " s; the same figures are at "
                    a href="/api/fleet" { "/api/fleet" } ", "
                    a href="/api/queues" { "/api/queues" } ", "
                    a href="/api/plugins" { "/api/plugins" } ", "
                    a href="/api/schedules" { "/api/schedules" } ", "
                    a href="/api/flow" { "/api/flow" } " and /api/dead-letters?queue=NAME."
                }
                @if !actions { p.read-only { (READ_ONLY) } }
                (fleet_table(views.fleet))
                (queues_table(views.queues, actions))
                (plugins_table(views.plugins, actions))
                (schedules_table(views.schedules))
                (flow_table(views.flow))
                @for (queue, letters) in views.dead {
                    (dead_letters(queue, letters, actions))
                }
            }
        }
    }
}

/// This host's busiest flow keys (no plugin controls flow: no table).
fn flow_table(keys: &[KeyStatus]) -> Markup {
    html! {
        @if !keys.is_empty() {
            h2 { "Flow keys on this host" }
            table #flow {
                tr {
                    th { "plugin" } th.text { "key" } th { "running" } th { "waiting" }
                    th { "ms per run" } th { "runs" } th { "waited for its turn" }
                    th { "fair-share put-backs" } th { "put back over its limits" }
                }
                @for k in keys {
                    tr {
                        td { (k.plugin) }
                        td.text {
                            @if k.key.is_empty() {
                                span.muted { "(default flow)" }
                            } @else {
                                code { (k.key) }
                            }
                        }
                        td { (k.running) } td { (k.waiting) } td { (k.run_ms) }
                        td { (k.counts.runs) } td { (k.counts.waited) }
                        td { (k.counts.fair_share) } td { (k.counts.flow_limited) }
                    }
                }
            }
        }
    }
}

/// The fleet's schedules (none configured: no table).
fn schedules_table(schedules: &[ScheduleStatus]) -> Markup {
    let Some(first) = schedules.first() else {
        return html! {};
    };
    let seconds = crate::schedule::seconds_text;
    html! {
        h2 { "Schedules" }
        p.muted #clock-skew {
            "This host's clock is " (seconds(first.clock_skew_ms))
            " from the store's; schedules fire on the store's clock."
        }
        table #schedules {
            tr {
                th { "schedule" } th.text { "sends" } th.text { "next" } th.text { "last fired" }
                th { "fired" } th { "missed" } th { "skipped" }
            }
            @for s in schedules {
                @let rec = s.record.clone().unwrap_or_default();
                tr data-schedule=(s.name) {
                    td {
                        (s.name) br;
                        span.muted { code { (s.cron) } " " (s.timezone) ", overlap " (s.overlap) }
                        @match (&rec.paused, rec.held) {
                            (Some(p), _) => { br; span.bad { "paused by " (p.by) } }
                            (None, Some(held)) => {
                                br; span.muted { "holding " (crate::schedule::time_text(held)) }
                            }
                            (None, None) => {}
                        }
                    }
                    td.text { (s.sends) }
                    td.text { (s.next.first().map_or("never", String::as_str)) }
                    td.text.last-fired {
                        @match &rec.last_fired {
                            Some(f) => {
                                (f.label) br;
                                span.muted {
                                    "by " (f.host) ", sent " (seconds(f.lag_ms()))
                                    " after its tick (that host's clock " (seconds(f.skew_ms)) ")"
                                }
                            }
                            None => "-",
                        }
                    }
                    td.fired { (rec.fired) }
                    td.missed { (rec.missed) }
                    td.skipped { (rec.skipped) }
                }
            }
        }
    }
}

fn plugins_table(plugins: &[PluginView], actions: bool) -> Markup {
    let now = now_ms();
    html! {
        h2 { "Plugins" }
        table #plugins {
            tr {
                th { "plugin" } th.text { "version" } th { "loads" } th.text { "grants" }
                th.text { "limits" } th { "calls" } th { "µs per call (instantiate / call / drop)" }
            }
            @for p in plugins {
                @let loaded = html! {
                    @if let Some(at) = p.loaded_at_ms {
                        " " span.muted { "loaded " (age(now.saturating_sub(at))) " ago" }
                    }
                };
                tr data-plugin=(p.name) {
                    td { (p.name) }
                    td.text {
                        @match (&p.version, &p.last_error) {
                            (Some(v), error) => {
                                code.version { (v) } (loaded)
                                @if let Some(e) = error {
                                    br; span.bad { "the latest file did not load: " (e) }
                                }
                            }
                            (None, e) => span.bad {
                                "not serving" @if let Some(e) = e { ": " (e) }
                            },
                        }
                        @if let Some(c) = &p.canary {
                            br;
                            span.canary { "canary " code { (c.version) } " on " (c.percent) "% of keys" }
                            @if actions {
                                (form("promote", &[("plugin", p.name.as_str())], "Promote"))
                                (form("rollback", &[("plugin", p.name.as_str())], "Roll back"))
                            }
                        }
                    }
                    td { (p.loads) " " span.muted { "(" (p.failed_loads) " failed)" } }
                    td.text { (grants(p)) }
                    td.text {
                        @if let Some(l) = &p.limits {
                            "timeout " (l.timeout_ms) " ms, memory " (l.memory_mib) " MiB, "
                            (l.max_attempts) " attempts"
                            @if let Some(r) = &l.rate { ", rate " (r) }
                        }
                    }
                    @match &p.costs {
                        Some(c) => {
                            td { (c.calls) }
                            td { (format!("{:.0} / {:.0} / {:.0}", c.instantiate_us, c.call_us, c.drop_us)) }
                        }
                        None => { td {} td {} }
                    }
                }
            }
        }
    }
}

/// What a plugin was granted, a line per kind ("none" for nothing).
fn grants(p: &PluginView) -> Markup {
    let Some(g) = &p.grants else {
        return html! {};
    };
    let kinds = [
        ("outbox", &g.outbox_queues),
        ("celery", &g.celery_queues),
        ("http", &g.http_origins),
        ("secrets", &g.secret_settings),
    ];
    let granted: Vec<_> = kinds
        .iter()
        .filter(|(_, items)| !items.is_empty())
        .collect();
    html! {
        @if granted.is_empty() { "none" }
        @for (label, items) in granted { (label) ": " (items.join(", ")) br; }
    }
}

fn dead_letters(queue: &str, letters: &[DeadLetter], actions: bool) -> Markup {
    let now = now_ms();
    html! {
        h2 { "Dead letters from " (queue) }
        @if actions {
            (form("redrive", &[("queue", queue), ("message", "")], "Redrive all of this queue's dead letters"))
            (form("purge-dead-letters", &[("queue", queue)], "Purge its dead-letter queue"))
        }
        @if letters.is_empty() {
            p.muted { "None sent by this host since it started." }
        } @else {
            table.dead-letters {
                tr {
                    th.text { "message" } th.text { "reason" } th { "attempts" } th { "age" } th {}
                }
                @for d in letters.iter().take(SHOWN) {
                    tr.dead-letter {
                        td.text {
                            details {
                                summary { code { (d.message_id) } " " span.muted { (d.plugin) } }
                                div.muted {
                                    @if d.offloaded {
                                        "offloaded (" (d.size) " bytes here; the payload is not fetched)"
                                    } @else {
                                        (d.size) " bytes" @if !d.whole { ", first 2 KiB shown" }
                                    }
                                }
                                pre.attributes {
                                    @for (k, v) in &d.attributes { (k) " = " (v) "\n" }
                                }
                                pre.preview { (d.preview) }
                            }
                        }
                        td.text.reason { (d.reason) }
                        td { (d.attempts) }
                        td { (age(now.saturating_sub(d.at_ms))) }
                        td {
                            @if let (Some(id), true) = (&d.dead_letter_id, actions) {
                                (form("redrive", &[("queue", queue), ("message", id)], "Redrive"))
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_lets_the_refresh_script_run_and_nothing_else() {
        assert!(
            REFRESH.contains(&format!("{}000", REFRESH_SECS)),
            "the script waits REFRESH_SECS"
        );
        let fleet = FleetView {
            this_host: "h/1".into(),
            hosts: Vec::new(),
        };
        let views = Views {
            fleet: &fleet,
            queues: &[],
            plugins: &[],
            schedules: &[],
            flow: &[],
            dead: &[],
        };
        let page = render(&views, false).into_string();
        assert!(!page.contains("Flow keys"), "no flow keys, no table");
        assert!(
            page.contains(READ_ONLY.0),
            "a read-only page says what a token enables"
        );
        assert!(!render(&views, true).into_string().contains(READ_ONLY.0));
        assert!(page.contains(&format!("<script>{REFRESH}</script>")));
        assert_eq!(page.matches("<script").count(), 1, "one script");
        // The hash of "setInterval(...)" as browsers compute it for the inline script.
        assert!(
            POLICY.starts_with("default-src 'none'; script-src 'sha256-"),
            "{}",
            *POLICY
        );
    }

    #[test]
    fn flow_keys_are_shown_escaped_with_the_default_flow_named() {
        let fleet = FleetView {
            this_host: "h/1".into(),
            hosts: Vec::new(),
        };
        let key = |key: &str| KeyStatus {
            plugin: "sync".into(),
            key: key.into(),
            running: 3,
            waiting: 2,
            run_ms: 120,
            counts: Default::default(),
        };
        let flow = [key("<b>acme</b>"), key("")];
        let views = Views {
            fleet: &fleet,
            queues: &[],
            plugins: &[],
            schedules: &[],
            flow: &flow,
            dead: &[],
        };
        let page = render(&views, false).into_string();
        assert!(page.contains("<h2>Flow keys on this host</h2>"), "{page}");
        assert!(page.contains("&lt;b&gt;acme&lt;/b&gt;") && !page.contains("<b>acme"));
        assert!(page.contains("(default flow)"));
    }
}
