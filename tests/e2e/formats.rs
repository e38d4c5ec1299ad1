//! SNS topics, S3 buckets and EventBridge rules delivering to SQS (moto, on loopback), set up
//! with boto3 as a user would (tests/support/aws_events.py), and qhost consuming with
//! `format = "sns" | "s3" | "eventbridge"` through the fixture plugin, which reports what it
//! was given: each notification or event runs once with the body and attributes its format
//! reads, keyed by the id the service retries with, so the same envelope delivered again runs
//! nothing; an S3 message of three records whose second asks for a retry runs the first and
//! third once and the second again; a message of the wrong shape and a route the queue does not
//! hold are dead-lettered with why, and nothing else waits.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use qhost::sources::SqsQueue;
use qhost::{Host, Received};
use qhost_e2e::harness::{Running, TestEnv, attr};
use qhost_e2e::sqs_server::{
    TEST_ENV, arn, client, collect, create_queue, drain, endpoint, sdk_config, unique,
};
use serde_json::{Value, json};

/// The queues of one test: the consumed one (and its URL and ARN), its dead-letter queue, the
/// fixture's sink, and the tap a service delivers a second copy to.
struct Queues {
    queue: String,
    url: String,
    arn: String,
    dlq: String,
    sink: String,
    tap_url: String,
    tap_arn: String,
}

async fn queues(name: &str) -> Queues {
    let queue = unique(name);
    let (dlq, sink, tap) = (
        format!("{queue}-dlq"),
        unique(&format!("{name}-sink")),
        unique(&format!("{name}-tap")),
    );
    let url = create_queue(&queue, &[]).await;
    create_queue(&dlq, &[]).await;
    create_queue(&sink, &[]).await;
    let tap_url = create_queue(&tap, &[]).await;
    Queues {
        arn: arn(&url).await,
        tap_arn: arn(&tap_url).await,
        queue,
        url,
        dlq,
        sink,
        tap_url,
    }
}

/// Runs tests/support/aws_events.py with `args` after the endpoint; what it printed.
fn aws_events(command: &str, args: &[&str]) -> Value {
    let python = qhost_e2e::workspace().join("target/tools/moto/bin/python");
    let script = qhost_e2e::workspace().join("tests/support/aws_events.py");
    let out = Command::new(python)
        .envs(TEST_ENV)
        .arg(script)
        .arg(command)
        .arg(endpoint())
        .args(args)
        .output()
        .expect("running Python");
    assert!(
        out.status.success(),
        "aws_events.py {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the script's JSON")
}

/// Sends `body` to the queue at `url` as it is: a service's retried delivery, or a stray.
async fn send_raw(url: &str, body: &str) {
    (client().send_message().queue_url(url).message_body(body))
        .send()
        .await
        .expect("sent");
}

/// A host consuming `q.queue` with `lines` (its format and routes) through the fixture, which
/// may send to the sink.
async fn start(env: &TestEnv, q: &Queues, lines: &str) -> Running {
    env.install(
        "fixture",
        "fixture",
        &format!("[outbox]\nqueues = [\"{}\"]\n", q.sink),
    );
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n\
         [[queue]]\nname = \"{}\"\n{lines}\nwait-time-secs = 1\nvisibility-timeout-secs = 10\n",
        endpoint(),
        q.queue
    ));
    let host = Host::with_source(config, Arc::new(SqsQueue::from_sdk_config(&sdk_config())))
        .await
        .expect("host starts");
    Running::start(host)
}

/// The fixture's reports, as JSON.
fn reports(sink: &[Received]) -> Vec<Value> {
    (sink.iter())
        .map(|m| serde_json::from_slice(&m.body).expect("a report"))
        .collect()
}

/// The dead letters' reasons, sorted.
fn reasons(dead: &[Received]) -> Vec<String> {
    let mut why: Vec<String> = (dead.iter())
        .map(|m| {
            attr(m, "qhost-dead-letter-reason")
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    why.sort();
    why
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sns_topic_s_notifications_run_once_each_routed_by_topic() {
    let env = TestEnv::new();
    let q = queues("sns").await;
    let out = aws_events("sns", &[&q.arn, &q.tap_url, &q.tap_arn, &q.sink]);
    let topic = out["topic"].as_str().expect("the routed topic");
    let delivered = out["tap"][0].as_str().expect("a notification");
    // SNS retrying its delivery: the same envelope, the same MessageId, another SQS message.
    send_raw(&q.url, delivered).await;
    send_raw(&q.url, "{\"order\": 8}").await;
    let routes = format!("format = \"sns\"\nroutes = {{ \"{topic}\" = \"fixture\" }}");
    let running = start(&env, &q, &routes).await;

    let ran = collect(&q.sink, 1).await;
    let dead = collect(&q.dlq, 2).await;
    running
        .wait_for(Duration::from_secs(30), |h| {
            h.stats().total().duplicates == 1
        })
        .await;
    let host = running.stop().await;

    let note: Value = serde_json::from_str(delivered).unwrap();
    let reports = reports(&ran);
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let report = &reports[0];
    assert_eq!(report["key"], note["MessageId"], "keyed by SNS's MessageId");
    assert_eq!(report["body"], "{\"order\": 7}", "the published message");
    let attributes = &report["attributes"];
    assert_eq!(attributes["tenant"], "acme");
    assert_eq!(attributes["amount"], "12.5");
    assert_eq!(attributes["blob"], "3 bytes");
    assert_eq!(attributes["sns-subject"], "placed");
    assert_eq!(attributes["sns-topic-arn"], note["TopicArn"]);

    let why = reasons(&dead);
    assert_eq!(why.len(), 2, "{why:#?}");
    assert!(why[0].starts_with("not an SNS notification"), "{why:#?}");
    assert!(
        why[1].starts_with("topic `arn:aws:sns:us-east-1:123456789012:refunds-")
            && why[1].ends_with(&format!(
                "is not one this queue routes (routes: {topic}) and it has no default plugin"
            )),
        "{why:#?}"
    );
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked, c.duplicates, c.dead_lettered),
        (1, 1, 1, 2),
        "{c:?}"
    );
    assert!(drain(&q.queue).await.is_empty(), "nothing left behind");
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_records_run_once_each_and_a_retried_record_alone_runs_again() {
    let env = TestEnv::new();
    let q = queues("s3").await;
    let out = aws_events("s3", &[&q.tap_url, &q.tap_arn, &q.sink]);
    let bucket = out["bucket"].as_str().expect("the bucket");
    let tapped: Vec<Value> = (out["tap"].as_array().expect("the tap"))
        .iter()
        .map(|b| serde_json::from_str(b.as_str().expect("a body")).expect("JSON"))
        .collect();
    let event = |n: &Value| {
        (n["Event"].as_str())
            .or(n["Records"][0]["eventName"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let of = |name: &str| -> Vec<Value> {
        tapped
            .iter()
            .filter(|n| event(n) == name)
            .cloned()
            .collect()
    };
    let (test, puts, copy) = (
        of("s3:TestEvent"),
        of("ObjectCreated:Put"),
        of("ObjectCreated:Copy"),
    );
    assert_eq!(
        (test.len(), puts.len(), copy.len()),
        (1, 3, 1),
        "{tapped:#?}"
    );
    // S3 sends a record a message; AWS documents `Records` as a list, so the three puts go
    // out as one message of three records, as they come from S3.
    let records: Vec<Value> = (puts.iter()).map(|n| n["Records"][0].clone()).collect();
    let three = json!({ "Records": records }).to_string();
    for body in [
        test[0].to_string(),
        three,
        copy[0].to_string(),
        "hello".into(),
    ] {
        send_raw(&q.url, &body).await;
    }
    let routes = "format = \"s3\"\nroutes = { \"ObjectCreated:Put\" = \"fixture\" }";
    let running = start(&env, &q, routes).await;

    let ran = collect(&q.sink, 3).await;
    let dead = collect(&q.dlq, 2).await;
    running
        .wait_for(Duration::from_secs(60), |h| {
            let c = h.stats().total();
            c.acked == 3 && c.duplicates == 2 && c.ignored == 1
        })
        .await;
    let host = running.stop().await;

    let reports = reports(&ran);
    let mut keys: Vec<&str> = reports
        .iter()
        .filter_map(|r| r["attributes"]["s3-key"].as_str())
        .collect();
    keys.sort();
    let mut expected: Vec<&str> = (out["keys"].as_array().unwrap().iter())
        .filter_map(Value::as_str)
        .collect();
    expected.sort();
    assert_eq!(keys, expected, "each record reported once: {reports:#?}");
    for report in &reports {
        let key = report["key"].as_str().unwrap();
        assert!(key.starts_with(&format!("{bucket}/")), "{key}");
        let record: Value = serde_json::from_str(report["body"].as_str().unwrap()).unwrap();
        assert_eq!(
            record["eventName"], "ObjectCreated:Put",
            "the record as S3 sent it"
        );
    }
    let why = reasons(&dead);
    assert_eq!(
        why[0],
        "event `ObjectCreated:Copy` is not one this queue routes (routes: ObjectCreated:Put) \
         and it has no default plugin"
    );
    assert!(
        why[1].starts_with("not an S3 event notification"),
        "{why:#?}"
    );
    let c = host.stats().total();
    // Records 1 and 3 ran once; record 2 twice (a retry, then an ack); on the redelivery 1
    // and 3 were duplicates.
    assert_eq!(
        (
            c.invoked,
            c.acked,
            c.retried,
            c.duplicates,
            c.ignored,
            c.dead_lettered
        ),
        (4, 3, 1, 2, 1, 2),
        "{c:?}"
    );
    assert!(drain(&q.queue).await.is_empty(), "nothing left behind");
}

#[tokio::test(flavor = "multi_thread")]
async fn eventbridge_events_run_once_each_routed_by_detail_type() {
    let env = TestEnv::new();
    let q = queues("events").await;
    let out = aws_events("eventbridge", &[&q.arn, &q.tap_url, &q.tap_arn, &q.sink]);
    let placed = (out["tap"].as_array().expect("the tap").iter())
        .filter_map(Value::as_str)
        .find(|b| b.contains("Order Placed"))
        .expect("the placed event")
        .to_string();
    // EventBridge retrying its delivery: the same event, another SQS message.
    send_raw(&q.url, &placed).await;
    send_raw(&q.url, "[]").await;
    let routes = "format = \"eventbridge\"\nroutes = { \"Order Placed\" = \"fixture\" }";
    let running = start(&env, &q, routes).await;

    let ran = collect(&q.sink, 1).await;
    let dead = collect(&q.dlq, 2).await;
    running
        .wait_for(Duration::from_secs(30), |h| {
            h.stats().total().duplicates == 1
        })
        .await;
    let host = running.stop().await;

    let event: Value = serde_json::from_str(&placed).unwrap();
    let reports = reports(&ran);
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let report = &reports[0];
    assert_eq!(report["key"], event["id"], "keyed by the event's id");
    let detail: Value = serde_json::from_str(report["body"].as_str().unwrap()).unwrap();
    assert_eq!(detail, event["detail"], "the handler's body is the detail");
    let attributes = &report["attributes"];
    assert_eq!(attributes["eventbridge-source"], "com.example.orders");
    assert_eq!(attributes["eventbridge-detail-type"], "Order Placed");
    assert_eq!(
        attributes["eventbridge-resources"],
        "[\"arn:aws:example:us-east-1:123456789012:order/7\"]"
    );
    assert_eq!(
        reasons(&dead),
        [
            "detail-type `Order Shipped` is not one this queue routes (routes: Order Placed) and it has no default plugin",
            "not an EventBridge event: no `id`",
        ]
    );
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked, c.duplicates, c.dead_lettered),
        (1, 1, 1, 2),
        "{c:?}"
    );
    assert!(drain(&q.queue).await.is_empty(), "nothing left behind");
}
