//! Counters per queue and plugin: what the host did with the messages it received.
//!
//! They feed the summary `qhost run --until-idle` prints and the admin listener's `/metrics`,
//! and tests read them to assert what happened (how often a handler ran, how many duplicates
//! were suppressed). Beside the per-message counts: backend errors by backend, and payload bytes
//! moved through the claim-check stores.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::capture::CaptureCounts;
pub(crate) use crate::faults::Backend;
use crate::faults::{Faults, Operation};
use crate::payload::{PayloadBytes, PayloadFlow};

/// What happened to messages of one queue and plugin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Deliveries received.
    pub received: u64,
    /// Handler invocations (wasm or native).
    pub invoked: u64,
    /// Messages acked after their handler ran.
    pub acked: u64,
    /// Deliveries of completed keys, acked without running the handler.
    pub duplicates: u64,
    /// Deliveries put back because another worker held the key's lease.
    pub busy: u64,
    /// Deliveries put back because the plugin was at its rate limit.
    pub rate_limited: u64,
    /// Deliveries put back because their flow key was at its limit across the fleet
    /// (`max-concurrency` or `rate`): no attempt used.
    pub flow_limited: u64,
    /// Deliveries put back because their flow key held its fair share of the host's slots.
    pub fair_share: u64,
    /// Deliveries put back to be retried after their handler failed or asked for it.
    pub retried: u64,
    /// Deliveries put back without running, because something they need (a store, the queue)
    /// did not answer: no attempt used.
    pub deferred: u64,
    /// Messages sent to the dead-letter queue.
    pub dead_lettered: u64,
    /// Outbox messages sent.
    pub outbox_sent: u64,
    /// Traps, timeouts and memory-limit hits.
    pub failures: u64,
    /// Completions refused because the lease had passed to another worker.
    pub lost_leases: u64,
    /// Messages given back unfinished at shutdown.
    pub released: u64,
    /// Deliveries of a completed key whose body differs from the one that ran.
    pub conflicts: u64,
    /// Celery tasks received after their `expires`, acked without running.
    pub expired: u64,
    /// Messages that held nothing to run (S3's test event), acked.
    pub ignored: u64,
}

/// Something that happened to one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A delivery arrived.
    Received,
    /// The handler was invoked.
    Invoked,
    /// The message was acked after running.
    Acked,
    /// A duplicate was acked without running.
    Duplicate,
    /// The key was leased elsewhere.
    Busy,
    /// Put back: the plugin was at its rate limit.
    RateLimited,
    /// Put back: the flow key was at its fleet-wide concurrency or rate.
    FlowLimited,
    /// Put back: the flow key held its fair share of this host's slots.
    FairShare,
    /// The message will be retried: its handler failed or asked for it.
    Retried,
    /// Put back unrun: a backend it needs did not answer.
    Deferred,
    /// The message was dead-lettered.
    DeadLettered,
    /// This many outbox messages were sent.
    OutboxSent(u64),
    /// The handler failed (trap, timeout, memory).
    Failed,
    /// A completion found the lease gone.
    LostLease,
    /// Given back unfinished at shutdown.
    Released,
    /// A completed key came with another body.
    Conflict,
    /// A Celery task past its expiry, acked without running.
    Expired,
    /// A message that holds nothing to run (S3's test event), acked.
    Ignored,
}

impl Event {
    /// The outcome this event ends a delivery with, as metrics and traces name it; `None` for
    /// events along the way.
    pub(crate) fn outcome(self) -> Option<&'static str> {
        match self {
            Event::Acked => Some("acked"),
            Event::Duplicate => Some("duplicate"),
            Event::Busy => Some("busy"),
            Event::RateLimited => Some("rate_limited"),
            Event::FlowLimited => Some("flow_limited"),
            Event::FairShare => Some("fair_share"),
            Event::Retried => Some("retried"),
            Event::Deferred => Some("deferred"),
            Event::DeadLettered => Some("dead_lettered"),
            Event::Released => Some("released"),
            Event::Expired => Some("expired"),
            Event::Ignored => Some("ignored"),
            Event::LostLease => Some("lease_lost"),
            Event::Received
            | Event::Invoked
            | Event::OutboxSent(_)
            | Event::Failed
            | Event::Conflict => None,
        }
    }
}

impl Counts {
    fn apply(&mut self, event: Event) {
        match event {
            Event::Received => self.received += 1,
            Event::Invoked => self.invoked += 1,
            Event::Acked => self.acked += 1,
            Event::Duplicate => self.duplicates += 1,
            Event::Busy => self.busy += 1,
            Event::RateLimited => self.rate_limited += 1,
            Event::FlowLimited => self.flow_limited += 1,
            Event::FairShare => self.fair_share += 1,
            Event::Retried => self.retried += 1,
            Event::Deferred => self.deferred += 1,
            Event::DeadLettered => self.dead_lettered += 1,
            Event::OutboxSent(n) => self.outbox_sent += n,
            Event::Failed => self.failures += 1,
            Event::LostLease => self.lost_leases += 1,
            Event::Released => self.released += 1,
            Event::Conflict => self.conflicts += 1,
            Event::Expired => self.expired += 1,
            Event::Ignored => self.ignored += 1,
        }
    }

    pub(crate) fn add(&mut self, o: &Counts) {
        self.received += o.received;
        self.invoked += o.invoked;
        self.acked += o.acked;
        self.duplicates += o.duplicates;
        self.expired += o.expired;
        self.ignored += o.ignored;
        self.busy += o.busy;
        self.rate_limited += o.rate_limited;
        self.flow_limited += o.flow_limited;
        self.fair_share += o.fair_share;
        self.retried += o.retried;
        self.deferred += o.deferred;
        self.dead_lettered += o.dead_lettered;
        self.outbox_sent += o.outbox_sent;
        self.failures += o.failures;
        self.lost_leases += o.lost_leases;
        self.released += o.released;
        self.conflicts += o.conflicts;
    }
}

/// Where a queue's received deliveries went: each delivery ends in exactly one of these, so
/// they add up to `received` (what has not ended yet is `running`). Every surface that shows
/// counts (the summary, the console, its API) shows these, with [`Fates::LEGEND`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fates {
    /// Deliveries received.
    pub received: u64,
    /// Ran and finished.
    pub acked: u64,
    /// A key already done: acked without running.
    pub duplicate: u64,
    /// Its key was leased by another worker: put back, it comes again.
    pub busy: u64,
    /// Ran and failed or asked to be retried: it comes again.
    pub retried: u64,
    /// Put back unrun (a backend did not answer, a rate or flow limit): it comes again.
    pub deferred: u64,
    /// Sent to the dead-letter queue.
    pub dead: u64,
    /// Given back unfinished at shutdown, or after its lease passed to another worker.
    pub released: u64,
    /// Nothing to run: an expired Celery task, an S3 test event.
    pub skipped: u64,
    /// Received and not ended yet.
    pub running: u64,
}

impl Fates {
    /// What each column means, in one line.
    pub const LEGEND: &'static str = "received = acked + duplicate + busy + retried + deferred \
        + dead + released + skipped + running. duplicate: done before, not run; busy: leased \
        by another worker, put back; retried: ran, failed or asked, comes again; deferred: put \
        back unrun (a backend down, a rate or flow limit); released: given back at shutdown or after a \
        lost lease; skipped: nothing to run. ran: handler calls; failed: traps, timeouts, \
        memory-limit hits; outbox: messages sent.";

    /// The fates of the deliveries `c` counts.
    pub fn of(c: &Counts) -> Self {
        let mut f = Fates {
            received: c.received,
            acked: c.acked,
            duplicate: c.duplicates,
            busy: c.busy,
            retried: c.retried,
            deferred: c.deferred + c.rate_limited + c.flow_limited + c.fair_share,
            dead: c.dead_lettered,
            released: c.released + c.lost_leases,
            skipped: c.expired + c.ignored,
            running: 0,
        };
        f.running = f.received.saturating_sub(f.ended());
        f
    }

    /// Each fate's name, in the order every surface shows them.
    pub const NAMES: [&'static str; 10] = [
        "received",
        "acked",
        "duplicate",
        "busy",
        "retried",
        "deferred",
        "dead",
        "released",
        "skipped",
        "running",
    ];

    /// Each fate's count, in the order of [`Fates::NAMES`].
    pub fn values(&self) -> [u64; 10] {
        [
            self.received,
            self.acked,
            self.duplicate,
            self.busy,
            self.retried,
            self.deferred,
            self.dead,
            self.released,
            self.skipped,
            self.running,
        ]
    }

    /// Adds `o`'s fates to these.
    pub fn add(&mut self, o: &Fates) {
        self.received += o.received;
        self.acked += o.acked;
        self.duplicate += o.duplicate;
        self.busy += o.busy;
        self.retried += o.retried;
        self.deferred += o.deferred;
        self.dead += o.dead;
        self.released += o.released;
        self.skipped += o.skipped;
        self.running += o.running;
    }

    /// Each queue's fates, summed over its plugins.
    pub fn by_queue(stats: &Stats) -> BTreeMap<String, Fates> {
        let mut out: BTreeMap<String, Fates> = BTreeMap::new();
        for ((queue, _), c) in stats.snapshot() {
            out.entry(queue).or_default().add(&Fates::of(&c));
        }
        out
    }

    /// Deliveries that ended.
    pub fn ended(&self) -> u64 {
        self.acked
            + self.duplicate
            + self.busy
            + self.retried
            + self.deferred
            + self.dead
            + self.released
            + self.skipped
    }
}

/// Counters by queue, then plugin: nested so that recording (several times per message) looks
/// up by `&str` and allocates only the first time a pair is seen.
#[derive(Debug, Default)]
pub struct Stats {
    counts: Mutex<BTreeMap<String, BTreeMap<String, Counts>>>,
    /// Invocations by plugin, then version: which build handled how much, across reloads.
    versions: Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
    /// Failed backend calls, indexed as [`Backend::ALL`].
    backend_errors: [AtomicU64; 3],
    /// The same failures by operation, and when each was last logged.
    faults: Faults,
    /// Payload bytes fetched and stored, shared with the payload stores that move them.
    payload: Arc<PayloadBytes>,
    /// Each capturing queue's counts.
    captures: Mutex<BTreeMap<String, Arc<CaptureCounts>>>,
}

impl Stats {
    /// Records an event.
    pub(crate) fn record(&self, queue: &str, plugin: &str, event: Event) {
        let Ok(mut map) = self.counts.lock() else {
            return;
        };
        if let Some(counts) = map.get_mut(queue).and_then(|p| p.get_mut(plugin)) {
            return counts.apply(event);
        }
        map.entry(queue.to_string())
            .or_default()
            .entry(plugin.to_string())
            .or_default()
            .apply(event);
    }

    /// Counts an invocation of this plugin version.
    pub(crate) fn record_invocation(&self, plugin: &str, version: &str) {
        let Ok(mut map) = self.versions.lock() else {
            return;
        };
        if let Some(n) = map.get_mut(plugin).and_then(|v| v.get_mut(version)) {
            *n += 1;
            return;
        }
        *map.entry(plugin.to_string())
            .or_default()
            .entry(version.to_string())
            .or_default() += 1;
    }

    /// Counts a failed call of `op` (a timeout or another error); `Some(held back)` when it
    /// is the one of its burst to log (see [`crate::faults`]).
    pub(crate) fn record_failure(&self, op: Operation, timed_out: bool) -> Option<u64> {
        self.backend_errors[op.backend() as usize].fetch_add(1, Ordering::Relaxed);
        self.faults.failed(op, timed_out)
    }

    /// Failed calls by operation: (operation, timeouts, other errors), for those that failed.
    pub(crate) fn failures_by_operation(&self) -> Vec<(Operation, u64, u64)> {
        self.faults.counts()
    }

    /// Failed calls to each backend, as [`Backend::ALL`].
    pub(crate) fn backend_errors(&self) -> [(Backend, u64); 3] {
        Backend::ALL.map(|b| (b, self.backend_errors[b as usize].load(Ordering::Relaxed)))
    }

    /// The payload bytes' counters, for the payload stores to count into.
    pub(crate) fn payload(&self) -> Arc<PayloadBytes> {
        Arc::clone(&self.payload)
    }

    /// Payload bytes moved so far that way.
    pub(crate) fn payload_bytes(&self, flow: PayloadFlow) -> u64 {
        self.payload.get(flow)
    }

    /// Counts `queue`'s capture in its metrics.
    pub(crate) fn track_capture(&self, queue: &str, counts: Arc<CaptureCounts>) {
        if let Ok(mut map) = self.captures.lock() {
            map.insert(queue.to_string(), counts);
        }
    }

    /// Each capturing queue's lines: (queue, written, dropped, failed).
    pub(crate) fn captures(&self) -> Vec<(String, u64, u64, u64)> {
        let Ok(map) = self.captures.lock() else {
            return Vec::new();
        };
        (map.iter())
            .map(|(queue, c)| {
                let read = |n: &AtomicU64| n.load(Ordering::Relaxed);
                (
                    queue.clone(),
                    read(&c.written),
                    read(&c.dropped),
                    read(&c.failed),
                )
            })
            .collect()
    }

    /// Invocations of each version of `plugin`.
    pub fn invocations_by_version(&self, plugin: &str) -> BTreeMap<String, u64> {
        self.versions
            .lock()
            .ok()
            .and_then(|m| m.get(plugin).cloned())
            .unwrap_or_default()
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> BTreeMap<(String, String), Counts> {
        let Ok(map) = self.counts.lock() else {
            return BTreeMap::new();
        };
        map.iter()
            .flat_map(|(queue, plugins)| {
                plugins
                    .iter()
                    .map(move |(plugin, c)| ((queue.clone(), plugin.clone()), *c))
            })
            .collect()
    }

    /// All counters added up.
    pub fn total(&self) -> Counts {
        let mut total = Counts::default();
        for c in self.snapshot().values() {
            total.add(c);
        }
        total
    }
}

impl fmt::Display for Stats {
    /// The summary table: per queue and plugin, the fates that add up to `received`, then what
    /// the runs did, then the legend.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const WORK: [&str; 4] = ["ran", "failed", "outbox", "conflict"];
        let rows = self.snapshot();
        if rows.is_empty() {
            return writeln!(f, "nothing was received: every consumed queue was empty");
        }
        write!(f, "{:<16} {:<16}", "queue", "plugin")?;
        for h in Fates::NAMES.iter().chain(&WORK) {
            write!(f, " {h:>9}")?;
        }
        writeln!(f)?;
        for ((queue, plugin), c) in rows {
            write!(f, "{queue:<16} {plugin:<16}")?;
            let work = [c.invoked, c.failures, c.outbox_sent, c.conflicts];
            let row = Fates::of(&c).values().into_iter().chain(work);
            for n in row {
                write!(f, " {n:>9}")?;
            }
            writeln!(f)?;
        }
        writeln!(f, "\n{}", Fates::LEGEND)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_kept_per_queue_and_plugin_and_add_up() {
        let stats = Stats::default();
        for event in [
            Event::Received,
            Event::Invoked,
            Event::Acked,
            Event::OutboxSent(2),
        ] {
            stats.record("q1", "a", event);
        }
        stats.record("q1", "b", Event::Duplicate);
        stats.record("q2", "a", Event::DeadLettered);
        stats.record_invocation("a", "v1");
        stats.record_invocation("a", "v1");
        stats.record_invocation("a", "v2");
        assert_eq!(
            stats
                .invocations_by_version("a")
                .into_iter()
                .collect::<Vec<_>>(),
            [("v1".to_string(), 2), ("v2".to_string(), 1)]
        );
        let snap = stats.snapshot();
        assert_eq!(snap.len(), 3);
        let a = snap[&("q1".to_string(), "a".to_string())];
        assert_eq!(
            (a.received, a.invoked, a.acked, a.outbox_sent),
            (1, 1, 1, 2)
        );
        assert_eq!(snap[&("q1".to_string(), "b".to_string())].duplicates, 1);
        let total = stats.total();
        assert_eq!(
            (total.received, total.duplicates, total.dead_lettered),
            (1, 1, 1)
        );
    }

    /// Every event that ends a delivery lands in exactly one fate, so the fates add up.
    #[test]
    fn every_ending_event_is_one_fate_and_the_fates_add_up_to_received() {
        let ending = [
            Event::Acked,
            Event::Duplicate,
            Event::Busy,
            Event::RateLimited,
            Event::FlowLimited,
            Event::FairShare,
            Event::Retried,
            Event::Deferred,
            Event::DeadLettered,
            Event::LostLease,
            Event::Released,
            Event::Expired,
            Event::Ignored,
        ];
        let along = [
            Event::Invoked,
            Event::OutboxSent(3),
            Event::Failed,
            Event::Conflict,
        ];
        for event in ending {
            assert!(event.outcome().is_some(), "{event:?} ends a delivery");
            let mut c = Counts::default();
            c.apply(Event::Received);
            for e in along {
                c.apply(e);
            }
            c.apply(event);
            let fates = Fates::of(&c);
            assert_eq!((fates.ended(), fates.running), (1, 0), "{event:?}");
        }
        for event in along {
            assert!(event.outcome().is_none(), "{event:?} does not end one");
        }
        let mut c = Counts::default();
        c.apply(Event::Received);
        c.apply(Event::Received);
        c.apply(Event::Duplicate);
        assert_eq!(Fates::of(&c).running, 1, "one not ended yet");
    }

    #[test]
    fn the_summary_shows_fates_that_add_up_and_a_legend() {
        let stats = Stats::default();
        for e in [Event::Received, Event::Received, Event::Received] {
            stats.record("q", "p", e);
        }
        for e in [Event::Invoked, Event::Acked, Event::Duplicate, Event::Busy] {
            stats.record("q", "p", e);
        }
        let text = stats.to_string();
        let mut lines = text.lines();
        let head: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let col = |name: &str| row[head.iter().position(|h| *h == name).unwrap()];
        let sum: u64 = ["acked", "duplicate", "busy", "retried", "deferred", "dead"]
            .iter()
            .chain(&["released", "skipped", "running"])
            .map(|c| col(c).parse::<u64>().unwrap())
            .sum();
        assert_eq!((col("received"), sum), ("3", 3), "{text}");
        assert!(
            text.contains("received = acked + duplicate + busy"),
            "{text}"
        );
    }

    #[test]
    fn backend_errors_and_payload_bytes_are_counted_apart() {
        let stats = Stats::default();
        stats.record_failure(Operation::Acquire, false);
        stats.record_failure(Operation::Complete, true);
        stats.record_failure(Operation::PayloadFetch, false);
        stats.payload().add(PayloadFlow::Fetched, 300_000);
        stats.payload().add(PayloadFlow::Stored, 5);
        stats.payload().add(PayloadFlow::Stored, 7);
        assert_eq!(
            stats.backend_errors(),
            [
                (Backend::Queue, 0),
                (Backend::Idempotency, 2),
                (Backend::Payload, 1)
            ]
        );
        assert_eq!(
            stats.failures_by_operation(),
            [
                (Operation::Acquire, 0, 1),
                (Operation::Complete, 1, 0),
                (Operation::PayloadFetch, 0, 1)
            ]
        );
        assert_eq!(stats.payload_bytes(PayloadFlow::Fetched), 300_000);
        assert_eq!(stats.payload_bytes(PayloadFlow::Stored), 12);
    }
}
