//! Where a plugin's time goes: instantiation, the call itself, and dropping the instance (which
//! resets its pool slot), counted per plugin version.
//!
//! Two clocks read per stage is cheap next to either stage, and the split is what tells a
//! handler author (and a change to the host) whether a message's cost is in setting up an
//! instance or in running it; whatever else an invocation takes is the host's own work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Totals for one plugin version since it was loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Costs {
    /// Instances created (one per message, unless the plugin reuses instances).
    pub instances: u64,
    /// Wall-clock time spent creating them.
    pub instantiate: Duration,
    /// Calls into the guest's `handle` that returned, with a result or a trap (a call cut
    /// off at its deadline is not counted).
    pub calls: u64,
    /// Wall-clock time inside those calls: guest code and the host calls it made.
    pub call: Duration,
    /// Wall-clock time spent dropping finished instances, which resets their pool slots.
    pub drop: Duration,
}

/// The counters behind [`Costs`].
#[derive(Debug, Default)]
pub(crate) struct CostCounters {
    instances: AtomicU64,
    instantiate_ns: AtomicU64,
    calls: AtomicU64,
    call_ns: AtomicU64,
    drop_ns: AtomicU64,
}

impl CostCounters {
    /// Counts one instantiation that started at `started`.
    pub(crate) fn instantiated(&self, started: Instant) {
        self.instances.fetch_add(1, Ordering::Relaxed);
        self.instantiate_ns
            .fetch_add(nanos(started), Ordering::Relaxed);
    }

    /// Counts one call that started at `started`.
    pub(crate) fn called(&self, started: Instant) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.call_ns.fetch_add(nanos(started), Ordering::Relaxed);
    }

    /// Counts the time of one instance's drop that started at `started`.
    pub(crate) fn dropped(&self, started: Instant) {
        self.drop_ns.fetch_add(nanos(started), Ordering::Relaxed);
    }

    /// The totals so far.
    pub(crate) fn snapshot(&self) -> Costs {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Costs {
            instances: load(&self.instances),
            instantiate: Duration::from_nanos(load(&self.instantiate_ns)),
            calls: load(&self.calls),
            call: Duration::from_nanos(load(&self.call_ns)),
            drop: Duration::from_nanos(load(&self.drop_ns)),
        }
    }
}

fn nanos(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_is_counted_with_its_time() {
        let counters = CostCounters::default();
        let long_ago = Instant::now() - Duration::from_millis(5);
        counters.instantiated(long_ago);
        counters.called(long_ago);
        counters.called(Instant::now());
        counters.dropped(long_ago);
        let costs = counters.snapshot();
        assert_eq!((costs.instances, costs.calls), (1, 2));
        assert!(costs.instantiate >= Duration::from_millis(5), "{costs:?}");
        assert!(costs.call >= Duration::from_millis(5), "{costs:?}");
        assert!(costs.drop >= Duration::from_millis(5), "{costs:?}");
    }
}
