//! The source on the machine's RabbitMQ (`QHOST_RABBITMQ_URL`, by default guest on
//! 127.0.0.1:5672): the contract's conformance suite, and what the contract leaves to
//! RabbitMQ's own terms (a delay that outlives its host, a refused declare). Every queue is
//! named for its test and deleted after it.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use qhost_message::Outgoing;
use qhost_source::conformance::{DropHolds, NewQueue, assert_conforms_dropping};
use qhost_source::{QueueAdmin, QueueSource, SourceError};

use crate::{DelayBy, QueueType, RabbitQueue, RabbitSettings};

fn settings(delay_by: DelayBy) -> RabbitSettings {
    RabbitSettings {
        url: std::env::var("QHOST_RABBITMQ_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into()),
        prefetch: 16,
        declare: Some(QueueType::Quorum { delivery_limit: 20 }),
        delay_by,
        connection_name: format!("qhost-source-test-{}", std::process::id()),
        ordered: Default::default(),
        consumer_timeout: RabbitSettings::DEFAULT_CONSUMER_TIMEOUT,
        exchanges: Default::default(),
    }
}

fn unique(name: &str) -> String {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("qhost-test-{name}-{}", &tag[..8])
}

/// Deletes every queue a test made, and their delay and dead-letter queues.
async fn clean_up(source: &RabbitQueue, queues: &[String]) {
    for q in queues {
        source.delete(q).await.expect("delete the test's queue");
        source
            .delete(&format!("{q}-dlq"))
            .await
            .expect("delete its dead-letter queue");
    }
}

async fn conforms(delay_by: DelayBy, label: &str) {
    let source = Arc::new(RabbitQueue::new(settings(delay_by)));
    let made: Arc<Mutex<Vec<String>>> = Arc::default();
    let (s, m) = (Arc::clone(&source), Arc::clone(&made));
    let new_queue: NewQueue = Arc::new(move |name, _fifo| {
        let (s, m) = (Arc::clone(&s), Arc::clone(&m));
        Box::pin(async move {
            let q = unique(&name.replace(' ', "-"));
            s.prepare(&q, &format!("{q}-dlq")).await.expect("declare");
            m.lock().unwrap().push(q.clone());
            q
        })
    });
    let s = Arc::clone(&source);
    let drop_holds: DropHolds = Arc::new(move |queue| {
        let s = Arc::clone(&s);
        Box::pin(async move { s.close_consumer(&queue).await })
    });
    let dyn_source: Arc<dyn QueueSource> = source.clone();
    let outcome = AssertUnwindSafe(assert_conforms_dropping(
        dyn_source, new_queue, drop_holds, label,
    ))
    .catch_unwind()
    .await;
    let queues = made.lock().unwrap().clone();
    clean_up(&source, &queues).await;
    if let Err(failed) = outcome {
        std::panic::resume_unwind(failed);
    }
}

#[tokio::test]
async fn conforms_with_delay_queues() {
    conforms(DelayBy::DelayQueue, "RabbitMQ, delay queues").await;
}

#[tokio::test]
async fn conforms_holding_delayed_deliveries() {
    conforms(DelayBy::Hold, "RabbitMQ, holding delays").await;
}

/// A delivery put back for a delay is in the broker, not in the host: the host that put it
/// back closes (as one that dies), and another receives it after the delay, counted.
#[tokio::test]
async fn a_delay_outlives_the_host_that_asked_for_it() {
    let q = unique("delay-outlives");
    let first = RabbitQueue::new(settings(DelayBy::DelayQueue));
    first.prepare(&q, &format!("{q}-dlq")).await.unwrap();
    first.send(&[Outgoing::new(&q, "retry me")]).await.unwrap();
    let got = first
        .receive(&q, 1, Duration::ZERO, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    let put_back = Instant::now();
    first
        .put_back(&q, &got[0].handle, Duration::from_secs(2))
        .await
        .unwrap();
    first.close().await;

    let second = RabbitQueue::new(settings(DelayBy::DelayQueue));
    let early = second
        .receive(&q, 1, Duration::ZERO, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(early.is_empty(), "not before its delay");
    let again = second
        .receive(&q, 1, Duration::ZERO, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "it comes back after the delay");
    assert!(
        put_back.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        put_back.elapsed()
    );
    assert_eq!(
        (again[0].id.as_str(), again[0].delivery_count),
        (got[0].id.as_str(), 2)
    );
    assert_eq!(again[0].body, b"retry me");
    second.settle(&q, &[again[0].handle.clone()]).await.unwrap()[0]
        .as_ref()
        .unwrap();
    // The delay queue this source never sent to is the first's: delete it by name too.
    clean_up(&first, std::slice::from_ref(&q)).await;
    let delay_queue = crate::delay::name(&q, Duration::from_secs(2));
    first.delete(&delay_queue).await.unwrap();
}

#[tokio::test]
async fn a_send_to_a_missing_queue_is_refused_and_settling_twice_is_an_expired_handle() {
    let source = RabbitQueue::new(settings(DelayBy::DelayQueue));
    let missing = unique("missing");
    let err = source
        .send(&[Outgoing::new(&missing, "x")])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SourceError::UnknownQueue(q) if *q == missing),
        "{err:?}"
    );
    assert!(err.is_permanent());

    let q = unique("twice");
    source.prepare(&q, &format!("{q}-dlq")).await.unwrap();
    source.send(&[Outgoing::new(&q, "once")]).await.unwrap();
    let got = source
        .receive(&q, 1, Duration::ZERO, Duration::from_secs(5))
        .await
        .unwrap();
    let h = vec![got[0].handle.clone()];
    assert!(source.settle(&q, &h).await.unwrap()[0].is_ok());
    let again = source.settle(&q, &h).await.unwrap();
    assert!(
        matches!(again[0], Err(SourceError::HandleExpired)),
        "{again:?}"
    );
    // The channel survived the second settle: the consumer still receives.
    source.send(&[Outgoing::new(&q, "next")]).await.unwrap();
    let next = source
        .receive(&q, 1, Duration::ZERO, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(
        source.purge(&q).await.unwrap(),
        qhost_source::Purged::Deleted(0)
    );
    clean_up(&source, &[q]).await;
}

#[tokio::test]
async fn a_queue_declared_otherwise_is_a_clear_refusal() {
    let q = unique("declared-otherwise");
    let classic = RabbitQueue::new(RabbitSettings {
        declare: Some(QueueType::Classic),
        ..settings(DelayBy::DelayQueue)
    });
    classic.prepare(&q, &format!("{q}-dlq")).await.unwrap();
    let quorum = RabbitQueue::new(settings(DelayBy::DelayQueue));
    let err = quorum.prepare(&q, &format!("{q}-dlq")).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("exists with other arguments") && text.contains(&q),
        "{text}"
    );
    let unknown = RabbitQueue::new(RabbitSettings {
        declare: None,
        ..settings(DelayBy::DelayQueue)
    });
    let missing = unique("never-declared");
    let err = unknown.prepare(&missing, "whatever").await.unwrap_err();
    assert!(
        matches!(&err, SourceError::UnknownQueue(m) if *m == missing),
        "{err:?}"
    );
    clean_up(&classic, &[q]).await;
}

/// Settling a batch acks it with one `multiple` ack when nothing below it is still held, and
/// one by one otherwise: either way exactly the settled deliveries are gone, and one still
/// held (or put back meanwhile) comes back when its channel closes.
#[tokio::test]
async fn a_batch_is_acked_as_one_only_when_nothing_below_it_is_held() {
    let q = unique("multiple-ack");
    let source = RabbitQueue::new(settings(DelayBy::Hold));
    source.prepare(&q, &format!("{q}-dlq")).await.unwrap();
    let bodies: Vec<Outgoing> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|b| Outgoing::new(&q, *b))
        .collect();
    source.send(&bodies).await.unwrap();
    let mut got = Vec::new();
    while got.len() < 5 {
        got.extend(
            source
                .receive(&q, 5, Duration::ZERO, Duration::from_secs(5))
                .await
                .unwrap(),
        );
    }
    let handles: Vec<String> = got.iter().map(|m| m.handle.clone()).collect();
    // The first stays held and the second waits out a delay: the later three are acked one
    // by one, never through a `multiple` ack that would take the first two too.
    source
        .put_back(&q, &handles[1], Duration::from_secs(30))
        .await
        .unwrap();
    let settled = source.settle(&q, &handles[2..]).await.unwrap();
    assert!(settled.iter().all(Result::is_ok), "{settled:?}");
    source.close_consumer(&q).await;
    let mut back = Vec::new();
    while back.len() < 2 {
        let more = source
            .receive(&q, 5, Duration::ZERO, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(
            !more.is_empty(),
            "the held and the waiting one come back: {back:?}"
        );
        back.extend(more);
    }
    let mut bodies: Vec<&[u8]> = back.iter().map(|m| m.body.as_slice()).collect();
    bodies.sort();
    assert_eq!(bodies, [b"a".as_slice(), b"b".as_slice()]);
    // Now nothing is held below them: both go in one ack, and nothing comes back.
    let handles: Vec<String> = back.iter().map(|m| m.handle.clone()).collect();
    assert!(
        source
            .settle(&q, &handles)
            .await
            .unwrap()
            .iter()
            .all(Result::is_ok)
    );
    source.close_consumer(&q).await;
    let none = source
        .receive(&q, 5, Duration::ZERO, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(none.is_empty(), "{none:?}");
    clean_up(&source, &[q]).await;
}

/// Runs that end out of order: of a settled batch, the tags below the lowest delivery still
/// out go in one `multiple` ack, the rest one each. Exactly the settled deliveries are gone,
/// the channel stays open (a tag acked twice would close it), and the ones still out come back
/// when it closes.
#[tokio::test]
async fn a_batch_s_part_below_every_delivery_still_out_goes_in_one_ack() {
    let q = unique("partial-ack");
    let source = RabbitQueue::new(settings(DelayBy::Hold));
    source.prepare(&q, &format!("{q}-dlq")).await.unwrap();
    let names = ["a", "b", "c", "d", "e", "f"];
    let bodies: Vec<Outgoing> = names.iter().map(|b| Outgoing::new(&q, *b)).collect();
    source.send(&bodies).await.unwrap();
    let mut got = Vec::new();
    while got.len() < names.len() {
        let more = source.receive(&q, 6, Duration::ZERO, Duration::from_secs(5));
        got.extend(more.await.unwrap());
    }
    got.sort_by_key(|m| m.body.clone());
    let handles: Vec<String> = got.iter().map(|m| m.handle.clone()).collect();
    let tag = |h: &str| h.rsplit('.').next().unwrap().parse::<u64>().unwrap();
    // c and f still out: a and b in one ack up to b's tag, d and e one each.
    let batch = [&handles[3], &handles[0], &handles[4], &handles[1]].map(String::clone);
    let settled = source.settle(&q, &batch).await.unwrap();
    assert!(settled.iter().all(Result::is_ok), "{settled:?}");
    assert_eq!(source.acked_through(&q).await, tag(&handles[1]));
    // c now, acked alone: d and e's acks before it never made the channel take it.
    let settled = source.settle(&q, std::slice::from_ref(&handles[2])).await;
    assert!(settled.unwrap().iter().all(Result::is_ok));
    source.close_consumer(&q).await;
    let mut back = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while back.is_empty() && Instant::now() < deadline {
        let more = source.receive(&q, 6, Duration::ZERO, Duration::from_millis(500));
        back.extend(more.await.unwrap());
    }
    back.extend(
        (source
            .receive(&q, 6, Duration::ZERO, Duration::from_secs(1))
            .await)
            .unwrap(),
    );
    let bodies: Vec<&[u8]> = back.iter().map(|m| m.body.as_slice()).collect();
    assert_eq!(
        bodies,
        [b"f".as_slice()],
        "only what was still out comes back"
    );
    let handles: Vec<String> = back.iter().map(|m| m.handle.clone()).collect();
    let settled = source.settle(&q, &handles).await.unwrap();
    assert!(settled.iter().all(Result::is_ok));
    clean_up(&source, &[q]).await;
}

/// An ordered queue's consumer hands out one delivery at a time even when the broker sends
/// more (here a prefetch of five): the next only once the one out is settled, in order.
#[tokio::test]
async fn an_ordered_consumer_hands_out_nothing_while_a_delivery_is_out() {
    let q = unique("one-out");
    let source = RabbitQueue::new(settings(DelayBy::Hold));
    source.prepare(&q, &format!("{q}-dlq")).await.unwrap();
    let bodies: Vec<Outgoing> = ["a", "b", "c"]
        .iter()
        .map(|b| Outgoing::new(&q, *b))
        .collect();
    source.send(&bodies).await.unwrap();
    let link = source.link().await.unwrap();
    let consumer = crate::consumer::Consumer::start(link, &q, 5, 1, true)
        .await
        .unwrap();
    let wait = Duration::from_secs(2);
    let mut order = Vec::new();
    for _ in 0..3 {
        let got = consumer.take(&q, 5, wait).await.unwrap();
        assert_eq!(got.len(), 1, "one at a time: {got:?}");
        let none = consumer
            .take(&q, 5, Duration::from_millis(200))
            .await
            .unwrap();
        assert!(none.is_empty(), "nothing while one is out: {none:?}");
        let tag: u64 = got[0].handle.rsplit('.').next().unwrap().parse().unwrap();
        assert!(consumer.release(tag).is_some());
        let ack = lapin::options::BasicAckOptions::default();
        consumer.channel.basic_ack(tag, ack).await.unwrap();
        order.push(String::from_utf8(got[0].body.clone()).unwrap());
    }
    assert_eq!(order, ["a", "b", "c"]);
    let _ = consumer.channel.close(200, "done".into()).await;
    clean_up(&source, &[q]).await;
}

/// An ordered queue's delivery held back again and again (as one whose key a dead host's
/// lease holds is, until the lease lapses) comes back from its consumer each time, never
/// through the broker: more times than the queue's delivery limit (20), it is not
/// dead-lettered, its count grows, and the message behind it waits.
#[tokio::test]
async fn an_ordered_delivery_held_back_past_the_delivery_limit_is_not_dead_lettered() {
    let q = unique("held-again");
    let source = RabbitQueue::new(RabbitSettings {
        ordered: [q.clone()].into(),
        ..settings(DelayBy::DelayQueue)
    });
    let dlq = format!("{q}-dlq");
    source.prepare(&q, &dlq).await.unwrap();
    let sent: Vec<Outgoing> = ["first", "second"]
        .iter()
        .map(|b| Outgoing::new(&q, *b))
        .collect();
    source.send(&sent).await.unwrap();
    let wait = Duration::from_secs(2);
    let mut counts = Vec::new();
    for _ in 0..25 {
        let got = source.receive(&q, 10, Duration::ZERO, wait).await.unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].body, b"first", "nothing overtakes it");
        counts.push(got[0].delivery_count);
        let after = Duration::from_millis(50);
        source.put_back(&q, &got[0].handle, after).await.unwrap();
    }
    assert!(counts.windows(2).all(|w| w[1] == w[0] + 1), "{counts:?}");
    let got = source.receive(&q, 10, Duration::ZERO, wait).await.unwrap();
    assert_eq!(got[0].body, b"first");
    source.settle(&q, &[got[0].handle.clone()]).await.unwrap();
    let next = source.receive(&q, 10, Duration::ZERO, wait).await.unwrap();
    assert_eq!(next[0].body, b"second");
    source.settle(&q, &[next[0].handle.clone()]).await.unwrap();
    assert_eq!(
        source.depth(&dlq).await.unwrap().visible,
        0,
        "nothing dead-lettered"
    );
    clean_up(&source, &[q]).await;
}

/// An ordered queue: declared with a single active consumer and consumed one delivery at a
/// time. Of two sources on it, the first consuming gets one delivery and the other none; a
/// delayed put-back keeps its place (the next is not handed out meanwhile); when the first's
/// connection closes, the other takes over from the message it had not settled.
#[tokio::test]
async fn an_ordered_queue_hands_out_one_at_a_time_to_one_consumer_of_the_fleet() {
    let q = unique("ordered");
    let ordered = || {
        RabbitQueue::new(RabbitSettings {
            ordered: [q.clone()].into(),
            ..settings(DelayBy::DelayQueue)
        })
    };
    let (first, second) = (ordered(), ordered());
    first.prepare(&q, &format!("{q}-dlq")).await.unwrap();
    let sent: Vec<Outgoing> = (0..3).map(|i| Outgoing::new(&q, format!("{i}"))).collect();
    first.send(&sent).await.unwrap();
    let wait = Duration::from_secs(2);
    let got = first.receive(&q, 10, Duration::ZERO, wait).await.unwrap();
    assert_eq!(got.len(), 1, "one delivery at a time");
    assert_eq!(got[0].body, b"0");
    let standby = second.receive(&q, 10, Duration::ZERO, wait).await.unwrap();
    assert!(
        standby.is_empty(),
        "a second consumer stands by: {standby:?}"
    );
    // Put back after a delay: held in place, not sent round a delay queue behind `1` and `2`.
    let after = Duration::from_millis(1500);
    first.put_back(&q, &got[0].handle, after).await.unwrap();
    let meanwhile = first
        .receive(&q, 10, Duration::ZERO, Duration::from_millis(500))
        .await;
    assert!(meanwhile.unwrap().is_empty(), "nothing overtakes it");
    let again = first.receive(&q, 10, Duration::ZERO, wait).await.unwrap();
    assert_eq!((again.len(), again[0].body.as_slice()), (1, &b"0"[..]));
    first.close().await;
    let taken = second.receive(&q, 10, Duration::ZERO, wait).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(
        taken[0].body, b"0",
        "the one the first left unsettled, first"
    );
    second.settle(&q, &[taken[0].handle.clone()]).await.unwrap();
    let next = second.receive(&q, 10, Duration::ZERO, wait).await.unwrap();
    assert_eq!(next[0].body, b"1");
    second.settle(&q, &[next[0].handle.clone()]).await.unwrap();
    clean_up(&second, &[q]).await;
}

/// A Celery task qhost sends on RabbitMQ travels as Celery's producers send it: its headers
/// (one `amqp-headers` attribute, past SQS's ten) as AMQP headers typed as JSON types them,
/// its content type and task id as properties; read back, each is an attribute again.
#[tokio::test]
async fn an_amqp_headers_attribute_is_sent_as_typed_headers_beside_the_properties() {
    use qhost_message::{Attribute, wire};
    let source = RabbitQueue::new(settings(DelayBy::DelayQueue));
    let q = unique("headers");
    source.prepare(&q, &format!("{q}-dlq")).await.unwrap();
    let mut msg = Outgoing::new(&q, "[[], {}, {}]");
    msg.attributes = vec![
        Attribute::string(wire::AMQP_CONTENT_TYPE, "application/json"),
        Attribute::string(wire::AMQP_CORRELATION_ID, "task-1"),
        Attribute::string(
            wire::AMQP_HEADERS,
            r#"{"task": "proj.add", "retries": 0, "timelimit": [null, null], "ignore_result": false}"#,
        ),
    ];
    source.send(&[msg]).await.unwrap();
    let got = source
        .receive(&q, 1, Duration::ZERO, Duration::from_secs(5))
        .await
        .unwrap();
    let attr = |name: &str| {
        let found = got[0].attributes.iter().find(|a| a.name == name);
        found.and_then(Attribute::text).map(String::from)
    };
    assert_eq!(attr("task").as_deref(), Some("proj.add"));
    assert_eq!(attr("retries").as_deref(), Some("0"));
    assert_eq!(attr("timelimit").as_deref(), Some("[null,null]"));
    assert_eq!(
        attr(wire::AMQP_CONTENT_TYPE).as_deref(),
        Some("application/json")
    );
    assert_eq!(attr(wire::AMQP_CORRELATION_ID).as_deref(), Some("task-1"));
    assert_eq!(attr(wire::AMQP_HEADERS), None, "not a header of its own");
    source.settle(&q, &[got[0].handle.clone()]).await.unwrap();
    clean_up(&source, &[q]).await;
}

/// The client's socket loop runs as a task on the runtime (vendor/lapin/QHOST.md), here the
/// only worker, beside the consumer: a long stream of deliveries, all prefetched at once and
/// read without pause, gets through, each settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_stream_of_large_deliveries_gets_through_the_client_s_loop() {
    const N: usize = 2000;
    let source = RabbitQueue::new(RabbitSettings {
        prefetch: N as u16,
        ..settings(DelayBy::DelayQueue)
    });
    let q = unique("large-stream");
    source
        .prepare(&q, &format!("{q}-dlq"))
        .await
        .expect("declare");
    let body = "x".repeat(32 * 1024);
    for _ in 0..N / 50 {
        let batch: Vec<Outgoing> = (0..50).map(|_| Outgoing::new(&q, body.as_str())).collect();
        source.send(&batch).await.expect("send");
    }
    let receiving = async {
        let mut got = 0;
        while got < N {
            let batch = (source.receive(&q, 100, Duration::from_secs(60), Duration::from_secs(1)))
                .await
                .expect("receive");
            let handles: Vec<String> = batch.iter().map(|m| m.handle.clone()).collect();
            source.settle(&q, &handles).await.expect("settle");
            got += handles.len();
        }
        got
    };
    let got = tokio::time::timeout(Duration::from_secs(60), receiving).await;
    clean_up(&source, std::slice::from_ref(&q)).await;
    assert_eq!(
        got.ok(),
        Some(N),
        "every large delivery received within 60 s"
    );
}
