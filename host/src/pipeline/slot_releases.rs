//! Giving flow slots back in batches: each ended delivery's slot (`flow::HeldSlot`) comes here
//! and is released with the others that came within a short linger, in one store call. Once
//! it is back, the key's line of waiting messages on this host is woken (`waiting`): its
//! turn has come.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::gather::gather;
use super::turns::WaitLines;
use crate::faults::Operation;
use crate::idempotency::FlowSlots;
use crate::idempotency::slots::Slot;
use crate::stats::Stats;

/// The most slots one call gives back.
const MAX_BATCH: usize = 100;
/// How long a release waits for others to go with it.
const LINGER: Duration = Duration::from_millis(1);

/// Where held slots go when their deliveries end.
#[derive(Clone, Debug)]
pub(crate) struct SlotReleases {
    tx: mpsc::UnboundedSender<Slot>,
}

impl SlotReleases {
    /// Starts releasing into `store`, counting failures in `stats` and waking the `lines` of
    /// the keys given slots back; the task ends when every sender has gone.
    pub(crate) fn spawn(
        store: Arc<dyn FlowSlots>,
        stats: Arc<Stats>,
        lines: Arc<WaitLines>,
    ) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let batch = gather(first, &mut rx, MAX_BATCH, LINGER).await;
                release(store.as_ref(), &stats, &batch).await;
                // Even after a failed call: a line asks the store, which knows.
                for slot in &batch {
                    lines.wake(&slot.key);
                }
            }
        });
        SlotReleases { tx }
    }

    /// A sender for one held slot.
    pub(crate) fn sender(&self) -> mpsc::UnboundedSender<Slot> {
        self.tx.clone()
    }
}

/// Gives `batch` back; slots a failed call did not release lapse with their time to live.
async fn release(store: &dyn FlowSlots, stats: &Stats, batch: &[Slot]) {
    if let Err(e) = store.release_slots(batch).await
        && let Some(held_back) = stats.record_failure(Operation::Release, e.is_timeout())
    {
        tracing::warn!(slots = batch.len(), error = %e, held_back, "could not give flow slots back; they lapse with their leases");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::HeldSlot;
    use crate::idempotency::local::LocalStore;
    use crate::idempotency::slots::{SlotAnswer, SlotRequest};

    #[tokio::test]
    async fn dropped_slots_are_given_back_together() {
        let store = Arc::new(LocalStore::open(None).unwrap());
        let request = SlotRequest {
            key: "s:{p:k}".into(),
            limit: 10,
            ttl: Duration::from_secs(30),
        };
        let (_, taken) = store
            .acquire_with_slots(&[], &vec![request; 4])
            .await
            .unwrap();
        let lines = WaitLines::new(crate::pipeline::LineParts {
            capacity: 1,
            store: store.clone(),
            fair: crate::flow::FairShares::new(1),
            in_flight: Arc::new(tokio::sync::Semaphore::new(1)),
            abandon: Default::default(),
            tasks: Default::default(),
        });
        let releases = SlotReleases::spawn(store.clone(), Arc::default(), lines);
        let held: Vec<HeldSlot> = (taken.into_iter())
            .map(|t| match t.unwrap() {
                SlotAnswer::Held(slot) => HeldSlot::new(releases.sender(), slot),
                full => panic!("{full:?}"),
            })
            .collect();
        assert_eq!(store.slots_held("s:{p:k}").await.unwrap(), 4);
        drop(held);
        for _ in 0..100 {
            if store.slots_held("s:{p:k}").await.unwrap() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the slots were not given back");
    }
}
