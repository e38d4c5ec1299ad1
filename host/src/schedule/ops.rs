//! The operator's verbs on schedules: list, pause, resume, backfill and fire by hand. They act
//! on the fleet's records in the store, which every host follows within a second; the CLI and
//! the console call these.

use std::sync::Arc;

use anyhow::{Context as _, bail};
use jiff::Timestamp;

use super::clock::FleetClock;
use super::consumer::{self, Consumer};
use super::fire::{Fired, fire};
use super::host_name;
use super::record::{self, Paused, ScheduleRecord};
use super::tick::Tick;
use crate::config::Config;
use crate::config::schedule::{ScheduleConfig, ScheduleTarget};
use crate::host::open::{open_source, open_store};
use crate::message::now_ms;
use crate::source::QueueSource;

/// Ticks one backfill fires at most.
const MAX_BACKFILL: usize = 10_000;

/// A schedule as an operator sees it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScheduleStatus {
    /// Its name.
    pub name: String,
    /// Its cron expression.
    pub cron: String,
    /// Its time zone.
    pub timezone: String,
    /// What a tick sends, in words.
    pub sends: String,
    /// The overlap policy, as written.
    pub overlap: &'static str,
    /// Its next ticks (RFC 3339).
    pub next: Vec<String>,
    /// The fleet's record (`None`: no host has run it yet).
    pub record: Option<ScheduleRecord>,
    /// How far the clock of the host that read this is ahead of the store's, in milliseconds
    /// (negative: behind). Schedules run on the store's clock; this says how far the host
    /// corrects its own.
    pub clock_skew_ms: i64,
}

/// Every schedule of `config` with its record, read on the fleet's clock.
pub async fn list(config: &Config) -> anyhow::Result<Vec<ScheduleStatus>> {
    let store = open_store(config).await?;
    let clock = FleetClock::measure(store.as_ref()).await?;
    let mut out = Vec::new();
    for s in &config.schedules {
        let key = record::key(&config.namespace, &s.name);
        out.push(status(s, record::read(store.as_ref(), &key).await?, &clock));
    }
    Ok(out)
}

/// Schedule `s` as an operator sees it, with its record, at `clock`'s time.
pub(crate) fn status(
    s: &ScheduleConfig,
    record: Option<ScheduleRecord>,
    clock: &FleetClock,
) -> ScheduleStatus {
    let now = clock.now();
    ScheduleStatus {
        name: s.name.clone(),
        cron: s.calendar.cron().to_string(),
        timezone: s.calendar.zone().to_string(),
        sends: sends(s),
        overlap: s.overlap.name(),
        next: (s.calendar.between(now, Timestamp::MAX, 3).iter())
            .map(|t| t.to_string())
            .collect(),
        record,
        clock_skew_ms: clock.skew_ms(),
    }
}

/// What a tick of `s` sends, in words.
fn sends(s: &ScheduleConfig) -> String {
    match &s.target {
        ScheduleTarget::Queue { queue, .. } => format!("a message to {queue}"),
        ScheduleTarget::Celery { task, queue, .. } => format!("Celery task {task} to {queue}"),
    }
}

fn named<'a>(config: &'a Config, name: &str) -> anyhow::Result<&'a ScheduleConfig> {
    config
        .schedules
        .iter()
        .find(|s| s.name == name)
        .with_context(|| {
            let names: Vec<&str> = config.schedules.iter().map(|s| s.name.as_str()).collect();
            format!(
                "no schedule is named `{name}` (configured: {})",
                names.join(", ")
            )
        })
}

/// Pauses schedule `name` on every host: no tick fires until it is resumed.
pub async fn pause(config: &Config, name: &str) -> anyhow::Result<ScheduleRecord> {
    named(config, name)?;
    let store = open_store(config).await?;
    let key = record::key(&config.namespace, name);
    let paused = Paused {
        by: format!("{}@{}", whoami(), host_name()),
        at_ms: now_ms(),
    };
    let (rec, _) = record::update(store.as_ref(), &key, |r| {
        r.paused.is_none() && {
            r.paused = Some(paused.clone());
            true
        }
    })
    .await?;
    Ok(rec)
}

/// What a resume did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumed {
    /// Ticks that fell while it was paused, counted as skipped (a backfill fires them).
    pub skipped: u64,
    /// Whether it was paused.
    pub was_paused: bool,
}

/// Resumes schedule `name` on every host, from now: the ticks that fell while it was paused are
/// counted as skipped, not fired.
pub async fn resume(config: &Config, name: &str) -> anyhow::Result<Resumed> {
    let s = named(config, name)?;
    let store = open_store(config).await?;
    let key = record::key(&config.namespace, name);
    let now = FleetClock::measure(store.as_ref()).await?.now();
    let mut resumed = Resumed {
        skipped: 0,
        was_paused: false,
    };
    record::update(store.as_ref(), &key, |r| {
        let Some(_) = r.paused.take() else {
            return false;
        };
        let from = (r.through.and_then(|t| Timestamp::from_second(t).ok())).unwrap_or(now);
        let skipped = s.calendar.between(from, now, 100_000).len() as u64;
        r.skipped += skipped;
        r.through = Some(now.as_second().max(r.through.unwrap_or(i64::MIN)));
        resumed = Resumed {
            skipped,
            was_paused: true,
        };
        true
    })
    .await?;
    Ok(resumed)
}

/// What a backfill did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backfilled {
    /// The ticks it fired, oldest first.
    pub fired: Vec<String>,
    /// Ticks in the range that had been decided already (fired, or skipped for an overlap).
    pub already: usize,
}

/// Fires the ticks of schedule `name` from `from` to `to` (RFC 3339, both included) that were
/// never fired, each once, oldest first. The range must be within the schedule's remembered
/// ticks (`keep-ticks-secs`) and not in the future.
pub async fn backfill(
    config: &Config,
    name: &str,
    from: &str,
    to: &str,
) -> anyhow::Result<Backfilled> {
    let s = named(config, name)?;
    let time = |text: &str, flag: &str| -> anyhow::Result<Timestamp> {
        text.parse().with_context(|| {
            format!("{flag} `{text}` is not a time: RFC 3339, e.g. 2026-12-01T09:00:00Z")
        })
    };
    let (from, to) = (time(from, "--from")?, time(to, "--to")?);
    let store = open_store(config).await?;
    let clock = FleetClock::measure(store.as_ref()).await?;
    let now = clock.now();
    let oldest = now
        .checked_sub(jiff::SignedDuration::try_from(s.keep_ticks)?)
        .unwrap_or(Timestamp::MIN);
    if from > to || to > now || from < oldest {
        bail!(
            "backfill from {from} to {to}: the range must run forward, end by now ({now}), and start after {oldest} (the ticks kept: keep-ticks-secs = {})",
            s.keep_ticks.as_secs()
        );
    }
    let before = from.checked_sub(jiff::SignedDuration::from_secs(1))?;
    let ticks = s.calendar.between(before, to, MAX_BACKFILL + 1);
    if ticks.len() > MAX_BACKFILL {
        bail!(
            "backfill from {from} to {to} holds more than {MAX_BACKFILL} ticks: backfill a shorter range at a time"
        );
    }
    let source = open_target(config, s).await?;
    let mut done = Backfilled {
        fired: Vec::new(),
        already: 0,
    };
    for t in ticks {
        let tick = Tick::at(name, t);
        match fire(store.as_ref(), source.as_ref(), &config.namespace, s, &tick).await? {
            Fired::Sent | Fired::Resent => done.fired.push(tick.label()),
            Fired::Elsewhere | Fired::Pending => done.already += 1,
        }
    }
    let fired = done.fired.len() as u64;
    let key = record::key(&config.namespace, name);
    let last = done.fired.last().and_then(|l| l.parse::<Timestamp>().ok());
    let host = host_name();
    record::update(store.as_ref(), &key, |r| {
        r.fired += fired;
        if let Some(t) = last {
            r.fired(Tick::at(name, t).fired(&host, &clock));
        }
        fired > 0
    })
    .await?;
    Ok(done)
}

/// Fires one extra tick of schedule `name` now, keyed by this moment: its tick label.
pub async fn fire_now(config: &Config, name: &str) -> anyhow::Result<String> {
    let s = named(config, name)?;
    let store = open_store(config).await?;
    let source = open_target(config, s).await?;
    let clock = FleetClock::measure(store.as_ref()).await?;
    let tick = Tick::by_hand(name, clock.now());
    fire(store.as_ref(), source.as_ref(), &config.namespace, s, &tick).await?;
    let (key, fired) = (
        record::key(&config.namespace, name),
        tick.fired(&host_name(), &clock),
    );
    record::update(store.as_ref(), &key, |r| {
        r.fired += 1;
        r.fired(fired.clone());
        true
    })
    .await?;
    Ok(tick.label())
}

/// The queue backend, with `s`'s target queue.
async fn open_target(config: &Config, s: &ScheduleConfig) -> anyhow::Result<Arc<dyn QueueSource>> {
    Ok(open_source(config, Some(&[s.target.queue()])).await?)
}

/// What `qhost check` says of a schedule: one line, and a problem when there is one.
#[derive(Clone, Debug)]
pub struct ScheduleCheck {
    /// The schedule.
    pub name: String,
    /// What it does, or what is wrong.
    pub line: String,
    /// Whether it is a problem (`qhost run` would start, but its ticks would be dead-lettered).
    pub problem: bool,
}

/// Checks each schedule against the queues and plugins of `config`: a tick's message goes where
/// a consumer here runs it (or to a queue this configuration does not consume).
pub fn check(config: &Config) -> Vec<ScheduleCheck> {
    let now = super::clock::local_now();
    (config.schedules.iter())
        .map(|s| {
            let next = s
                .calendar
                .next_after(now)
                .map_or("never".into(), |t| t.to_string());
            let when = format!(
                "`{}` in {}, next at {next}",
                s.calendar.cron(),
                s.calendar.zone()
            );
            let tick = Tick::at(&s.name, s.calendar.next_after(now).unwrap_or(now));
            let (what, problem) = match consumer::of(config, s, &tick) {
                Consumer::Elsewhere => (format!("sends {} (not consumed here)", sends(s)), false),
                Consumer::Runs { plugin, key, .. } => (
                    format!("sends {}: runs on plugin {plugin}, key {key}", sends(s)),
                    false,
                ),
                Consumer::Refuses(why) => (
                    format!("sends {}, which its queue would not run: {why}", sends(s)),
                    true,
                ),
            };
            ScheduleCheck {
                name: s.name.clone(),
                line: format!("{when}; {what}"),
                problem,
            }
        })
        .collect()
}

fn whoami() -> String {
    std::env::var("USER").unwrap_or_else(|_| "someone".into())
}
