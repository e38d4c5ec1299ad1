//! Claims: work claimed and done in one step (a schedule's tick), its outbox pending until
//! sent and taken over by one caller once overdue; and the store's clock.

use std::time::{Duration, SystemTime};

use super::{Fixture, LONG, cases};
use crate::Claimed;
use qhost_message::Outgoing;

cases! {
    "claims: one of four claims at once wins, and its outbox waits until sent" => claimed_once,
    "claims: an overdue outbox is taken over by one caller" => taken_over_once,
    "claims: a key a run holds is not claimable" => leased_is_taken,
    "claims: the store's clock is the machine's within a second" => clock,
}

async fn claimed_once(f: Fixture) {
    let (k, msg) = (f.key("tick"), Outgoing::new("reminders", "tick"));
    let claim = || f.store.claim(&k, std::slice::from_ref(&msg), LONG);
    let (a, b, c, d) = tokio::join!(claim(), claim(), claim(), claim());
    let answers = [a, b, c, d];
    let won = answers.iter().filter(|a| **a == Ok(Claimed::Won)).count();
    assert_eq!(won, 1, "one of four claims at once wins: {answers:?}");
    let Claimed::Taken { pending_outbox, .. } = f.store.claim(&k, &[], LONG).await.unwrap() else {
        panic!("taken")
    };
    assert_eq!(pending_outbox, [msg], "unsent: a later caller sends it");
    f.store.outbox_sent(&k).await.unwrap();
    assert_eq!(
        f.store.claim(&k, &[], LONG).await.unwrap(),
        Claimed::Taken {
            pending_outbox: Vec::new(),
            pending_for: Duration::ZERO
        }
    );
}

async fn taken_over_once(f: Fixture) {
    let (k, msg) = (f.key("tick"), Outgoing::new("reminders", "tick"));
    assert_eq!(
        f.store
            .claim(&k, std::slice::from_ref(&msg), LONG)
            .await
            .unwrap(),
        Claimed::Won
    );
    let soon = f.store.take_over(&k, LONG).await.unwrap();
    assert_eq!(soon, None, "not pending that long yet");
    // Pending 1.5 s, taken over when pending 1 s: the check that its clock restarted then has
    // a second of slack for a loaded machine's late calls.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = Duration::from_secs(1);
    let (a, b) = tokio::join!(f.store.take_over(&k, after), f.store.take_over(&k, after));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.is_some() != b.is_some(), "one takes it over: {a:?} {b:?}");
    assert_eq!(a.or(b).unwrap(), [msg]);
    assert_eq!(
        f.store.take_over(&k, after).await.unwrap(),
        None,
        "its pending clock restarted"
    );
    f.store.outbox_sent(&k).await.unwrap();
    assert_eq!(
        f.store.take_over(&k, Duration::ZERO).await.unwrap(),
        None,
        "sent"
    );
}

async fn leased_is_taken(f: Fixture) {
    let k = f.key("leased");
    f.grant(&k, LONG).await;
    assert!(
        matches!(
            f.store.claim(&k, &[], LONG).await.unwrap(),
            Claimed::Taken { .. }
        ),
        "a key a run holds is not claimable"
    );
}

async fn clock(f: Fixture) {
    let theirs = f.store.time().await.unwrap();
    let ours = SystemTime::now();
    let apart = (ours.duration_since(theirs)).unwrap_or_else(|e| e.duration());
    assert!(
        apart < Duration::from_secs(1),
        "a store on this machine: {apart:?} apart"
    );
}
