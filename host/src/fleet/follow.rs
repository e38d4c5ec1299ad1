//! Each host's fleet follower: once a [`TICK`] it writes its own roster entry, reads the
//! roster and the pauses, and hands them to its [`Fleet`]; at shutdown it writes a last entry
//! that says it stopped. A store that does not answer is warned about once; the host goes on
//! with what it read last (a pause already in force stays in force).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Fleet;
use super::record::{HostEntry, KEEP, Pauses, Roster, pauses_key, roster_key};
use crate::idempotency::{SharedRecords, StoreResult, records};
use crate::message::now_ms;

/// How often a host writes its entry and reads the fleet's.
pub(crate) const TICK: Duration = Duration::from_secs(1);
/// How long the last write at shutdown may take.
pub(crate) const LAST_WRITE: Duration = Duration::from_secs(2);

/// What the store's errors call the records.
const ROSTER: &str = "fleet roster";
const PAUSES: &str = "fleet pauses";

/// A host's follower.
pub(crate) struct Follower {
    pub(crate) store: Arc<dyn SharedRecords>,
    pub(crate) fleet: Arc<Fleet>,
    pub(crate) namespace: String,
    /// This host's id in the roster.
    pub(crate) id: String,
    /// This host's entry as of now.
    pub(crate) entry: Box<dyn Fn() -> HostEntry + Send + Sync>,
}

impl Follower {
    /// Follows until `stop`, then writes the stopped entry.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => break,
            }
            match self.step(false).await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("fleet records readable again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "could not write or read the fleet's records; going on with what was read last");
                }
                Err(_) => {}
            }
        }
        if tokio::time::timeout(LAST_WRITE, self.step(true))
            .await
            .is_err()
        {
            tracing::debug!("the last fleet entry was not written in time");
        }
    }

    /// Writes this host's entry, reads the fleet's records and hands them on.
    async fn step(&self, stopped: bool) -> StoreResult<()> {
        let entry = HostEntry {
            stopped,
            ..(self.entry)()
        };
        let now = entry.seen_ms;
        let key = roster_key(&self.namespace);
        let (roster, _) =
            records::update(&*self.store, &key, KEEP, ROSTER, |r: Option<&Roster>| {
                Some(
                    r.cloned()
                        .unwrap_or_default()
                        .with(&self.id, entry.clone(), now),
                )
            })
            .await?;
        let pauses: Option<Pauses> =
            records::read(&*self.store, &pauses_key(&self.namespace), PAUSES).await?;
        self.fleet.set(roster, pauses.as_ref());
        Ok(())
    }
}

/// The fleet's records as they are now: (roster, pauses).
pub(crate) async fn read(
    store: &dyn SharedRecords,
    namespace: &str,
) -> StoreResult<(Roster, Pauses)> {
    let roster = records::read(store, &roster_key(namespace), ROSTER).await?;
    let pauses = records::read(store, &pauses_key(namespace), PAUSES).await?;
    Ok((roster.unwrap_or_default(), pauses.unwrap_or_default()))
}

/// Sets whether `queue` is paused, by `by`; whether this call changed it.
pub(crate) async fn set_paused(
    store: &dyn SharedRecords,
    namespace: &str,
    queue: &str,
    paused: bool,
    by: &str,
) -> StoreResult<bool> {
    let key = pauses_key(namespace);
    let (_, changed) = records::update(store, &key, KEEP, PAUSES, |p: Option<&Pauses>| {
        let mut p = p.cloned().unwrap_or_default();
        let was = p.queues.contains_key(queue);
        match (paused, was) {
            (true, false) => {
                let at_ms = now_ms();
                p.queues.insert(
                    queue.to_string(),
                    super::Pause {
                        by: by.to_string(),
                        at_ms,
                    },
                );
            }
            (false, true) => {
                p.queues.remove(queue);
            }
            _ => return None,
        }
        Some(p)
    })
    .await?;
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::local::LocalStore;

    #[tokio::test]
    async fn two_hosts_see_each_other_and_a_pause_reaches_both() {
        let store: Arc<dyn SharedRecords> = Arc::new(LocalStore::open(None).unwrap());
        let follower = |id: &str| Follower {
            store: Arc::clone(&store),
            fleet: Arc::new(Fleet::default()),
            namespace: "ns".into(),
            id: id.into(),
            entry: Box::new(|| HostEntry {
                seen_ms: now_ms(),
                ..HostEntry::default()
            }),
        };
        let (a, b) = (follower("a"), follower("b"));
        a.step(false).await.unwrap();
        b.step(false).await.unwrap();
        assert!(set_paused(&*store, "ns", "jobs", true, "op").await.unwrap());
        assert!(
            !set_paused(&*store, "ns", "jobs", true, "op").await.unwrap(),
            "already"
        );
        a.step(false).await.unwrap();
        let roster = a.fleet.roster().unwrap();
        assert_eq!(roster.hosts.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert!(
            a.fleet.is_paused("jobs") && !b.fleet.is_paused("jobs"),
            "b reads next tick"
        );
        b.step(true).await.unwrap();
        assert!(b.fleet.is_paused("jobs"));
        let (roster, pauses) = read(&*store, "ns").await.unwrap();
        assert!(roster.hosts["b"].stopped && pauses.queues["jobs"].by == "op");
        assert!(
            set_paused(&*store, "ns", "jobs", false, "op")
                .await
                .unwrap()
        );
        a.step(false).await.unwrap();
        assert!(!a.fleet.is_paused("jobs"));
    }
}
