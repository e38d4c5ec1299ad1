//! The fleet: every host sharing an idempotency store, and the decisions they follow together.
//!
//! Two small records in the store (through [`SharedRecords`], as rollouts and schedules keep
//! theirs), each replaced whole by compare-and-set so two hosts writing at once both land:
//!
//! - **The roster** ([`Roster`]): each host writes its own entry once a [`follow::TICK`] — its
//!   process, version, backends, readiness and what it did with the messages it received — and
//!   reads everyone's. A host whose entry is older than [`record::GONE_AFTER`] is *gone* (killed,
//!   partitioned, or its clock far off); one that shut down in order says so (*stopped*).
//!   Entries not written for [`record::FORGET_AFTER`] are dropped by the next writer.
//! - **Pauses** ([`Pauses`]): the queues an operator paused fleet-wide (`qhost fleet pause`, the
//!   console). Each host reads them on the same tick, so a pause reaches every host within a
//!   second: its pollers stop receiving that queue (messages already received finish) until a
//!   resume.
//!
//! One record for the whole roster keeps the store's side to two keys per namespace (one slot
//! each on a cluster) at one write per host per second: right for fleets of tens of hosts.

pub(crate) mod follow;
mod ops;
pub(crate) mod record;

use std::collections::BTreeSet;
use std::sync::Mutex;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use ops::{pause, resume, status};
pub use record::{HostEntry, HostStatus, Liveness, Pause, Pauses, Roster};

/// This host as records name it: its host name and process id.
pub(crate) fn host_name() -> String {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy();
    format!("{name}/{}", std::process::id())
}

/// A host's view of its fleet, as its follower last read it.
#[derive(Debug)]
pub(crate) struct Fleet {
    /// The roster as last read (`None` until the first read).
    roster: Mutex<Option<Roster>>,
    /// The queues paused fleet-wide, as last read (with who paused them)...
    pauses: Mutex<Pauses>,
    /// ...and their names, which pollers watch.
    paused: watch::Sender<BTreeSet<String>>,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet {
            roster: Mutex::new(None),
            pauses: Mutex::new(Pauses::default()),
            paused: watch::Sender::new(BTreeSet::new()),
        }
    }
}

impl Fleet {
    /// The roster as last read.
    pub(crate) fn roster(&self) -> Option<Roster> {
        self.roster
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The queues paused fleet-wide, as last read.
    pub(crate) fn pauses(&self) -> Pauses {
        self.pauses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether `queue` is paused fleet-wide.
    pub(crate) fn is_paused(&self, queue: &str) -> bool {
        self.paused.borrow().contains(queue)
    }

    /// Takes in what the follower read.
    pub(crate) fn set(&self, roster: Option<Roster>, pauses: Option<&Pauses>) {
        *self.roster.lock().unwrap_or_else(|e| e.into_inner()) = roster;
        *self.pauses.lock().unwrap_or_else(|e| e.into_inner()) =
            pauses.cloned().unwrap_or_default();
        let now: BTreeSet<String> =
            pauses.map_or_else(BTreeSet::new, |p| p.queues.keys().cloned().collect());
        self.paused.send_if_modified(|paused| {
            let changed = *paused != now;
            *paused = now;
            changed
        });
    }

    /// Waits while `queue` is paused; `false` when `shutdown` fired first.
    pub(crate) async fn wait_unpaused(&self, queue: &str, shutdown: &CancellationToken) -> bool {
        if !self.is_paused(queue) {
            return true; // every receive asks: the usual answer costs one read of the set
        }
        let mut paused = self.paused.subscribe();
        let mut said = false;
        loop {
            if !paused.borrow_and_update().contains(queue) {
                if said {
                    tracing::info!(%queue, "resumed fleet-wide; receiving again");
                }
                return true;
            }
            if !said {
                tracing::info!(%queue, "paused fleet-wide; not receiving until it is resumed");
                said = true;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                changed = paused.changed() => if changed.is_err() { return true },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_paused_queue_waits_until_it_is_resumed_and_others_do_not() {
        let fleet = Arc::new(Fleet::default());
        let stop = CancellationToken::new();
        let mut pauses = Pauses::default();
        pauses.queues.insert(
            "jobs".into(),
            Pause {
                by: "op".into(),
                at_ms: 1,
            },
        );
        fleet.set(None, Some(&pauses));
        assert!(fleet.is_paused("jobs") && !fleet.is_paused("other"));
        assert!(fleet.wait_unpaused("other", &stop).await);
        let waiting = tokio::spawn({
            let (fleet, stop) = (Arc::clone(&fleet), stop.clone());
            async move { fleet.wait_unpaused("jobs", &stop).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "paused: it waits");
        fleet.set(None, Some(&Pauses::default()));
        assert!(waiting.await.unwrap(), "resumed");

        fleet.set(None, Some(&pauses));
        let waiting = tokio::spawn({
            let (fleet, stop) = (Arc::clone(&fleet), stop.clone());
            async move { fleet.wait_unpaused("jobs", &stop).await }
        });
        stop.cancel();
        assert!(!waiting.await.unwrap(), "shutdown ends the wait");
    }
}
