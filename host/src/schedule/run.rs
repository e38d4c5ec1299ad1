//! Each host's scheduler: it wakes at the next tick of any schedule (and at least once a
//! second, to follow a pause), and for each schedule reads the shared record, plans, and fires.
//!
//! Every decision about a tick is a claim of its key: firing claims it with its message, a skip
//! claims it with nothing. So one host decides each tick, whichever hosts find it due, and only
//! the deciding host counts it (`qhost_schedule_ticks_total` is summed across the fleet). The
//! record's watermark only spares hosts from looking at ticks decided long ago; it moves by
//! compare-and-set, and missed ticks are counted by the host whose move passes over them.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use super::clock::FleetClock;
use super::consumer::{self, Consumer};
use super::fire::{FireError, Fired, fire};
use super::plan::plan;
use super::record::{self, ScheduleRecord};
use super::tick::Tick;
use super::{Board, host_name, ops};
use crate::config::Config;
use crate::config::schedule::{Overlap, ScheduleConfig};
use crate::idempotency::{Claimed, KeyStatus, Store};
use crate::metrics::Metrics;
use crate::source::QueueSource;

/// The longest a scheduler sleeps: how soon a host follows a pause, a resume or a record moved
/// by another host.
const MAX_SLEEP: Duration = Duration::from_secs(1);

/// One host's scheduler.
pub(crate) struct Scheduler {
    pub(crate) config: Arc<Config>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) source: Arc<dyn QueueSource>,
    pub(crate) metrics: Arc<Metrics>,
    /// Where each pass posts what it read, for the console.
    pub(crate) board: Arc<Board>,
}

/// One pass over the schedules: who this host is, and the fleet's time as it measured it.
struct Pass<'a> {
    host: &'a str,
    clock: FleetClock,
}

/// What became of a due tick on this host.
enum Decided {
    /// This host fired it (or sent a claimant's message that was left unsent).
    Fired(Fired),
    /// This host skipped it: the previous tick's message was not handled yet.
    Skipped(Busy),
    /// This host held it back until the previous tick's message completes.
    Held,
    /// Another host decided it.
    Elsewhere,
}

/// Why the previous tick's message counts as not handled yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Busy {
    /// Its consumer holds its key's lease: it is running.
    Running,
    /// Nothing has taken it yet, and it was fired within the catch-up window: it waits in the
    /// queue (after an outage, the tick caught up just before this one), or is being retried.
    Waiting,
}

impl Busy {
    /// What a skipped tick's log line says happened.
    fn skipped(self) -> &'static str {
        match self {
            Busy::Running => {
                "tick skipped: the previous tick's message is being handled (overlap = \"skip\")"
            }
            Busy::Waiting => {
                "tick skipped: the previous tick's message was fired but not taken from the queue yet, as when catching up after an outage (overlap = \"skip\")"
            }
        }
    }
}

impl Scheduler {
    /// Runs every schedule of the configuration until `stop`.
    pub(crate) async fn run(self, stop: CancellationToken) {
        if self.config.schedules.is_empty() {
            return;
        }
        let host = host_name();
        let mut skewed = false;
        loop {
            let wait = self.pass(&host, &mut skewed).await;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Follows each schedule once on the fleet's clock; how long to sleep until the next tick
    /// (at most a second).
    async fn pass(&self, host: &str, skewed: &mut bool) -> Duration {
        let clock = match FleetClock::measure(self.store.as_ref()).await {
            Ok(clock) => clock,
            Err(e) => {
                tracing::warn!(error = %e, "schedules: the store does not answer; firing nothing until it does");
                return MAX_SLEEP;
            }
        };
        self.metrics.set_clock_skew(clock.skew().as_secs_f64());
        let (skew, pass) = (clock.skew(), Pass { host, clock });
        for s in &self.config.schedules {
            if skew.unsigned_abs() > s.max_clock_skew {
                if !*skewed {
                    tracing::error!(schedule = %s.name, skew_ms = skew.as_millis(), max_secs = s.max_clock_skew.as_secs(), "this host's clock is too far from the store's: it fires no ticks until it is back (other hosts fire them)");
                }
                *skewed = true;
                continue;
            }
            if std::mem::take(skewed) {
                tracing::info!(
                    skew_ms = skew.as_millis(),
                    "this host's clock is back near the store's: firing again"
                );
            }
            if let Err(e) = self.follow(s, &pass).await {
                tracing::warn!(schedule = %s.name, error = %e, "schedule: could not follow it this pass");
            }
        }
        self.until_next(&clock)
    }

    /// How long until the next tick of any schedule on the fleet's clock, between 10 ms and
    /// [`MAX_SLEEP`].
    fn until_next(&self, clock: &FleetClock) -> Duration {
        let now = clock.now();
        let next = (self.config.schedules.iter())
            .filter_map(|s| s.calendar.next_after(now))
            .min();
        let wait = next.map_or(MAX_SLEEP, |t| {
            Duration::try_from(t.duration_since(now)).unwrap_or(MAX_SLEEP)
        });
        wait.clamp(Duration::from_millis(10), MAX_SLEEP)
    }

    /// Reads schedule `s`'s record, and fires, skips or holds what is due.
    async fn follow(&self, s: &ScheduleConfig, pass: &Pass<'_>) -> Result<(), FireError> {
        let key = record::key(&self.config.namespace, &s.name);
        let now = pass.clock.now();
        let read = record::read(self.store.as_ref(), &key).await?;
        self.board.post(ops::status(s, read.clone(), &pass.clock));
        let mut rec = read.unwrap_or_default();
        let Some(through) = rec.through else {
            self.begin(s, &key, now).await?;
            return Ok(());
        };
        if rec.paused.is_some() {
            return Ok(());
        }
        if let Some(held) = rec.held {
            rec = self.release_held(s, &key, rec.clone(), held, pass).await?;
        }
        let through = Timestamp::from_second(through).unwrap_or(Timestamp::UNIX_EPOCH);
        let plan = plan(&s.calendar, through, now, s.catch_up, s.catch_up_policy);
        if let Some(missed_through) = plan.missed_through {
            self.miss(
                s,
                &key,
                through,
                missed_through,
                &plan.missed_listed,
                plan.missed,
            )
            .await?;
        }
        for t in plan.due {
            let tick = Tick::at(&s.name, t);
            let decided = self.decide(s, &rec, &tick, &pass.clock).await?;
            match self.record_decision(s, &key, &tick, decided, pass).await? {
                Some(next) => rec = next,
                None => return Ok(()), // pending elsewhere: look again on the next pass
            }
        }
        Ok(())
    }

    /// A schedule no host has run yet starts now on the fleet's clock: nothing older is fired.
    async fn begin(&self, s: &ScheduleConfig, key: &str, now: Timestamp) -> Result<(), FireError> {
        let (_, began) = record::update(self.store.as_ref(), key, |r| {
            r.through.is_none() && {
                r.through = Some(now.as_second());
                true
            }
        })
        .await?;
        if began {
            let next = s.calendar.next_after(now).map(|t| t.to_string());
            tracing::info!(schedule = %s.name, cron = s.calendar.cron(), timezone = s.calendar.zone(), from = %now, next = next.as_deref().unwrap_or("never"), "schedule starts");
        }
        Ok(())
    }

    /// Counts the ticks after `through` up to `missed_through` as missed, if the record is still
    /// where this host planned from (else another host has counted them).
    async fn miss(
        &self,
        s: &ScheduleConfig,
        key: &str,
        through: Timestamp,
        missed_through: Timestamp,
        listed: &[i64],
        count: u64,
    ) -> Result<(), FireError> {
        let (_, counted) = record::update(self.store.as_ref(), key, |r| {
            r.through == Some(through.as_second()) && {
                r.through = Some(missed_through.as_second());
                r.miss(count, listed);
                true
            }
        })
        .await?;
        if counted {
            let first = listed.first().and_then(|t| Timestamp::from_second(*t).ok());
            tracing::warn!(schedule = %s.name, missed = count, newest = %missed_through, oldest_listed = ?first.map(|t| t.to_string()), catch_up_secs = s.catch_up.as_secs(), "ticks no host fired in time, older than the catch-up window: not fired (`qhost schedule backfill` fires them)");
            self.metrics.count_ticks(&s.name, "missed", count);
        }
        Ok(())
    }

    /// What to do with due `tick`: fire it, or (the previous tick's message still being
    /// handled) skip it or hold it.
    async fn decide(
        &self,
        s: &ScheduleConfig,
        rec: &ScheduleRecord,
        tick: &Tick,
        clock: &FleetClock,
    ) -> Result<Decided, FireError> {
        let busy = match s.overlap {
            Overlap::Allow => None,
            _ => self.previous_running(s, rec, clock).await?,
        };
        let Some(busy) = busy else {
            let fired = fire(
                self.store.as_ref(),
                self.source.as_ref(),
                &self.config.namespace,
                s,
                tick,
            )
            .await?;
            return Ok(match fired {
                Fired::Elsewhere => Decided::Elsewhere,
                fired => Decided::Fired(fired),
            });
        };
        if s.overlap == Overlap::BufferOne {
            return Ok(Decided::Held);
        }
        // A skip is a claim with nothing to send: one host decides the tick either way.
        let claimed = (self.store)
            .claim(&tick.stored_key(&self.config.namespace), &[], s.keep_ticks)
            .await?;
        Ok(match claimed {
            Claimed::Won => Decided::Skipped(busy),
            Claimed::Taken { .. } => Decided::Elsewhere,
        })
    }

    /// Whether the message of the last tick fired is not handled yet, as far as this host can
    /// tell, and why: its consumer's key is leased, or not yet seen and fired within the
    /// catch-up window (waiting in the queue, or being retried). A consumer that is not qhost
    /// on this configuration cannot be looked at: never busy.
    async fn previous_running(
        &self,
        s: &ScheduleConfig,
        rec: &ScheduleRecord,
        clock: &FleetClock,
    ) -> Result<Option<Busy>, FireError> {
        let Some(last) = &rec.last_fired else {
            return Ok(None);
        };
        let Some(tick) = Tick::of_record(&s.name, last) else {
            return Ok(None);
        };
        let Consumer::Runs { stored, .. } = consumer::of(&self.config, s, &tick) else {
            return Ok(None);
        };
        let since = Duration::from_millis(clock.now_ms().saturating_sub(last.at_ms));
        Ok(match self.store.status(&stored).await? {
            KeyStatus::InProgress { .. } => Some(Busy::Running),
            KeyStatus::Completed { .. } => None,
            KeyStatus::Unknown => (since < s.catch_up).then_some(Busy::Waiting),
        })
    }

    /// Records what became of `tick`; the record after, or `None` when the tick is pending on
    /// another host.
    async fn record_decision(
        &self,
        s: &ScheduleConfig,
        key: &str,
        tick: &Tick,
        decided: Decided,
        pass: &Pass<'_>,
    ) -> Result<Option<ScheduleRecord>, FireError> {
        let t = tick.time().as_second();
        let store = self.store.as_ref();
        let (rec, _) = match decided {
            Decided::Fired(Fired::Pending) => return Ok(None),
            Decided::Fired(how) => {
                // A claimant records its tick after sending it; one that died first left the
                // watermark behind it, and the host that sent its message counts it instead.
                let resent = how == Fired::Resent;
                let fired = tick.fired(pass.host, &pass.clock);
                let out = record::update(store, key, |r| {
                    if resent && r.through >= Some(t) {
                        return false;
                    }
                    r.fired += 1;
                    r.fired(fired.clone());
                    r.through = r.through.max(Some(t));
                    true
                })
                .await?;
                if out.1 {
                    self.fired(s, tick, &how, &pass.clock);
                }
                out
            }
            Decided::Skipped(busy) => {
                tracing::info!(schedule = %s.name, tick = %tick.label(), "{}", busy.skipped());
                self.metrics.count_ticks(&s.name, "skipped", 1);
                record::update(store, key, |r| {
                    r.skipped += 1;
                    r.through = r.through.max(Some(t));
                    true
                })
                .await?
            }
            Decided::Held => self.hold(s, key, t).await?,
            Decided::Elsewhere => {
                record::update(store, key, |r| {
                    r.through < Some(t) && {
                        r.through = Some(t);
                        true
                    }
                })
                .await?
            }
        };
        Ok(Some(rec))
    }

    /// Holds tick `t` back (`buffer-one`), replacing a tick held before, which is skipped.
    async fn hold(
        &self,
        s: &ScheduleConfig,
        key: &str,
        t: i64,
    ) -> Result<(ScheduleRecord, bool), FireError> {
        let mut replaced = None;
        let out = record::update(self.store.as_ref(), key, |r| {
            if r.through >= Some(t) {
                return false;
            }
            replaced = r.held.replace(t);
            r.skipped += u64::from(replaced.is_some());
            r.through = Some(t);
            true
        })
        .await?;
        if out.1 {
            tracing::info!(schedule = %s.name, tick = t, replaced = ?replaced, "tick held until the previous tick's message is handled (overlap = \"buffer-one\")");
            if replaced.is_some() {
                self.metrics.count_ticks(&s.name, "skipped", 1);
            }
        }
        Ok(out)
    }

    /// Fires the held tick once the previous tick's message is handled.
    async fn release_held(
        &self,
        s: &ScheduleConfig,
        key: &str,
        rec: ScheduleRecord,
        held: i64,
        pass: &Pass<'_>,
    ) -> Result<ScheduleRecord, FireError> {
        if self.previous_running(s, &rec, &pass.clock).await?.is_some() {
            return Ok(rec);
        }
        let Ok(at) = Timestamp::from_second(held) else {
            return Ok(rec);
        };
        let tick = Tick::at(&s.name, at);
        let how = fire(
            self.store.as_ref(),
            self.source.as_ref(),
            &self.config.namespace,
            s,
            &tick,
        )
        .await?;
        if how == Fired::Pending {
            return Ok(rec);
        }
        let mine = how != Fired::Elsewhere;
        if mine {
            self.fired(s, &tick, &how, &pass.clock);
        }
        let fired = tick.fired(pass.host, &pass.clock);
        let (rec, _) = record::update(self.store.as_ref(), key, |r| {
            r.held == Some(held) && {
                r.held = None;
                if mine {
                    r.fired += 1;
                    r.fired(fired.clone());
                }
                true
            }
        })
        .await?;
        Ok(rec)
    }

    /// Logs and counts a tick this host fired, with its lag on the fleet's clock.
    fn fired(&self, s: &ScheduleConfig, tick: &Tick, how: &Fired, clock: &FleetClock) {
        let lag = clock.now().duration_since(tick.time());
        let lag_secs = lag.as_secs_f64().max(0.0);
        if *how == Fired::Resent {
            tracing::warn!(schedule = %s.name, tick = %tick.label(), "tick sent for the host that claimed it, which did not send it within 10 s");
        }
        tracing::info!(schedule = %s.name, tick = %tick.label(), queue = s.target.queue(), lag_ms = (lag_secs * 1000.0) as u64, skew_ms = clock.skew().as_millis(), "tick fired");
        self.metrics.count_ticks(&s.name, "fired", 1);
        self.metrics.set_schedule_lag(&s.name, lag_secs);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::idempotency::local::LocalStore;
    use crate::message::find_attribute;
    use crate::plugin::registry::Registry;
    use crate::source::local::LocalQueue;
    use crate::stats::Stats;

    /// Two schedulers on one embedded store and queue (two hosts sharing a data directory), a
    /// schedule every second, real time: each tick is sent once.
    #[tokio::test(flavor = "multi_thread")]
    async fn two_schedulers_on_the_embedded_store_send_each_tick_once() {
        let config = Arc::new(
            Config::parse(
                "[[schedule]]\nname = \"s\"\ncron = \"* * * * * *\"\nqueue = \"ticks\"\nbody = \"tick\"\n",
            )
            .unwrap(),
        );
        let store: Arc<dyn Store> = Arc::new(LocalStore::open(None).unwrap());
        let queue = Arc::new(LocalQueue::open(None, Default::default()).unwrap());
        let stop = CancellationToken::new();
        let registry = Arc::new(Registry::new(Vec::new()));
        for _ in 0..2 {
            let stats = Arc::new(Stats::default());
            let scheduler = Scheduler {
                config: Arc::clone(&config),
                store: Arc::clone(&store),
                source: queue.clone(),
                metrics: Arc::new(Metrics::new(
                    &config,
                    stats,
                    Arc::clone(&registry),
                    crate::flow::FairShares::new(1),
                )),
                board: Arc::default(),
            };
            tokio::spawn(scheduler.run(stop.clone()));
        }
        tokio::time::sleep(Duration::from_millis(4500)).await;
        stop.cancel();
        let got = queue
            .receive("ticks", 10, Duration::from_secs(30), Duration::ZERO)
            .await
            .unwrap();
        let mut per_tick: BTreeMap<String, usize> = BTreeMap::new();
        for m in &got {
            let tick = find_attribute(&m.attributes, "qhost-tick").and_then(|a| a.text());
            *per_tick.entry(tick.unwrap().to_string()).or_default() += 1;
        }
        assert!(per_tick.len() >= 3, "ticks sent: {per_tick:?}");
        assert!(
            per_tick.values().all(|n| *n == 1),
            "each once: {per_tick:?}"
        );
    }
}
