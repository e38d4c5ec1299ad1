//! The NATS JetStream source against the machine's nats-server (`QHOST_NATS_URL`, by default
//! `nats://127.0.0.1:4222`): each test's streams have names of their own, deleted after it.

#![allow(
    clippy::unwrap_used,
    reason = "a test: a call that fails fails the test, with the error"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use qhost_message::{Attribute, Outgoing};
use qhost_source::conformance::{NewQueue, assert_conforms};
use qhost_source::{QueueSource as _, SourceError};
use qhost_source_nats::{NatsQueue, NatsSettings};

fn url() -> String {
    std::env::var("QHOST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// A stream name no other test uses.
fn unique(name: &str) -> String {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("qhost_test_{name}_{}", &tag[..8])
}

async fn source() -> Arc<NatsQueue> {
    Arc::new(NatsQueue::connect(NatsSettings::new(&url())).await.unwrap())
}

/// Deletes `streams`, with their dead-letter streams.
async fn delete(source: &NatsQueue, streams: &[String]) {
    for s in streams {
        for name in [s.clone(), format!("{s}-dlq")] {
            if let Err(e) = source.delete_stream(&name).await {
                eprintln!("could not delete stream {name}: {e}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn jetstream_conforms_to_the_source_contract() {
    let source = source().await;
    let made = Arc::new(Mutex::new(Vec::new()));
    let new_queue: NewQueue = Arc::new({
        let (source, made) = (Arc::clone(&source), Arc::clone(&made));
        move |name: String, _fifo: bool| {
            let (source, made) = (Arc::clone(&source), Arc::clone(&made));
            Box::pin(async move {
                let q = unique(&name.replace([' ', ':', ',', '.'], "_")[..12.min(name.len())]);
                source.prepare(&q, &format!("{q}-dlq")).await.unwrap();
                made.lock().unwrap().push(q.clone());
                q
            })
        }
    });
    let outcome = tokio::spawn({
        let source = Arc::clone(&source);
        async move { assert_conforms(source, new_queue, "NATS JetStream").await }
    })
    .await;
    let streams = made.lock().unwrap().clone();
    delete(&source, &streams).await;
    outcome.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subject_no_stream_captures_is_refused_with_why() {
    let source = source().await;
    let subject = unique("nowhere");
    let depth = source.depth(&subject).await.unwrap_err();
    assert!(matches!(depth, SourceError::UnknownQueue(_)), "{depth:?}");
    let err = source
        .send(&[Outgoing::new(&subject, "lost?")])
        .await
        .unwrap_err();
    assert!(matches!(err, SourceError::Refused(_)), "{err:?}");
    assert!(
        err.to_string().contains("no JetStream stream captures"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_with_the_same_idempotency_key_is_dropped_by_the_stream() {
    let source = source().await;
    let q = unique("dedup");
    source.prepare(&q, &format!("{q}-dlq")).await.unwrap();
    let keyed = |body: &str| {
        Outgoing::new(&q, body).with_attribute(Attribute::string("qhost-idempotency-key", "p:k/0"))
    };
    let first = source.send(&[keyed("first")]).await.unwrap();
    let again = source.send(&[keyed("again")]).await.unwrap();
    assert_eq!(first, again, "the stream answers with the first's sequence");
    let depth = source.depth(&q).await.unwrap();
    assert_eq!(depth.total(), 1, "{depth:?}");
    let got = source
        .receive(&q, 10, Duration::from_secs(30), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, b"first");
    delete(&source, &[q]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn check_says_what_exists_and_makes_nothing() {
    use qhost_source::QueueAdmin as _;
    let source = source().await;
    let q = unique("check");
    let dlq = format!("{q}-dlq");
    let absent = source.inspect(&q, &dlq).await.unwrap();
    assert!(
        absent.contains("absent: `qhost run` creates it"),
        "{absent}"
    );
    let again = source.inspect(&q, &dlq).await.unwrap();
    assert_eq!(again, absent, "nothing was made");
    source.prepare(&q, &dlq).await.unwrap();
    source.send(&[Outgoing::new(&q, "waiting")]).await.unwrap();
    let said = source.inspect(&q, &dlq).await.unwrap();
    assert!(
        said.contains(&format!(
            "stream `{q}` exists; consumer `qhost` (1 waiting, 0 held"
        )) && said.contains("holds a delivery 30s")
            && said.contains(&format!("dead-letter stream `{dlq}` exists (0 messages)")),
        "{said}"
    );
    // The dead-letter stream's depth is what it holds, with no consumer made on it.
    let depth = source.depth(&dlq).await.unwrap();
    assert_eq!((depth.visible, depth.invisible), (0, 0));
    delete(&source, &[q]).await;
}
