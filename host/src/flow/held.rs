//! A held flow slot: given back when its delivery ends, whatever its fate, by dropping it.
//! Dropping hands the slot to the host's releaser (`pipeline::slot_releases`), which gives
//! back the slots of many deliveries in one store call, so no fate waits for it and a flow
//! limit costs no round trip of its own per message. A release that never arrives (the store
//! down, the host killed) costs the key the slot until it lapses.

use tokio::sync::mpsc::UnboundedSender;

use crate::idempotency::slots::Slot;

/// A slot held until dropped.
#[derive(Debug)]
pub(crate) struct HeldSlot {
    slot: Option<Slot>,
    releases: UnboundedSender<Slot>,
}

impl HeldSlot {
    /// `slot`, handed to `releases` when dropped.
    pub(crate) fn new(releases: UnboundedSender<Slot>, slot: Slot) -> Self {
        HeldSlot {
            slot: Some(slot),
            releases,
        }
    }

    /// The slot, for the heartbeat to extend.
    pub(crate) fn slot(&self) -> Option<&Slot> {
        self.slot.as_ref()
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            // A releaser gone (the host stopping) leaves the slot to lapse.
            let _ = self.releases.send(slot);
        }
    }
}
