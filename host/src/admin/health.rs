//! Liveness and readiness, as an orchestrator asks for them.
//!
//! A checker task ([`watch`]) asks every consumed queue for its depth (which also feeds the
//! depth gauge an autoscaler reads) and pings the idempotency store, every
//! [`CHECK_INTERVAL`], each call under [`CHECK_TIMEOUT`]. Readiness is then a pure function of
//! what it last saw, the plugin registry and whether the host is draining, so `/readyz` never
//! waits on a backend itself: a probe answers at once even while Redis hangs.
//!
//! - Live (`/healthz`): the checker ran within [`STALLED_AFTER`]. It runs on the same async
//!   runtime as the handlers, so a runtime that stopped scheduling fails this, and a
//!   restart is the cure.
//! - Ready (`/readyz`): not draining; every consumed queue's plugin serves; every queue and
//!   the store answered their last check, within [`STALE_AFTER`]; no queue is stalled: one
//!   whose last check saw messages visible, and that has finished none (no delete confirmed)
//!   for `timeouts.stalled-after-secs`. A restart cures none of these, so they stop traffic
//!   (and scale-in decisions) rather than kill the process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::history::History;
use crate::config::Config;
use crate::faults::Operation;
use crate::idempotency::{IdempotencyError, IdempotencyStore};
use crate::metrics::Metrics;
use crate::plugin::registry::Registry;
use crate::progress::Progress;
use crate::source::{QueueDepth, QueueSource, SourceError};
use crate::stats::Stats;

/// How often the checker asks the queues and the store.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// How long one check may take before it counts as failed.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How old a check's last answer may be before it no longer counts.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(15);
/// How long the checker may go without running before the process is reported not live.
pub(crate) const STALLED_AFTER: Duration = Duration::from_secs(60);
/// The dead-letter queues' depth (for the console) is asked every this many checks: nothing
/// decides on it, so it need not be as fresh as readiness.
const DEAD_LETTER_EVERY: u64 = 5;

/// The last answer of one checked backend.
#[derive(Clone, Debug)]
struct Answer {
    at: Instant,
    result: Result<(), String>,
}

/// What the checker saw, and whether the host is draining.
#[derive(Debug, Default)]
pub(crate) struct Health {
    draining: AtomicBool,
    answers: Mutex<BTreeMap<String, Answer>>,
    ticked: Mutex<Option<Instant>>,
    /// Each consumed queue's progress.
    queues: Mutex<BTreeMap<String, Arc<Progress>>>,
    /// The last depth seen of each consumed queue and of its dead-letter queue, by name.
    depths: Mutex<BTreeMap<String, QueueDepth>>,
    /// Checks so far: the dead-letter queues are asked every [`DEAD_LETTER_EVERY`]th.
    checks: std::sync::atomic::AtomicU64,
    /// Each queue's counters at every check, for the console's rates.
    pub(crate) history: History,
}

impl Health {
    /// Marks the host as draining: not ready from now on.
    pub(crate) fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    fn record(&self, what: String, result: Result<(), String>) {
        let answer = Answer {
            at: Instant::now(),
            result,
        };
        self.answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(what, answer);
    }

    /// Follows `queue`'s progress, from the moment the host starts consuming it.
    pub(crate) fn track(&self, queue: &str, progress: Arc<Progress>) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.insert(queue.to_string(), progress);
    }

    fn saw_depth(&self, queue: &str, depth: QueueDepth) {
        let mut depths = self.depths.lock().unwrap_or_else(|e| e.into_inner());
        depths.insert(queue.to_string(), depth);
    }

    /// The depth `queue` (a consumed queue or a dead-letter queue) had at its last check.
    pub(crate) fn depth(&self, queue: &str) -> Option<QueueDepth> {
        let depths = self.depths.lock().unwrap_or_else(|e| e.into_inner());
        depths.get(queue).copied()
    }

    /// Why each stalled queue is: messages visible at its last check, none finished for `after`.
    fn stalled(&self, after: Duration) -> Vec<String> {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        (queues.iter())
            .filter_map(|(queue, progress)| {
                let visible = self.depth(queue).map_or(0, |d| d.visible);
                let idle = progress.idle_for();
                (visible > 0 && idle > after).then(|| {
                    format!(
                        "queue `{queue}`: stalled: {visible} messages waiting and none finished for {}s (timeouts.stalled-after-secs = {})",
                        idle.as_secs(),
                        after.as_secs()
                    )
                })
            })
            .collect()
    }

    fn tick(&self) {
        *self.ticked.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// `Ok` when live, or why not.
    pub(crate) fn liveness(&self) -> Result<(), String> {
        match *self.ticked.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(at) if at.elapsed() > STALLED_AFTER => Err(format!(
                "the health checker has not run for {}s: the async runtime is stalled",
                at.elapsed().as_secs()
            )),
            _ => Ok(()),
        }
    }

    /// `Ok` when ready to take messages, or every reason it is not.
    pub(crate) fn readiness(&self, config: &Config, plugins: &Registry) -> Result<(), Vec<String>> {
        let mut reasons = Vec::new();
        if self.draining.load(Ordering::Relaxed) {
            reasons.push("draining: shutting down after a signal".to_string());
        }
        for q in &config.queues {
            if plugins.get(&q.plugin).is_none() {
                let why = (plugins.status().into_iter())
                    .find(|s| s.name == q.plugin)
                    .and_then(|s| s.last_error)
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default();
                reasons.push(format!(
                    "queue `{}`: plugin `{}` is not serving{why}",
                    q.name, q.plugin
                ));
            }
        }
        reasons.extend(self.stalled(config.deadlines.stalled_after));
        let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        for what in checked(config) {
            match answers.get(&what) {
                None => reasons.push(format!("{what}: not checked yet")),
                Some(Answer { result: Err(e), .. }) => reasons.push(format!("{what}: {e}")),
                Some(Answer { at, .. }) if at.elapsed() > STALE_AFTER => {
                    reasons.push(format!("{what}: no answer for {}s", at.elapsed().as_secs()))
                }
                Some(_) => {}
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons)
        }
    }
}

/// What the checker asks, by the name readiness reports it under.
fn checked(config: &Config) -> impl Iterator<Item = String> + '_ {
    (config.queues.iter())
        .map(|q| queue_check(&q.name))
        .chain(std::iter::once(STORE_CHECK.to_string()))
}

const STORE_CHECK: &str = "idempotency store";

fn queue_check(name: &str) -> String {
    format!("queue `{name}`")
}

/// What the checker needs.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) config: Arc<Config>,
    pub(crate) source: Arc<dyn QueueSource>,
    pub(crate) store: Arc<dyn IdempotencyStore>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) stats: Arc<Stats>,
}

/// Checks the queues and the store every [`CHECK_INTERVAL`] until `stop`.
pub(crate) async fn watch(health: Arc<Health>, parts: Checked, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(CHECK_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        check_once(&health, &parts).await;
        health.tick();
    }
}

async fn check_once(health: &Health, parts: &Checked) {
    let stats = &parts.stats;
    for q in &parts.config.queues {
        let depth = parts.source.depth(&q.name);
        let checked = answer(
            stats,
            Operation::Depth,
            "depth check",
            SourceError::is_timeout,
            depth,
        );
        let result = checked.await.map(|depth| {
            parts.metrics.set_depth(&q.name, depth);
            health.saw_depth(&q.name, depth);
        });
        health.record(queue_check(&q.name), result);
    }
    health.history.sample(stats);
    let checks = health.checks.fetch_add(1, Ordering::Relaxed);
    if checks.is_multiple_of(DEAD_LETTER_EVERY) {
        for q in &parts.config.queues {
            // Shown, never decided on: a queue that does not answer is left unshown.
            let depth = tokio::time::timeout(CHECK_TIMEOUT, parts.source.depth(&q.dead_letter));
            if let Ok(Ok(depth)) = depth.await {
                health.saw_depth(&q.dead_letter, depth);
            }
        }
    }
    let ping = parts.store.ping();
    let result = answer(
        stats,
        Operation::Ping,
        "ping",
        IdempotencyError::is_timeout,
        ping,
    )
    .await;
    health.record(STORE_CHECK.to_string(), result);
}

/// One check's answer within [`CHECK_TIMEOUT`]; a failure, or no answer, is counted under `op`.
async fn answer<T, E: std::fmt::Display>(
    stats: &Stats,
    op: Operation,
    what: &str,
    timed_out: impl Fn(&E) -> bool,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(CHECK_TIMEOUT, call).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => {
            stats.record_failure(op, timed_out(&e));
            Err(format!("{what} failed: {e}"))
        }
        Err(_) => {
            stats.record_failure(op, true);
            Err(format!("no answer within {}s", CHECK_TIMEOUT.as_secs()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::parse("[[queue]]\nname = \"a\"\nplugin = \"pa\"\n").unwrap()
    }

    #[test]
    fn readiness_lists_every_reason_and_clears_when_all_answer() {
        let (health, config, plugins) = (Health::default(), config(), Registry::default());
        plugins.set_error("pa", "bad magic number".into());
        let reasons = health.readiness(&config, &plugins).unwrap_err();
        assert_eq!(
            reasons,
            [
                "queue `a`: plugin `pa` is not serving: bad magic number",
                "queue `a`: not checked yet",
                "idempotency store: not checked yet",
            ]
        );
        health.record(queue_check("a"), Ok(()));
        health.record(STORE_CHECK.into(), Err("ping failed: refused".into()));
        let reasons = health.readiness(&config, &plugins).unwrap_err();
        assert_eq!(reasons[1..], ["idempotency store: ping failed: refused"]);
        health.set_draining();
        let reasons = health.readiness(&config, &plugins).unwrap_err();
        assert_eq!(reasons[0], "draining: shutting down after a signal");
    }

    #[test]
    fn an_old_answer_does_not_count_and_a_stalled_checker_is_not_live() {
        let (health, config, plugins) = (Health::default(), config(), Registry::default());
        let long_ago = Instant::now() - STALE_AFTER - Duration::from_secs(1);
        for what in checked(&config) {
            health.answers.lock().unwrap().insert(
                what,
                Answer {
                    at: long_ago,
                    result: Ok(()),
                },
            );
        }
        let reasons = health.readiness(&config, &plugins).unwrap_err();
        assert!(
            reasons[1..].iter().all(|r| r.contains("no answer for 16s")),
            "{reasons:?}"
        );
        assert_eq!(health.liveness(), Ok(()), "live before the first check");
        *health.ticked.lock().unwrap() = Some(Instant::now() - STALLED_AFTER * 2);
        assert!(health.liveness().unwrap_err().contains("stalled"));
        health.tick();
        assert_eq!(health.liveness(), Ok(()));
    }

    #[test]
    fn a_queue_with_messages_waiting_and_none_finished_is_stalled_until_one_finishes() {
        let (health, config, plugins) = (Health::default(), config(), Registry::default());
        let after = config.deadlines.stalled_after;
        let progress = Arc::new(Progress::started_ago(after + Duration::from_secs(1)));
        health.track("a", Arc::clone(&progress));
        assert!(health.stalled(after).is_empty(), "nothing seen waiting");
        health.saw_depth(
            "a",
            QueueDepth {
                visible: 40,
                invisible: 0,
            },
        );
        let stalled = "queue `a`: stalled: 40 messages waiting and none finished for 61s (timeouts.stalled-after-secs = 60)";
        assert_eq!(health.stalled(after), [stalled]);
        let reasons = health.readiness(&config, &plugins).unwrap_err();
        assert!(reasons.iter().any(|r| r == stalled), "{reasons:?}");
        progress.finished();
        assert!(health.stalled(after).is_empty(), "a message finished");
        health.saw_depth("a", QueueDepth::default());
        assert!(health.stalled(after).is_empty());
    }
}
