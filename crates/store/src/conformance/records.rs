//! Shared records: replaced whole by compare-and-set, so two writers that read the same record
//! cannot both replace it.

use super::{Fixture, LONG, cases};

cases! {
    "records: a record is replaced only from what it holds" => compare_and_set,
    "records: of two writers from one reading, one replaces it" => one_of_two_writers,
}

async fn compare_and_set(f: Fixture) {
    let (k, s) = (f.key("rollout"), &f.store);
    assert_eq!(s.record(&k).await.unwrap(), None);
    assert!(
        s.swap_record(&k, None, "v1", LONG).await.unwrap(),
        "absent -> v1"
    );
    assert!(
        !s.swap_record(&k, None, "v2", LONG).await.unwrap(),
        "not absent any more"
    );
    assert_eq!(s.record(&k).await.unwrap().as_deref(), Some("v1"));
    assert!(
        !s.swap_record(&k, Some("v0"), "v2", LONG).await.unwrap(),
        "stale"
    );
    assert!(
        s.swap_record(&k, Some("v1"), "v2", LONG).await.unwrap(),
        "v1 -> v2"
    );
    assert_eq!(s.record(&k).await.unwrap().as_deref(), Some("v2"));
    let text = r#"{"a":"{\"quoted\"}","b":[1,2]}"#;
    assert!(s.swap_record(&k, Some("v2"), text, LONG).await.unwrap());
    assert_eq!(
        s.record(&k).await.unwrap().as_deref(),
        Some(text),
        "kept as written"
    );
}

async fn one_of_two_writers(f: Fixture) {
    let (k, s) = (f.key("schedule"), &f.store);
    assert!(s.swap_record(&k, None, "0", LONG).await.unwrap());
    let (a, b) = tokio::join!(
        s.swap_record(&k, Some("0"), "a", LONG),
        s.swap_record(&k, Some("0"), "b", LONG)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a != b, "one of them replaced it: {a} {b}");
    let now = s.record(&k).await.unwrap();
    assert_eq!(now.as_deref(), Some(if a { "a" } else { "b" }));
}
