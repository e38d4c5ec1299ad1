//! SNS, EventBridge and S3 queues' deliveries through the real pipeline on in-memory parts:
//! what the handler is given, what it is keyed and routed by, what runs once, and what is
//! dead-lettered with why. (Celery's are in `celery_fates`.)

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::handler::{HandlerMessage, Invocation, Outcome};
use crate::message::wire::DEAD_LETTER_REASON;
use crate::message::{Received, find_attribute};
use crate::pipeline::test_bed::{JOBS, PLUGIN, TestBed};

/// What the handler was given, in order.
type Seen = Arc<Mutex<Vec<HandlerMessage>>>;

/// A bed whose queue has `lines` (its format and routes), whose plugin records what it is
/// given and answers with `answer`.
fn bed(lines: &str, answer: fn(&HandlerMessage) -> Outcome) -> (TestBed, Seen) {
    let seen = Seen::default();
    let record = Arc::clone(&seen);
    let handler = move |msg: HandlerMessage| {
        let outcome = answer(&msg);
        record.lock().unwrap().push(msg);
        Ok(Invocation::new(outcome))
    };
    (TestBed::with_queue(lines, "", handler), seen)
}

fn ack(_: &HandlerMessage) -> Outcome {
    Outcome::Ack
}

fn text<'a>(msg: &'a HandlerMessage, name: &str) -> Option<&'a str> {
    find_attribute(&msg.attributes, name).and_then(|a| a.text())
}

fn reasons(dead: &[Received]) -> Vec<String> {
    (dead.iter())
        .filter_map(|m| find_attribute(&m.attributes, DEAD_LETTER_REASON)?.text())
        .map(str::to_string)
        .collect()
}

/// An SNS notification of `message` on topic `topic`, as SNS sends it to SQS.
fn notification(id: &str, topic: &str, message: &str) -> String {
    json!({
        "Type": "Notification",
        "MessageId": id,
        "TopicArn": format!("arn:aws:sns:us-east-1:123456789012:{topic}"),
        "Message": message,
        "Timestamp": "2026-12-01T09:00:00.000Z",
        "MessageAttributes": {"tenant": {"Type": "String", "Value": "acme"}}
    })
    .to_string()
}

#[tokio::test(start_paused = true)]
async fn an_sns_notification_delivered_twice_runs_once_keyed_by_its_message_id() {
    let (bed, seen) = bed(
        &format!("format = \"sns\"\nroutes = {{ \"orders\" = \"{PLUGIN}\" }}\n"),
        ack,
    );
    let note = notification("sns-1", "orders", "{\"order\": 7}");
    // SNS retrying its delivery: two SQS messages, one SNS MessageId.
    for _ in 0..2 {
        bed.send_body(note.clone()).await;
        bed.deliver().await;
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "the second is a duplicate");
    assert_eq!(seen[0].idempotency_key, "sns-1");
    assert_eq!(seen[0].body, b"{\"order\": 7}");
    assert_eq!(text(&seen[0], "tenant"), Some("acme"));
    assert_eq!(
        text(&seen[0], "sns-topic-arn"),
        Some("arn:aws:sns:us-east-1:123456789012:orders")
    );
    let c = bed.counts();
    assert_eq!((c.received, c.acked, c.duplicates), (2, 1, 1));
    assert_eq!(bed.depth(JOBS).await.total(), 0);
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_message_of_the_wrong_shape_and_an_unknown_topic_are_dead_lettered_and_the_rest_runs() {
    let (bed, seen) = bed(
        &format!("format = \"sns\"\nroutes = {{ \"orders\" = \"{PLUGIN}\" }}\n"),
        ack,
    );
    bed.send_body("plain text").await;
    bed.send_body(notification("sns-2", "refunds", "x")).await;
    bed.send_body(notification("sns-3", "orders", "y")).await;
    assert_eq!(bed.deliver().await, 3);
    let mut why = reasons(&bed.contents(&bed.queue.config.dead_letter).await);
    why.sort();
    assert_eq!(why.len(), 2, "{why:?}");
    assert!(why[0].starts_with("not an SNS notification"), "{why:?}");
    assert_eq!(
        why[1],
        "topic `arn:aws:sns:us-east-1:123456789012:refunds` is not one this queue routes \
         (routes: orders) and it has no default plugin"
    );
    let ran: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|m| m.idempotency_key.clone())
        .collect();
    assert_eq!(ran, ["sns-3"]);
    assert_eq!(bed.depth(JOBS).await.total(), 0, "nothing left behind");
    bed.close().await;
}

/// An EventBridge event of `detail_type` with `detail`.
fn event(id: &str, detail_type: &str, detail: Value) -> String {
    json!({
        "version": "0", "id": id, "detail-type": detail_type, "source": "com.example.orders",
        "account": "123456789012", "time": "2026-12-01T09:00:00Z", "region": "us-east-1",
        "resources": [], "detail": detail
    })
    .to_string()
}

#[tokio::test(start_paused = true)]
async fn an_event_runs_once_per_id_routed_by_its_detail_type_and_a_non_event_is_dead_lettered() {
    let routes =
        format!("format = \"eventbridge\"\nroutes = {{ \"Order Placed\" = \"{PLUGIN}\" }}\n");
    let (bed, seen) = bed(&routes, ack);
    let placed = event("ev-1", "Order Placed", json!({"order": 7}));
    bed.send_body(placed.clone()).await;
    bed.send_body(event("ev-2", "Order Shipped", json!({})))
        .await;
    bed.send_body("{\"detail\": {}}").await;
    bed.deliver().await;
    // EventBridge retrying the delivery: another SQS message, the same event id.
    bed.send_body(placed).await;
    bed.deliver().await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].idempotency_key, "ev-1");
    assert_eq!(
        serde_json::from_slice::<Value>(&seen[0].body).unwrap(),
        json!({"order": 7})
    );
    assert_eq!(
        text(&seen[0], "eventbridge-detail-type"),
        Some("Order Placed")
    );
    let mut why = reasons(&bed.contents(&bed.queue.config.dead_letter).await);
    why.sort();
    assert_eq!(
        why,
        [
            "detail-type `Order Shipped` is not one this queue routes (routes: Order Placed) and it has no default plugin",
            "not an EventBridge event: no `id`",
        ]
    );
    assert_eq!(bed.counts().duplicates, 1);
    bed.close().await;
}

/// An S3 notification of one `ObjectCreated:Put` record per key, in order.
fn s3_notification(keys: &[&str]) -> String {
    let records: Vec<Value> = (keys.iter().enumerate())
        .map(|(i, key)| {
            json!({
                "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
                "eventTime": "2026-12-01T09:00:00.000Z", "eventName": "ObjectCreated:Put",
                "s3": {"bucket": {"name": "uploads"},
                       "object": {"key": key, "size": 3, "eTag": "e", "sequencer": format!("0{i}")}}
            })
        })
        .collect();
    json!({"Records": records}).to_string()
}

/// Acks every record but `b`'s first run (its first lease), which asks for a retry, and
/// `bad`, which rejects.
fn retry_b_once(msg: &HandlerMessage) -> Outcome {
    match text(msg, "s3-key") {
        Some("b") if msg.fencing_token == 1 => Outcome::Retry(5),
        Some("bad") => Outcome::Reject("cannot read it".into()),
        _ => Outcome::Ack,
    }
}

#[tokio::test(start_paused = true)]
async fn each_s3_record_runs_once_and_a_redelivery_runs_only_the_record_that_had_not_finished() {
    let (bed, seen) = bed(
        "format = \"s3\"\nroutes = { \"ObjectCreated:*\" = \"p\" }\n",
        retry_b_once,
    );
    let note = s3_notification(&["a", "b", "c"]);
    bed.send_body(note.clone()).await;
    bed.deliver().await;
    assert_eq!(
        bed.split(JOBS).await,
        (0, 1),
        "put back for b's retry, hidden for its delay"
    );
    // The message again, as SQS would deliver it once b's delay is over.
    bed.send_body(note).await;
    let runs = |seen: &Seen| -> Vec<String> {
        seen.lock()
            .unwrap()
            .iter()
            .map(|m| m.idempotency_key.clone())
            .collect()
    };
    assert_eq!(
        runs(&seen),
        ["uploads/a/00", "uploads/b/01", "uploads/c/02"]
    );
    bed.deliver().await;
    assert_eq!(
        runs(&seen),
        [
            "uploads/a/00",
            "uploads/b/01",
            "uploads/c/02",
            "uploads/b/01"
        ],
        "only b ran again"
    );
    let c = bed.counts();
    assert_eq!((c.acked, c.retried, c.duplicates), (3, 1, 2), "{c:?}");
    assert!(bed.contents(&bed.queue.config.dead_letter).await.is_empty());
    assert_eq!(
        bed.split(JOBS).await,
        (0, 1),
        "only the first, still waiting out b's delay"
    );
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_rejected_record_dead_letters_the_message_once_naming_it_and_a_test_event_is_acked_unrun()
{
    let (bed, seen) = bed("format = \"s3\"\nplugin = \"p\"\n", retry_b_once);
    bed.send_body(s3_notification(&["a", "bad", "c"])).await;
    bed.send_body(r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-12-01T09:00:00.000Z","Bucket":"uploads"}"#)
        .await;
    bed.deliver().await;
    let dead = bed.contents(&bed.queue.config.dead_letter).await;
    assert_eq!(reasons(&dead), ["part 2: cannot read it"]);
    assert_eq!(
        dead[0].body,
        s3_notification(&["a", "bad", "c"]).into_bytes(),
        "as sent"
    );
    assert_eq!(seen.lock().unwrap().len(), 3, "every record ran once");
    let c = bed.counts();
    assert_eq!((c.acked, c.dead_lettered, c.ignored), (2, 1, 1), "{c:?}");
    assert_eq!(bed.depth(JOBS).await.total(), 0, "both messages are gone");
    bed.close().await;
}
