//! Counters per queue and plugin: what the host did with the messages it received.
//!
//! They feed the summary `qhost run --until-idle` prints, and tests read them to assert what
//! happened (how often a handler ran, how many duplicates were suppressed).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

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
    /// Deliveries put back to be retried.
    pub retried: u64,
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
}

/// Something that happened to one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
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
    /// The message will be retried.
    Retried,
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
}

impl Counts {
    fn apply(&mut self, event: Event) {
        match event {
            Event::Received => self.received += 1,
            Event::Invoked => self.invoked += 1,
            Event::Acked => self.acked += 1,
            Event::Duplicate => self.duplicates += 1,
            Event::Busy => self.busy += 1,
            Event::Retried => self.retried += 1,
            Event::DeadLettered => self.dead_lettered += 1,
            Event::OutboxSent(n) => self.outbox_sent += n,
            Event::Failed => self.failures += 1,
            Event::LostLease => self.lost_leases += 1,
            Event::Released => self.released += 1,
            Event::Conflict => self.conflicts += 1,
        }
    }

    fn add(&mut self, o: &Counts) {
        self.received += o.received;
        self.invoked += o.invoked;
        self.acked += o.acked;
        self.duplicates += o.duplicates;
        self.busy += o.busy;
        self.retried += o.retried;
        self.dead_lettered += o.dead_lettered;
        self.outbox_sent += o.outbox_sent;
        self.failures += o.failures;
        self.lost_leases += o.lost_leases;
        self.released += o.released;
        self.conflicts += o.conflicts;
    }
}

/// Counters by queue, then plugin: nested so that recording (several times per message) looks
/// up by `&str` and allocates only the first time a pair is seen.
#[derive(Debug, Default)]
pub struct Stats {
    counts: Mutex<BTreeMap<String, BTreeMap<String, Counts>>>,
    /// Invocations by plugin, then version: which build handled how much, across reloads.
    versions: Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
}

impl Stats {
    /// Records an event.
    pub fn record(&self, queue: &str, plugin: &str, event: Event) {
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
    pub fn record_invocation(&self, plugin: &str, version: &str) {
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
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEAD: [&str; 11] = [
            "received",
            "ran",
            "acked",
            "duplicate",
            "busy",
            "retried",
            "failed",
            "dead",
            "outbox",
            "released",
            "conflict",
        ];
        write!(f, "{:<16} {:<16}", "queue", "plugin")?;
        for h in HEAD {
            write!(f, " {h:>9}")?;
        }
        writeln!(f)?;
        for ((queue, plugin), c) in self.snapshot() {
            write!(f, "{queue:<16} {plugin:<16}")?;
            let row = [
                c.received,
                c.invoked,
                c.acked,
                c.duplicates,
                c.busy,
                c.retried,
                c.failures,
                c.dead_lettered,
                c.outbox_sent,
                c.released,
                c.conflicts,
            ];
            for n in row {
                write!(f, " {n:>9}")?;
            }
            writeln!(f)?;
        }
        Ok(())
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
}
