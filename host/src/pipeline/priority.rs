//! Priorities between a host's queues (`[[queue]] priority = N`): when slots are contended,
//! a higher-priority queue's messages run first.
//!
//! A queue is *busy* while its receives return messages (for [`BUSY_FOR`] after the last one
//! that did). While a queue of a higher priority is busy, a lower one's poller receives only
//! when more than half the host's in-flight slots are free, and only as many messages as leave
//! half free: the higher queue always finds slots for its next receive, and the lower one is
//! received less rather than not at all. What the lowest priority is guaranteed: whatever the
//! higher queues leave beyond half the slots, and, if they keep every slot busy, one receive
//! after waiting [`MAX_HOLD`], so a saturated high-priority queue slows a low one to a trickle
//! but never stops it. Priorities order queues within one host; a fleet's hosts each keep
//! their own.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a queue counts as busy after a receive that returned messages.
pub(crate) const BUSY_FOR: Duration = Duration::from_secs(2);
/// The longest a lower-priority poller is held back before it receives anyway.
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(5);

/// When each priority's queues last received messages.
#[derive(Debug, Default)]
pub(crate) struct Priorities {
    busy: Mutex<BTreeMap<u32, Instant>>,
}

impl Priorities {
    /// Notes a receive of `received` messages by a queue of `priority`.
    pub(crate) fn received(&self, priority: u32, received: usize) {
        if received > 0 {
            let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
            busy.insert(priority, Instant::now());
        }
    }

    /// Whether a queue of a priority above `priority` is busy.
    pub(crate) fn higher_busy(&self, priority: u32) -> bool {
        let busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        (busy.range(priority + 1..)).any(|(_, &at)| now.duration_since(at) < BUSY_FOR)
    }
}

/// How many slots a lower-priority poller leaves free while a higher queue is busy.
pub(crate) fn reserve(capacity: usize) -> usize {
    capacity / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_busy_queue_of_a_higher_priority_holds_a_poller_back() {
        let p = Priorities::default();
        assert!(!p.higher_busy(0));
        p.received(10, 0);
        assert!(!p.higher_busy(0), "an empty receive is not busy");
        p.received(10, 3);
        assert!(p.higher_busy(0));
        assert!(p.higher_busy(9));
        assert!(!p.higher_busy(10), "not by its own priority");
        assert!(!p.higher_busy(11));
        p.busy.lock().unwrap().insert(10, Instant::now() - BUSY_FOR);
        assert!(
            !p.higher_busy(0),
            "busy only for a while after its last messages"
        );
        assert_eq!(reserve(32), 16);
    }
}
