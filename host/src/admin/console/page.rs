//! The console page: server-rendered HTML with a little CSS and one small script, which reloads
//! it every few seconds unless the operator is typing or reading a message's details.
//! Everything that comes from a message, a plugin or the configuration goes through
//! [`escape`], so a body holding `<script>` is shown as text; and the page is served with a
//! content security policy that lets only that one script run ([`POLICY`]), so markup that got
//! through anyway would run nothing.

use std::fmt::Write as _;
use std::sync::LazyLock;

use base64::Engine as _;
use sha2::Digest as _;

use super::forms::{READ_ONLY, form};
use super::text::age;
use super::text::escape;
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
pub(crate) fn render(views: &Views<'_>, actions: bool) -> String {
    let mut page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>qhost console</title><style>{STYLE}</style><script>{REFRESH}</script></head><body>\
         <h1>qhost</h1><p class=\"muted\">{} {} on <b>{}</b>, serving qhost:handler@{}. \
         Refreshes every {REFRESH_SECS} s; the same figures are at \
         <a href=\"/api/fleet\">/api/fleet</a>, <a href=\"/api/queues\">/api/queues</a>, \
         <a href=\"/api/plugins\">/api/plugins</a>, <a href=\"/api/schedules\">/api/schedules</a>, \
         <a href=\"/api/flow\">/api/flow</a> and /api/dead-letters?queue=NAME.</p>",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION"),
        escape(&views.fleet.this_host),
        crate::runtime::bindings::WIT_VERSION,
    );
    if !actions {
        let _ = write!(page, "<p class=\"read-only\">{READ_ONLY}</p>");
    }
    fleet_table(&mut page, views.fleet);
    queues_table(&mut page, views.queues, actions);
    plugins_table(&mut page, views.plugins, actions);
    schedules_table(&mut page, views.schedules);
    flow_table(&mut page, views.flow);
    for (queue, letters) in views.dead {
        dead_letters(&mut page, queue, letters, actions);
    }
    page.push_str("</body></html>\n");
    page
}

/// This host's busiest flow keys (no plugin controls flow: no table).
fn flow_table(page: &mut String, keys: &[KeyStatus]) {
    if keys.is_empty() {
        return;
    }
    page.push_str(
        "<h2>Flow keys on this host</h2><table id=\"flow\"><tr><th>plugin</th>\
         <th class=\"text\">key</th><th>running</th><th>waiting</th><th>ms per run</th>\
         <th>runs</th><th>waited for its turn</th><th>fair-share put-backs</th>\
         <th>put back over its limits</th></tr>",
    );
    for k in keys {
        let key = if k.key.is_empty() {
            "<span class=\"muted\">(default flow)</span>".to_string()
        } else {
            format!("<code>{}</code>", escape(&k.key))
        };
        let _ = write!(
            page,
            "<tr><td>{}</td><td class=\"text\">{key}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&k.plugin),
            k.running,
            k.waiting,
            k.run_ms,
            k.counts.runs,
            k.counts.waited,
            k.counts.fair_share,
            k.counts.flow_limited,
        );
    }
    page.push_str("</table>");
}

/// The fleet's schedules (none configured: no table).
fn schedules_table(page: &mut String, schedules: &[ScheduleStatus]) {
    if schedules.is_empty() {
        return;
    }
    let skew = schedules.first().map_or(0, |s| s.clock_skew_ms);
    let _ = write!(
        page,
        "<h2>Schedules</h2><p class=\"muted\" id=\"clock-skew\">This host's clock is \
         {} from the store's; schedules fire on the store's clock.</p>",
        crate::schedule::seconds_text(skew)
    );
    page.push_str(
        "<table id=\"schedules\"><tr><th>schedule</th><th class=\"text\">sends</th>\
         <th class=\"text\">next</th><th class=\"text\">last fired</th><th>fired</th>\
         <th>missed</th><th>skipped</th></tr>",
    );
    for s in schedules {
        let rec = s.record.clone().unwrap_or_default();
        let state = match (&rec.paused, rec.held) {
            (Some(p), _) => format!("<br><span class=\"bad\">paused by {}</span>", escape(&p.by)),
            (None, Some(held)) => format!(
                "<br><span class=\"muted\">holding {}</span>",
                crate::schedule::time_text(held)
            ),
            (None, None) => String::new(),
        };
        let last = rec.last_fired.as_ref().map_or("-".to_string(), |f| {
            format!(
                "{}<br><span class=\"muted\">by {}, sent {} after its tick (that host's clock {})</span>",
                escape(&f.label),
                escape(&f.host),
                crate::schedule::seconds_text(f.lag_ms()),
                crate::schedule::seconds_text(f.skew_ms),
            )
        });
        let _ = write!(
            page,
            "<tr data-schedule=\"{name}\"><td>{name}<br><span class=\"muted\"><code>{cron}</code> \
             {zone}, overlap {overlap}</span>{state}</td><td class=\"text\">{sends}</td>\
             <td class=\"text\">{next}</td><td class=\"text last-fired\">{last}</td>\
             <td class=\"fired\">{}</td><td class=\"missed\">{}</td><td class=\"skipped\">{}</td></tr>",
            rec.fired,
            rec.missed,
            rec.skipped,
            name = escape(&s.name),
            cron = escape(&s.cron),
            zone = escape(&s.timezone),
            overlap = s.overlap,
            sends = escape(&s.sends),
            next = escape(s.next.first().map_or("never", String::as_str)),
        );
    }
    page.push_str("</table>");
}

fn plugins_table(page: &mut String, plugins: &[PluginView], actions: bool) {
    let now = now_ms();
    page.push_str(
        "<h2>Plugins</h2><table id=\"plugins\"><tr><th>plugin</th><th class=\"text\">version</th>\
         <th>loads</th><th class=\"text\">grants</th><th class=\"text\">limits</th>\
         <th>calls</th><th>µs per call (instantiate / call / drop)</th></tr>",
    );
    for p in plugins {
        let loaded = p.loaded_at_ms.map_or(String::new(), |at| {
            format!(
                " <span class=\"muted\">loaded {} ago</span>",
                age(now.saturating_sub(at))
            )
        });
        let version = match (&p.version, &p.last_error) {
            (Some(v), None) => format!("<code class=\"version\">{}</code>{loaded}", escape(v)),
            (Some(v), Some(e)) => format!(
                "<code class=\"version\">{}</code>{loaded}<br><span class=\"bad\">the latest file \
                 did not load: {}</span>",
                escape(v),
                escape(e)
            ),
            (None, e) => format!(
                "<span class=\"bad\">not serving{}</span>",
                e.as_deref()
                    .map(|e| format!(": {}", escape(e)))
                    .unwrap_or_default()
            ),
        };
        let grants = p.grants.as_ref().map_or(String::new(), |g| {
            let list = |label: &str, items: &[String]| {
                if items.is_empty() {
                    String::new()
                } else {
                    format!("{label}: {}<br>", escape(&items.join(", ")))
                }
            };
            let all = [
                list("outbox", &g.outbox_queues),
                list("celery", &g.celery_queues),
                list("http", &g.http_origins),
                list("secrets", &g.secret_settings),
            ]
            .concat();
            if all.is_empty() {
                "none".to_string()
            } else {
                all
            }
        });
        let limits = p.limits.as_ref().map_or(String::new(), |l| {
            let rate = l.rate.as_ref().map_or(String::new(), |r| {
                format!(", rate {}", escape(&r.to_string()))
            });
            format!(
                "timeout {} ms, memory {} MiB, {} attempts{rate}",
                l.timeout_ms, l.memory_mib, l.max_attempts
            )
        });
        let (calls, costs) = p
            .costs
            .as_ref()
            .map_or((String::new(), String::new()), |c| {
                let costs = format!(
                    "{:.0} / {:.0} / {:.0}",
                    c.instantiate_us, c.call_us, c.drop_us
                );
                (c.calls.to_string(), costs)
            });
        let canary = p.canary.as_ref().map_or(String::new(), |c| {
            let decide = if actions {
                let name = [("plugin", p.name.as_str())];
                [
                    form("promote", &name, "Promote"),
                    form("rollback", &name, "Roll back"),
                ]
                .concat()
            } else {
                String::new()
            };
            format!(
                "<br><span class=\"canary\">canary <code>{}</code> on {}% of keys</span>{decide}",
                escape(&c.version),
                c.percent
            )
        });
        let version = format!("{version}{canary}");
        let _ = write!(
            page,
            "<tr data-plugin=\"{name}\"><td>{name}</td><td class=\"text\">{version}</td>\
             <td>{} <span class=\"muted\">({} failed)</span></td><td class=\"text\">{grants}</td>\
             <td class=\"text\">{limits}</td><td>{calls}</td><td>{costs}</td></tr>",
            p.loads,
            p.failed_loads,
            name = escape(&p.name),
        );
    }
    page.push_str("</table>");
}

fn dead_letters(page: &mut String, queue: &str, letters: &[DeadLetter], actions: bool) {
    let _ = write!(page, "<h2>Dead letters from {}</h2>", escape(queue));
    if actions {
        page.push_str(&form(
            "redrive",
            &[("queue", queue), ("message", "")],
            "Redrive all of this queue's dead letters",
        ));
        page.push_str(&form(
            "purge-dead-letters",
            &[("queue", queue)],
            "Purge its dead-letter queue",
        ));
    }
    if letters.is_empty() {
        page.push_str("<p class=\"muted\">None sent by this host since it started.</p>");
        return;
    }
    page.push_str(
        "<table class=\"dead-letters\"><tr><th class=\"text\">message</th><th class=\"text\">\
         reason</th><th>attempts</th><th>age</th><th></th></tr>",
    );
    let now = now_ms();
    for d in letters.iter().take(SHOWN) {
        let attributes: String = (d.attributes.iter())
            .map(|(k, v)| format!("{} = {}\n", escape(k), escape(v)))
            .collect();
        let body = if d.offloaded {
            format!(
                "offloaded ({} bytes here; the payload is not fetched)",
                d.size
            )
        } else {
            format!(
                "{} bytes{}",
                d.size,
                if d.whole { "" } else { ", first 2 KiB shown" }
            )
        };
        let _ = write!(
            page,
            "<tr class=\"dead-letter\"><td class=\"text\"><details><summary><code>{id}</code> \
             <span class=\"muted\">{plugin}</span></summary>\
             <div class=\"muted\">{body}</div><pre class=\"attributes\">{attributes}</pre>\
             <pre class=\"preview\">{preview}</pre></details></td>\
             <td class=\"text reason\">{reason}</td><td>{attempts}</td><td>{age}</td>\
             <td>{redrive}</td></tr>",
            id = escape(&d.message_id),
            plugin = escape(&d.plugin),
            preview = escape(&d.preview),
            reason = escape(&d.reason),
            attempts = d.attempts,
            age = age(now.saturating_sub(d.at_ms)),
            redrive = match (&d.dead_letter_id, actions) {
                (Some(id), true) =>
                    form("redrive", &[("queue", queue), ("message", id)], "Redrive"),
                _ => String::new(),
            },
        );
    }
    page.push_str("</table>");
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
        let page = render(&views, false);
        assert!(!page.contains("Flow keys"), "no flow keys, no table");
        assert!(
            page.contains(READ_ONLY),
            "a read-only page says what a token enables"
        );
        assert!(!render(&views, true).contains(READ_ONLY));
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
        let page = render(&views, false);
        assert!(page.contains("<h2>Flow keys on this host</h2>"), "{page}");
        assert!(page.contains("&lt;b&gt;acme&lt;/b&gt;") && !page.contains("<b>acme"));
        assert!(page.contains("(default flow)"));
    }
}
