//! Completion: the completed record with its outbox and result value, pending until marked
//! sent; the body's digest; and the dedup window, after which the key is forgotten.

use std::time::Duration;

use super::{Fixture, LONG, cases, eventually};
use crate::{Acquired, Committed, Completion, KeyStatus, Lease};
use qhost_message::Outgoing;

cases! {
    "completion: a completed key is remembered with its outbox pending until sent" => outbox_pending_until_sent,
    "completion: a result value is pending with its completion until carried out" => result_pending,
    "completion: the digest of the body run is kept" => digest_kept,
    "completion: after the dedup window the key is forgotten and runs again" => window_expires,
}

fn completion(lease: Lease) -> Completion {
    Completion {
        lease,
        outbox: vec![],
        result: None,
        window: LONG,
        digest: None,
        state: Default::default(),
    }
}

async fn outbox_pending_until_sent(f: Fixture) {
    let k = f.key("k");
    let lease = f.grant(&k, LONG).await;
    let outbox = vec![
        Outgoing::new("out", "first"),
        Outgoing::new("out", "second"),
    ];
    let done = Completion {
        outbox: outbox.clone(),
        ..completion(lease)
    };
    assert_eq!(
        f.store.complete(&[done]).await.unwrap(),
        vec![Ok(Committed::Pending)]
    );
    assert_eq!(
        f.store.status(&k).await.unwrap(),
        KeyStatus::Completed { pending_outbox: 2 }
    );
    match f.acquire(&k, LONG).await {
        Acquired::Completed {
            pending_outbox,
            pending_for,
            ..
        } => {
            assert_eq!(pending_outbox, outbox, "in order, as committed");
            assert!(pending_for < Duration::from_secs(30), "{pending_for:?}");
        }
        other => panic!("completed, not {other:?}"),
    }
    f.store.outbox_sent(&k).await.unwrap();
    assert_eq!(
        f.store.status(&k).await.unwrap(),
        KeyStatus::Completed { pending_outbox: 0 }
    );
    match f.acquire(&k, LONG).await {
        Acquired::Completed {
            pending_outbox,
            pending_for,
            ..
        } => assert_eq!((pending_outbox.len(), pending_for), (0, Duration::ZERO)),
        other => panic!("completed, not {other:?}"),
    }
}

async fn result_pending(f: Fixture) {
    let k = f.key("k");
    let lease = f.grant(&k, LONG).await;
    let done = Completion {
        result: Some(r#"{"sent": 2}"#.into()),
        ..completion(lease)
    };
    assert_eq!(
        f.store.complete(&[done]).await.unwrap(),
        vec![Ok(Committed::Pending)]
    );
    let pending = |a: Acquired| match a {
        Acquired::Completed { pending_result, .. } => pending_result,
        other => panic!("completed, not {other:?}"),
    };
    let again = pending(f.acquire(&k, LONG).await);
    assert_eq!(again.as_deref(), Some(r#"{"sent": 2}"#));
    f.store.outbox_sent(&k).await.unwrap();
    assert_eq!(pending(f.acquire(&k, LONG).await), None, "carried out");
}

async fn digest_kept(f: Fixture) {
    let k = f.key("k");
    let lease = f.grant(&k, LONG).await;
    let digest = qhost_message::digest::sha256_hex(b"the body");
    let done = Completion {
        digest: Some(digest.clone()),
        ..completion(lease)
    };
    assert_eq!(
        f.store.complete(&[done]).await.unwrap(),
        vec![Ok(Committed::Pending)]
    );
    match f.acquire(&k, LONG).await {
        Acquired::Completed { digest: kept, .. } => assert_eq!(kept, Some(digest)),
        other => panic!("completed, not {other:?}"),
    }
}

async fn window_expires(f: Fixture) {
    let k = f.key("k");
    let lease = f.grant(&k, LONG).await;
    let done = Completion {
        window: Duration::from_millis(300),
        ..completion(lease)
    };
    assert_eq!(
        f.store.complete(&[done]).await.unwrap(),
        vec![Ok(Committed::Pending)]
    );
    assert!(matches!(
        f.acquire(&k, LONG).await,
        Acquired::Completed { .. }
    ));
    let forgotten = eventually(Duration::from_secs(5), || async {
        f.store.status(&k).await.unwrap() == KeyStatus::Unknown
    })
    .await;
    assert!(forgotten, "forgotten after its window");
    // The token a forgotten key starts from is the backend's: Redis forgets it with the record
    // (the key starts again at 1), the embedded store keeps counting. Either keeps the promise
    // that matters, that no token goes back while a lease on the key could still be held: by
    // the end of a window every lease taken before the completion has long lapsed.
    let again = f.grant(&k, LONG).await;
    assert_eq!(again.failures, 0, "a fresh start: {again:?}");
}
