//! Leases: one grant per key at a time, fencing tokens that only grow, owner-checked calls, and
//! the count of failed runs.

use std::time::Duration;

use super::{Fixture, LONG, cases};
use crate::{Acquired, Committed, Completion, IdempotencyError, KeyStatus, Released};

cases! {
    "leases: one grant per key while it is leased" => one_grant_per_key,
    "leases: a lapsed owner cannot extend, complete or release the new owner's lease" => lapsed_owner_is_refused,
    "leases: an extended lease outlives its first time to live" => extend_keeps_it,
    "leases: failed runs are counted across leases until given up" => failures_are_counted,
    "leases: a batch answers each key on its own" => batch_answers_each_key,
}

async fn one_grant_per_key(f: Fixture) {
    let k = f.key("k");
    let lease = f.grant(&k, LONG).await;
    assert_eq!(lease.fencing_token, 1, "a new key's first token");
    assert_eq!(lease.failures, 0);
    match f.acquire(&k, LONG).await {
        Acquired::Busy { retry_after } => assert!(
            retry_after > Duration::from_secs(50) && retry_after <= LONG,
            "busy until the lease lapses: {retry_after:?}"
        ),
        other => panic!("a leased key is busy, not {other:?}"),
    }
    let status = f.store.status(&k).await.unwrap();
    assert_eq!(
        status,
        KeyStatus::InProgress {
            owner: lease.owner.clone(),
            fencing_token: 1
        }
    );
}

async fn lapsed_owner_is_refused(f: Fixture) {
    let k = f.key("k");
    let old = f.grant(&k, Duration::from_millis(50)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let new = f.grant(&k, LONG).await;
    assert_eq!(new.fencing_token, old.fencing_token + 1, "tokens grow");
    assert_ne!(new.owner, old.owner);
    let lost = Err(IdempotencyError::LeaseLost(k.clone()));
    assert_eq!(f.store.extend(&old, LONG).await, lost, "extend");
    assert_eq!(
        f.store.release(&old, Released::NotRun).await,
        lost,
        "release"
    );
    let stale = Completion {
        lease: old,
        outbox: vec![qhost_message::Outgoing::new("out", "stale")],
        result: None,
        window: LONG,
        digest: None,
        state: Default::default(),
    };
    let lost_completion = Err(IdempotencyError::LeaseLost(k.clone()));
    assert_eq!(
        f.store.complete(&[stale]).await.unwrap(),
        vec![lost_completion]
    );
    assert!(
        matches!(f.store.status(&k).await.unwrap(), KeyStatus::InProgress { fencing_token: 2, ref owner } if *owner == new.owner),
        "the new owner's lease stands"
    );
    f.store.release(&new, Released::NotRun).await.unwrap();
    assert_eq!(
        f.grant(&k, LONG).await.fencing_token,
        3,
        "released: granted again at once"
    );
}

async fn extend_keeps_it(f: Fixture) {
    // Each extension comes 600 ms before the lease would lapse: slack that a loaded machine's
    // late timer and slow round trip do not use up (at 150 ms of 300, they did).
    let (ttl, every) = (Duration::from_secs(1), Duration::from_millis(400));
    let k = f.key("k");
    let lease = f.grant(&k, ttl).await;
    for _ in 0..3 {
        tokio::time::sleep(every).await;
        f.store.extend(&lease, ttl).await.unwrap();
    }
    assert!(
        matches!(f.acquire(&k, LONG).await, Acquired::Busy { .. }),
        "1.2 s after a 1 s grant, extended, it is still held"
    );
    tokio::time::sleep(ttl + Duration::from_millis(500)).await;
    assert_eq!(
        f.store.extend(&lease, LONG).await,
        Err(IdempotencyError::LeaseLost(k.clone()))
    );
    assert!(
        matches!(f.acquire(&k, LONG).await, Acquired::Granted(_)),
        "lapsed: granted"
    );
}

async fn failures_are_counted(f: Fixture) {
    let k = f.key("k");
    let first = f.grant(&k, LONG).await;
    f.store.release(&first, Released::Failed).await.unwrap();
    let second = f.grant(&k, LONG).await;
    assert_eq!(second.failures, 1);
    f.store.release(&second, Released::NotRun).await.unwrap();
    let third = f.grant(&k, LONG).await;
    assert_eq!(
        third.failures, 1,
        "a put-back without a run uses up nothing"
    );
    f.store.release(&third, Released::Failed).await.unwrap();
    let fourth = f.grant(&k, LONG).await;
    assert_eq!(fourth.failures, 2);
    f.store.release(&fourth, Released::GaveUp).await.unwrap();
    let fifth = f.grant(&k, LONG).await;
    assert_eq!(fifth.failures, 0, "given up: a redriven copy starts afresh");
    assert!(
        fifth.fencing_token > fourth.fencing_token,
        "tokens still grow"
    );
}

async fn batch_answers_each_key(f: Fixture) {
    let (a, b, c) = (f.key("a"), f.key("b"), f.key("c"));
    f.grant(&a, LONG).await;
    let done = f.grant(&c, LONG).await;
    let completion = Completion {
        lease: done,
        outbox: vec![],
        result: None,
        window: LONG,
        digest: None,
        state: Default::default(),
    };
    assert_eq!(
        f.store.complete(&[completion]).await.unwrap(),
        vec![Ok(Committed::Pending)]
    );
    let requests = [
        f.request(&a, LONG),
        f.request(&b, LONG),
        f.request(&c, LONG),
    ];
    let got = f.store.acquire(&requests).await.unwrap();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(matches!(got[0], Ok(Acquired::Busy { .. })), "{got:?}");
    assert!(matches!(got[1], Ok(Acquired::Granted(_))), "{got:?}");
    assert!(matches!(got[2], Ok(Acquired::Completed { .. })), "{got:?}");
}
