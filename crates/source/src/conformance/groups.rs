//! Ordering groups: on a FIFO queue, a group's messages come in the order sent, and none of a
//! group comes while an earlier one of it is held; other groups go on meanwhile.

use std::time::Duration;

use super::{Fixture, LONG, bodies, cases};

cases! {
    "groups: a group's messages come in order, one group held back while another goes on" => in_order_per_group,
}

async fn in_order_per_group(f: Fixture) {
    let q = f.fifo_queue().await;
    f.send(&q, &["a1", "a2"], Some("a")).await;
    f.send(&q, &["b1"], Some("b")).await;
    let first = f.receive_n(&q, 1, LONG, Duration::from_secs(10)).await;
    assert_eq!(bodies(&first), ["a1"], "the first sent comes first");
    assert_eq!(first[0].group_id.as_deref(), Some("a"));
    // While a1 is held, a2 does not come; b1 does.
    let others = f.receive(&q, 10, LONG, Duration::from_secs(2)).await;
    assert_eq!(bodies(&others), ["b1"], "group a waits for a1");
    let settled = f
        .source
        .settle(&q, &[first[0].handle.clone()])
        .await
        .unwrap();
    assert!(settled[0].is_ok(), "{settled:?}");
    let next = f.receive_n(&q, 1, LONG, Duration::from_secs(10)).await;
    assert_eq!(bodies(&next), ["a2"], "then a2");
}
