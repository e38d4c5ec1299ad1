//! Flow slots: at most N runs of one flow key at once across every host sharing the store
//! (`[flow] max-concurrency = N`, see `crate::flow`).
//!
//! A key's slots are a set of holders, each with an expiry: a slot is a lease on "one of N",
//! extended by the heartbeat with the message's lease and given back when its delivery ends,
//! whatever its fate. A host that dies holding slots leaves them to lapse with their expiry,
//! as its leases do, so a crash costs the key its slots for one lease at most. Taking a slot
//! first drops the holders whose expiry passed, then adds the caller if fewer than N remain:
//! one atomic step (a Redis script on a sorted set scored by expiry; one SQLite transaction
//! in the embedded store, with [`decide`]'s arithmetic).

use std::time::Duration;

/// A request for one of `limit` slots of a flow key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRequest {
    /// The scoped store key of the flow key's slots ([`key`]).
    pub key: String,
    /// How many may hold a slot at once.
    pub limit: u32,
    /// How long the slot is held unless extended (the lease's time to live).
    pub ttl: Duration,
}

/// A slot held: proof of holding, to extend and give back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The scoped store key of the flow key's slots.
    pub key: String,
    /// A token unique to this holder.
    pub holder: String,
}

/// What asking for a slot found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotAnswer {
    /// The caller holds a slot now.
    Held(Slot),
    /// Every slot is held; the earliest lapses within this long (it is usually given back
    /// much sooner, when its run ends).
    Full {
        /// When the earliest-expiring holder's slot lapses, at the latest.
        retry_after: Duration,
    },
}

/// The store key holding the slots of `flow` for `plugin`: one hash slot per plugin and flow
/// key on a Redis Cluster (the braces).
pub fn key(namespace: &str, plugin: &str, flow: &str) -> String {
    format!("{namespace}:slots:{{{plugin}:{flow}}}")
}

/// One take at `now_ms` against the holders' expiries (`held`, live or not): whether a slot
/// is free, or how long until the earliest live one lapses.
pub fn decide(limit: u32, now_ms: u64, held: &[u64]) -> Result<(), Duration> {
    let live = held.iter().filter(|&&until| until > now_ms);
    let earliest = live.clone().min().copied();
    if live.count() < limit as usize {
        return Ok(());
    }
    let earliest = earliest.unwrap_or(now_ms);
    Err(Duration::from_millis(earliest.saturating_sub(now_ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_free_below_the_limit_counting_only_live_holders() {
        assert_eq!(decide(3, 1_000, &[]), Ok(()));
        assert_eq!(decide(3, 1_000, &[2_000, 3_000]), Ok(()));
        assert_eq!(
            decide(2, 1_000, &[2_000, 3_000]),
            Err(Duration::from_millis(1_000))
        );
        // A holder whose expiry passed (a host that died) no longer counts.
        assert_eq!(decide(2, 1_000, &[900, 3_000]), Ok(()));
        assert_eq!(
            decide(1, 1_000, &[900, 3_000, 1_500]),
            Err(Duration::from_millis(500))
        );
    }

    #[test]
    fn slot_keys_share_a_cluster_slot_per_plugin_and_flow() {
        assert_eq!(key("qhost", "sync", "acme"), "qhost:slots:{sync:acme}");
    }
}
