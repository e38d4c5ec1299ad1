//! Settling, the queue's depth, and sends the queue's rules refuse.

use std::time::Duration;

use qhost_message::{Attribute, Outgoing};

use super::{Fixture, LONG, bodies, cases};
use crate::SourceError;

cases! {
    "settle: settled deliveries are gone, and the rest stay held" => settled_are_gone,
    "settle: the depth counts what is visible and what is held" => depth_counts,
    "settle: a message the queue's rules refuse is refused for good, and nothing is sent" => refused,
}

async fn settled_are_gone(f: Fixture) {
    let q = f.queue().await;
    f.send(&q, &["a", "b", "c"], None).await;
    let got = f
        .receive_n(&q, 3, Duration::from_secs(2), Duration::from_secs(10))
        .await;
    let mut seen = bodies(&got);
    seen.sort();
    assert_eq!(seen, ["a", "b", "c"]);
    assert!(
        got.iter().all(|m| m.delivery_count == 1),
        "first deliveries"
    );
    let (settled, kept) = got.split_at(2);
    let receipts: Vec<String> = settled.iter().map(|m| m.handle.clone()).collect();
    let answers = f.source.settle(&q, &receipts).await.unwrap();
    assert_eq!(answers.len(), 2);
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    // The one left unsettled comes back once its hold ends (lapses, or its connection drops);
    // the settled never do.
    f.end_holds(&q).await;
    let again = f.receive_n(&q, 1, LONG, Duration::from_secs(10)).await;
    assert_eq!(
        bodies(&again),
        bodies(kept),
        "only the unsettled one comes back"
    );
    assert_eq!(again[0].delivery_count, 2);
    let nothing = f.receive(&q, 10, LONG, Duration::from_secs(3)).await;
    assert!(nothing.is_empty(), "{:?}", bodies(&nothing));
}

async fn depth_counts(f: Fixture) {
    let q = f.queue().await;
    f.send(&q, &["a", "b"], None).await;
    let got = f.receive_n(&q, 1, LONG, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1);
    let depth = f.source.depth(&q).await.unwrap();
    assert_eq!(
        (depth.visible, depth.invisible, depth.total()),
        (1, 1, 2),
        "{depth:?}"
    );
}

async fn refused(f: Fixture) {
    let q = f.queue().await;
    let mut m = Outgoing::new(&q, "too many attributes");
    for i in 0..11 {
        m = m.with_attribute(Attribute::string(format!("a{i}"), "x"));
    }
    let err = f
        .source
        .send(&[m])
        .await
        .expect_err("eleven attributes are refused");
    assert!(matches!(err, SourceError::Refused(_)), "{err:?}");
    assert!(err.is_permanent(), "{err}");
    let depth = f.source.depth(&q).await.unwrap();
    assert_eq!(depth.total(), 0, "nothing was sent: {depth:?}");
}
