//! Canary rollout: a new version of a plugin takes a share of keys until its runs show it is as
//! good as the version serving, then takes all of them; or it is rolled back, having lost
//! nothing and used no attempt.
//!
//! Design:
//!
//! - **Which keys.** A message runs on the canary when a stable hash of its plugin name and
//!   idempotency key ([`bucket`], 0 to 99) is under the canary's percent. The hash is the same
//!   on every host and for every delivery, so redeliveries of a key meet the version they first
//!   met and the split holds across a fleet. The key is derived by the serving version's
//!   manifest while a canary runs.
//! - **A failed canary run costs nothing.** When the canary traps, times out, hits its memory
//!   limit, rejects or asks for a retry, the same delivery runs again at once on the serving
//!   version, under the same lease: no redelivery, no attempt used, never dead-lettered by the
//!   canary. Its outbox was never committed (only an ack commits), and its HTTP requests carry
//!   the keys the serving run repeats (`PLUGIN:KEY/http/N`), so an API that honours them drops
//!   the copy. A canary run that acks commits like any run: a canary is not a shadow.
//! - **Fleet-wide state.** Each plugin's rollout is one record in the idempotency store
//!   ([`record`]): which version serves and which is the canary, the share, both versions'
//!   counts, the state and the reason. Hosts change it only by compare-and-set, so counts add
//!   up and two hosts deciding at once produce one decision. Every host's follower ([`follow`])
//!   adds its counts, applies the rules ([`rules`]) and follows the record each tick, so a
//!   decision — a host's or an operator's (`qhost plugins promote|rollback`) — takes effect on
//!   every host within a tick.
//! - **Rolled back stays rolled back.** The file is left where it is; the version is not tried
//!   again by any host until the file changes (another version starts another rollout).

pub(crate) mod by_hand;
pub(crate) mod follow;
pub(crate) mod record;
pub(crate) mod rules;

use std::time::Duration;

use record::{Change, RolloutRecord};

use crate::idempotency::{SharedRecords, StoreResult, records};

/// How long a rollout's record is kept after its last change.
const KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// The store key of `plugin`'s rollout record (one key: one slot on a cluster).
pub(crate) fn key(namespace: &str, plugin: &str) -> String {
    format!("{namespace}:rollout:{{{plugin}}}")
}

/// Where `key` falls for `plugin`, 0 to 99: the same everywhere, for every delivery.
pub(crate) fn bucket(plugin: &str, key: &str) -> u8 {
    (crate::digest::sha256_u64(format!("{plugin}\n{key}").as_bytes()) % 100) as u8
}

/// What the store's errors call a rollout record.
const WHAT: &str = "rollout record";

/// The record at `key`.
pub(crate) async fn read(
    store: &dyn SharedRecords,
    key: &str,
) -> StoreResult<Option<RolloutRecord>> {
    records::read(store, key, WHAT).await
}

/// Applies `change` to the record at `key` by compare-and-set; the record as it is after
/// (changed or not).
pub(crate) async fn change(
    store: &dyn SharedRecords,
    key: &str,
    change: &Change,
) -> StoreResult<Option<RolloutRecord>> {
    let (record, _) =
        records::update(store, key, KEEP, WHAT, |current| change.apply(current)).await?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::local::LocalStore;
    use record::RolloutState;

    #[test]
    fn buckets_spread_keys_and_never_move() {
        let mut under = 0;
        for i in 0..1000 {
            let key = format!("order-{i}");
            assert_eq!(bucket("mail", &key), bucket("mail", &key));
            under += usize::from(bucket("mail", &key) < 20);
        }
        assert!(
            (150..250).contains(&under),
            "about a fifth under 20: {under}"
        );
    }

    #[tokio::test]
    async fn two_writers_that_read_the_same_record_make_one_change_each_in_turn() {
        let store = LocalStore::open(None).unwrap();
        let k = key("ns", "mail");
        let begin = Change::Begin {
            serving: "v1".into(),
            canary: "v2".into(),
            percent: 20,
            now_ms: 1,
        };
        let (a, b) = tokio::join!(change(&store, &k, &begin), change(&store, &k, &begin));
        assert_eq!(a.unwrap(), b.unwrap(), "one rollout, both joined");
        let decide = |state, reason: &str| Change::Decide {
            canary: "v2".into(),
            decision: record::Decision {
                state,
                by: record::DecidedBy::ByHand,
                reason: reason.into(),
            },
            now_ms: 2,
        };
        let promote = decide(RolloutState::Promoted, "a");
        let roll_back = decide(RolloutState::RolledBack, "b");
        let (a, b) = tokio::join!(change(&store, &k, &promote), change(&store, &k, &roll_back));
        let (a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());
        assert_eq!(a, b, "one decision, seen by both");
        assert_ne!(a.state, RolloutState::Canary);
        assert_eq!(read(&store, &k).await.unwrap(), Some(a));
    }
}
