//! Holds: a received delivery is held from other consumers; put back, it comes again after its
//! delay (or at once, given back); kept, it stays held past its first hold; left, it comes back
//! when its hold lapses (where holds expire) or when the consumer's connection drops (where
//! they end with it). Each delivery counts.

use std::time::{Duration, Instant};

use super::{Fixture, LONG, cases};

cases! {
    "holds: a delivery put back comes again after its delay, counted" => put_back_after_a_delay,
    "holds: a delivery given back comes again at once" => given_back,
}

cases! {
    EXPIRING:
    "holds: a kept hold outlives its first time, and a lapsed one lets the delivery come back" => kept_and_lapsed,
}

cases! {
    WITH_CONNECTION:
    "holds: a hold outlives its time while the connection lives, and ends with it" => held_while_connected,
}

async fn put_back_after_a_delay(f: Fixture) {
    let q = f.queue().await;
    f.send(&q, &["retry"], None).await;
    let got = f.receive_n(&q, 1, LONG, Duration::from_secs(10)).await;
    let put_back = Instant::now();
    f.source
        .put_back(&q, &got[0].handle, Duration::from_secs(3))
        .await
        .unwrap();
    let early = f.receive(&q, 1, LONG, Duration::from_secs(1)).await;
    assert!(early.is_empty(), "not before its delay");
    let again = f.receive_n(&q, 1, LONG, Duration::from_secs(10)).await;
    let after = put_back.elapsed();
    assert_eq!(again.len(), 1, "it comes again");
    assert!(after >= Duration::from_millis(2900), "after {after:?}");
    assert_eq!(
        (again[0].id.as_str(), again[0].delivery_count),
        (got[0].id.as_str(), 2)
    );
}

async fn given_back(f: Fixture) {
    let q = f.queue().await;
    f.send(&q, &["unrun"], None).await;
    let got = f.receive_n(&q, 1, LONG, Duration::from_secs(10)).await;
    f.source
        .put_back(&q, &got[0].handle, Duration::ZERO)
        .await
        .unwrap();
    let again = f.receive_n(&q, 1, LONG, Duration::from_secs(3)).await;
    assert_eq!(again.len(), 1, "at once, not after the minute's hold");
    assert_eq!(again[0].delivery_count, 2);
}

async fn kept_and_lapsed(f: Fixture) {
    let q = f.queue().await;
    f.send(&q, &["long run"], None).await;
    // Held for 4 s, kept at 1 s for 6 s more: visible again about 7 s after the receive. The
    // margins (3 s to keep it, 2 s to look) hold on a loaded machine.
    let got = f
        .receive_n(&q, 1, Duration::from_secs(4), Duration::from_secs(10))
        .await;
    let received = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    f.source
        .hold(&q, &got[0].handle, Duration::from_secs(6))
        .await
        .unwrap();
    // Five seconds after the receive, past its first hold, it is still held...
    tokio::time::sleep(Duration::from_secs(4)).await;
    let held = f.receive(&q, 1, LONG, Duration::ZERO).await;
    assert!(held.is_empty(), "kept past its first hold");
    // ...and once the kept hold lapses it comes back, its delivery counted.
    let back = f.receive_n(&q, 1, LONG, Duration::from_secs(10)).await;
    assert_eq!(back.len(), 1, "back once the hold lapsed");
    assert!(
        received.elapsed() >= Duration::from_millis(6900),
        "{:?}",
        received.elapsed()
    );
    assert_eq!(back[0].delivery_count, 2);
}

async fn held_while_connected(f: Fixture) {
    let q = f.queue().await;
    f.send(&q, &["long run"], None).await;
    let got = f
        .receive_n(&q, 1, Duration::from_secs(1), Duration::from_secs(10))
        .await;
    assert_eq!(got.len(), 1);
    // Past its hold, with no keeping, it is still held: the connection holds it...
    tokio::time::sleep(Duration::from_secs(2)).await;
    f.source
        .hold(&q, &got[0].handle, Duration::from_secs(1))
        .await
        .unwrap();
    let held = f.receive(&q, 1, LONG, Duration::from_secs(1)).await;
    assert!(held.is_empty(), "held while the connection lives");
    // ...until the connection drops: then it comes back, its delivery counted, and the old
    // handle names nothing.
    f.end_holds(&q).await;
    let back = f.receive_n(&q, 1, LONG, Duration::from_secs(10)).await;
    assert_eq!(back.len(), 1, "back once the connection dropped");
    assert_eq!(
        (back[0].id.as_str(), back[0].delivery_count),
        (got[0].id.as_str(), 2)
    );
    let stale = f.source.settle(&q, &[got[0].handle.clone()]).await.unwrap();
    assert!(
        matches!(stale[0], Err(crate::SourceError::HandleExpired)),
        "{stale:?}"
    );
}
