//! A queue's running heartbeats: the registry its one sweeper reads (`heartbeat` starts,
//! stops and sweeps them). Apart from the queue's context so that the context can hold it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;

use crate::idempotency::Lease;
use crate::idempotency::slots::Slot;

/// One queue's running heartbeats. Dropped with its queue, it ends the sweeper.
#[derive(Debug, Default)]
pub(crate) struct Heartbeats {
    registry: Arc<Registry>,
}

impl Heartbeats {
    pub(super) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.registry.closed.store(true, Ordering::SeqCst);
        self.registry.wake();
    }
}

/// What the queue and its sweeper share.
#[derive(Debug, Default)]
pub(super) struct Registry {
    beating: std::sync::Mutex<Beating>,
    /// Wakes the sweeper: a first beat while it is idle, the last one stopped, the queue gone.
    wake: Notify,
    closed: AtomicBool,
}

#[derive(Debug, Default)]
struct Beating {
    next_id: u64,
    /// Each running beat, with when its next extension is due.
    beats: HashMap<u64, (Instant, Arc<Beat>)>,
    /// The sweeper has been started.
    sweeping: bool,
    /// The sweeper waits for a first beat, with no timer.
    idle: bool,
}

/// One delivery's beat: what an extension needs, and the lock a stop waits on.
#[derive(Debug)]
pub(super) struct Beat {
    pub(super) receipt: String,
    pub(super) lease: Lease,
    pub(super) slot: Option<Slot>,
    pub(super) stopped: AtomicBool,
    /// Held while the store's lease (and flow slot) is being extended.
    pub(super) leasing: Mutex<()>,
    /// Held while the broker's hold (the message's visibility) is being extended.
    pub(super) holding: Mutex<()>,
}

impl Beat {
    pub(super) fn new(receipt: &str, lease: &Lease, slot: Option<&Slot>) -> Self {
        Beat {
            receipt: receipt.to_string(),
            lease: lease.clone(),
            slot: slot.cloned(),
            stopped: AtomicBool::new(false),
            leasing: Mutex::new(()),
            holding: Mutex::new(()),
        }
    }
}

/// What the sweeper needs once a beat is added.
pub(super) enum Sweeper {
    /// It was never started: this is the queue's first beat.
    Start,
    /// It waits idle for a first beat.
    Wake,
    /// It runs, and will see the beat when it is due.
    Running,
}

impl Registry {
    fn beating(&self) -> std::sync::MutexGuard<'_, Beating> {
        // Nothing panics while holding it; a poisoned lock still holds consistent entries.
        self.beating.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `beat`, first due at `due`; its id, and what the sweeper needs.
    pub(super) fn add(&self, due: Instant, beat: Arc<Beat>) -> (u64, Sweeper) {
        let mut beating = self.beating();
        let id = beating.next_id;
        beating.next_id += 1;
        beating.beats.insert(id, (due, beat));
        let started = std::mem::replace(&mut beating.sweeping, true);
        let idle = std::mem::take(&mut beating.idle);
        let sweeper = match (started, idle) {
            (false, _) => Sweeper::Start,
            (true, true) => Sweeper::Wake,
            (true, false) => Sweeper::Running,
        };
        (id, sweeper)
    }

    /// Removes beat `id` (again: nothing). The last one gone, the sweeper is woken to drop its
    /// timer and wait idle.
    pub(super) fn remove(&self, id: u64) {
        let mut beating = self.beating();
        beating.beats.remove(&id);
        let emptied = beating.beats.is_empty() && !beating.idle;
        drop(beating);
        if emptied {
            self.wake();
        }
    }

    /// When the next beat is due; `None`, with the sweeper marked idle, when nothing beats.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let mut beating = self.beating();
        let next = beating.beats.values().map(|(due, _)| *due).min();
        beating.idle = next.is_none();
        next
    }

    /// The beats due by `now`, each next due a `period` later.
    pub(super) fn take_due(&self, now: Instant, period: std::time::Duration) -> Vec<Arc<Beat>> {
        let mut beating = self.beating();
        let due = beating.beats.values_mut().filter(|(due, _)| *due <= now);
        due.map(|(due, beat)| {
            *due = now + period;
            Arc::clone(beat)
        })
        .collect()
    }

    pub(super) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Until the sweeper is woken (a wake while it was busy is kept for its next wait).
    pub(super) async fn woken(&self) {
        self.wake.notified().await;
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Whether nothing beats and the sweeper waits with no timer.
    #[cfg(test)]
    pub(super) fn is_idle(&self) -> bool {
        let beating = self.beating();
        beating.beats.is_empty() && beating.sweeping && beating.idle
    }
}
