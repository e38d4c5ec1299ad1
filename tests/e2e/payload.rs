//! Payload offload (claim check) against real servers: the Redis payload store on the shared
//! Redis, S3 on moto (which serves SQS and S3 on one endpoint), and a message produced by the
//! official Python Amazon SQS Extended Client.
//!
//! The fixture's `digest:QUEUE` command sends `LEN:FNV1A64:ATTRIBUTE-NAMES` of what the handler
//! received, so each test checks that the handler saw the original bytes and no pointer
//! attribute.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use qhost::Host;
use qhost::sources::QueueSource;
use qhost::sources::SqsQueue;
use qhost::testing::wire;
use qhost::{Attribute, Outgoing, Received};
use qhost_e2e::harness::{
    Running, TestEnv, attr, contents, eventually, queue_toml, run_until_idle,
};
use qhost_e2e::redis_server::{RedisServer, shared_url, unique_namespace};
use qhost_e2e::sqs_server::{
    TEST_ENV, create_bucket, create_queue, drain, endpoint, object_keys, s3_client, s3_payloads,
    sdk_config, unique,
};

/// What the fixture's `digest` reports for `body` with attributes named `names`.
fn digest(body: &[u8], names: &str) -> String {
    let hash = body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{}:{hash:016x}:{names}", body.len())
}

/// A fixture body of exactly `len` bytes that reports its digest to `sink`.
fn digest_body(sink: &str, len: usize) -> Vec<u8> {
    let mut body = format!("digest:{sink};").into_bytes();
    assert!(len >= body.len());
    body.resize(len, b'x');
    body
}

fn redis_payload_config(env: &TestEnv, ns: &str, threshold: usize) -> qhost::Config {
    env.config(&format!(
        "[idempotency]\nnamespace = \"{ns}\"\n\
         [payload]\nstore = \"redis\"\nurl = \"{}\"\nthreshold-bytes = {threshold}\n{}",
        shared_url(),
        queue_toml("jobs", "fixture")
    ))
}

async fn redis_get(key: &str) -> Option<Vec<u8>> {
    use redis::AsyncCommands as _;
    let mut conn = qhost_e2e::redis_server::connect(&shared_url()).await;
    conn.get(key).await.expect("redis get")
}

fn texts(msgs: &[Received]) -> Vec<String> {
    let mut t: Vec<String> = msgs
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    t.sort();
    t
}

#[tokio::test(flavor = "multi_thread")]
async fn the_redis_store_offloads_just_over_the_threshold_and_the_handler_sees_the_bytes() {
    const THRESHOLD: usize = 1000;
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let ns = unique_namespace("payload-threshold");
    let host = env.host(redis_payload_config(&env, &ns, THRESHOLD)).await;
    let sizes = [THRESHOLD - 1, THRESHOLD, THRESHOLD + 1];
    let bodies: Vec<Vec<u8>> = sizes.iter().map(|n| digest_body("sink", *n)).collect();
    let msgs: Vec<Outgoing> = bodies
        .iter()
        .map(|b| Outgoing::new("jobs", b.clone()))
        .collect();
    // The path `qhost send` takes.
    let sent = qhost::testing::payloads(&host)
        .offload_all(&ns, 0, msgs)
        .await
        .expect("offload");
    let pointers: Vec<bool> = sent
        .iter()
        .map(|m| qhost::testing::is_pointer(&m.attributes))
        .collect();
    assert_eq!(
        pointers,
        [false, false, true],
        "only the one over the threshold"
    );
    let (offloaded_body, _) = (&sent[2].body, ());
    env.queue().send(&sent).await.expect("send");
    // A handler whose outbox message is over the threshold too: offloaded on the way out.
    let mut echo = b"echo:echoed;".to_vec();
    echo.resize(THRESHOLD * 3, b'e');
    env.queue()
        .send(&[Outgoing::new("jobs", echo.clone())])
        .await
        .expect("send");

    run_until_idle(&host).await;

    let want: Vec<String> = {
        let mut w: Vec<String> = bodies.iter().map(|b| digest(b, "")).collect();
        w.sort();
        w
    };
    assert_eq!(texts(&contents(&env.queue(), "sink").await), want);
    let echoed = contents(&env.queue(), "echoed").await;
    assert_eq!(echoed.len(), 1);
    assert!(
        qhost::testing::is_pointer(&echoed[0].attributes),
        "the outbox message was offloaded"
    );
    let back = qhost::testing::payloads(&host)
        .resolve(&echoed[0].body, &echoed[0].attributes)
        .await
        .expect("resolves")
        .expect("a pointer");
    assert_eq!(back.body, echo);
    // The consumed pointer's payload was deleted after the ack; the echoed one is still there.
    let key = |body: &[u8]| -> String {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        format!("{ns}:payload:{}", v[1]["key"].as_str().unwrap())
    };
    let consumed = key(offloaded_body);
    eventually(
        Duration::from_secs(10),
        "the consumed payload is deleted",
        async || redis_get(&consumed).await.is_none(),
    )
    .await;
    assert_eq!(redis_get(&key(&echoed[0].body)).await, Some(echo));
    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked, c.dead_lettered), (4, 4, 0), "{c:?}");
}

/// A host on moto's SQS, its payloads in `bucket` (plus `allow`), running `fixture` on `jobs`.
async fn sqs_host(env: &TestEnv, jobs: &str, bucket: &str, extra: &str) -> Host {
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n\
         [payload]\nstore = \"s3\"\nbucket = \"{bucket}\"\nprefix = \"qhost/\"\n{extra}\n\
         [[queue]]\nname = \"{jobs}\"\nplugin = \"fixture\"\nwait-time-secs = 1\nvisibility-timeout-secs = 10\n",
        endpoint()
    ));
    let payloads = qhost::payloads::open_with_s3(&config, Some(s3_payloads()))
        .await
        .expect("payload stores");
    Host::with_source(config, Arc::new(SqsQueue::from_sdk_config(&sdk_config())))
        .await
        .expect("host starts")
        .with_payloads(payloads)
}

async fn sqs_queues(name: &str) -> (String, String) {
    let jobs = unique(name);
    create_queue(&jobs, &[]).await;
    create_queue(&format!("{jobs}-dlq"), &[]).await;
    let sink = unique("sink");
    create_queue(&sink, &[]).await;
    (jobs, sink)
}

async fn run_until(host: Host, done: impl Fn(&Host) -> bool) -> Arc<Host> {
    let running = Running::start(host);
    running.wait_for(Duration::from_secs(60), done).await;
    running.stop().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_5_mib_payload_crosses_sqs_through_s3_and_is_deleted_after_the_ack() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let bucket = create_bucket("payloads").await;
    let (jobs, sink) = sqs_queues("big").await;
    let host = sqs_host(&env, &jobs, &bucket, "").await;
    let body = digest_body(&sink, 5 << 20);
    let mut msg = Outgoing::new(&jobs, body.clone());
    msg.attributes.push(Attribute::string("kind", "big"));
    let sent = qhost::testing::payloads(&host)
        .offload_all("t", 0, vec![msg])
        .await
        .expect("offload");
    assert!(qhost::testing::is_pointer(&sent[0].attributes));
    assert_eq!(object_keys(&bucket).await.len(), 1, "stored in S3");
    let sqs = SqsQueue::from_sdk_config(&sdk_config());
    sqs.send(&sent).await.expect("send pointer");

    let host = run_until(host, |h| h.stats().total().acked >= 1).await;

    let got = texts(&drain(&sink).await);
    assert_eq!(got, vec![digest(&body, "kind")]);
    eventually(
        Duration::from_secs(10),
        "deleted after the ack",
        async || object_keys(&bucket).await.is_empty(),
    )
    .await;
    let c = host.stats().total();
    assert_eq!((c.invoked, c.dead_lettered), (1, 0), "{c:?}");
}

/// Sends a `digest:SINK` body of `body_len` bytes and a `color` attribute to `queue_url` with the
/// official Python extended client, which offloads it to `bucket`.
fn send_with_python_extended_client(queue_url: &str, bucket: &str, sink: &str, body_len: usize) {
    let python = qhost_e2e::workspace().join("target/tools/moto/bin/python");
    let script = r#"
import sys, boto3, sqs_extended_client
from botocore.config import Config
endpoint, url, bucket, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sqs = boto3.client("sqs", endpoint_url=endpoint)
sqs.s3_client = boto3.client("s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}))
sqs.large_payload_support = bucket
body = ("digest:" + sys.argv[5] + ";").ljust(n, "p")
sqs.send_message(QueueUrl=url, MessageBody=body,
                 MessageAttributes={"color": {"DataType": "String", "StringValue": "blue"}})
"#;
    let out = Command::new(python)
        .envs(TEST_ENV)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .args(["-c", script, endpoint(), queue_url, bucket])
        .arg(body_len.to_string())
        .arg(sink)
        .output()
        .expect("running the Python extended client");
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_from_the_python_extended_client_reaches_the_handler_whole() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let theirs = create_bucket("python-producer").await;
    let ours = create_bucket("payloads").await;
    let (jobs, sink) = sqs_queues("python").await;
    let url = create_queue(&jobs, &[]).await;
    send_with_python_extended_client(&url, &theirs, &sink, 300_000);
    let raw = s3_client()
        .list_objects_v2()
        .bucket(&theirs)
        .send()
        .await
        .expect("list");
    assert_eq!(raw.contents().len(), 1, "the client offloaded it");

    let host = sqs_host(&env, &jobs, &ours, &format!("allow = [\"s3://{theirs}/\"]")).await;
    let host = run_until(host, |h| h.stats().total().acked >= 1).await;

    let body = format!("digest:{sink};");
    let mut body = body.into_bytes();
    body.resize(300_000, b'p');
    assert_eq!(texts(&drain(&sink).await), vec![digest(&body, "color")]);
    eventually(
        Duration::from_secs(10),
        "deleted after the ack, as the Java client does",
        async || object_keys(&theirs).await.is_empty(),
    )
    .await;
    assert_eq!(host.stats().total().dead_lettered, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn java_style_pointers_resolve_and_bad_pointers_are_dead_lettered_with_reasons() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let bucket = create_bucket("java").await;
    let (jobs, sink) = sqs_queues("pointers").await;
    let host = sqs_host(&env, &jobs, &bucket, "").await;
    let payload = digest_body(&sink, 4000);
    let put = |key: &'static str, bytes: Vec<u8>| {
        let bucket = bucket.clone();
        async move {
            s3_client()
                .put_object()
                .bucket(bucket)
                .key(key)
                .body(bytes.into())
                .send()
                .await
                .expect("put object");
        }
    };
    put("qhost/java", payload.clone()).await;
    put("qhost/short", payload[..100].to_vec()).await;
    put("qhost-x/java", payload.clone()).await;
    put("other/java", payload.clone()).await;
    let s3_pointer = |class: &str, key: &str, bucket: &str| {
        format!(r#"["{class}",{{"s3BucketName":"{bucket}","s3Key":"{key}"}}]"#)
    };
    let size = |name: &str, n: usize| Attribute::number(name, n);
    let sha = Attribute::string(wire::PAYLOAD_SHA256, "00".repeat(32));
    let cases: Vec<(String, Vec<Attribute>, Option<&str>)> = vec![
        (
            s3_pointer(wire::LEGACY_S3_POINTER_CLASS, "qhost/java", &bucket),
            vec![size(wire::LEGACY_EXTENDED_SIZE, payload.len())],
            None,
        ),
        (
            "{not a pointer".into(),
            vec![size(wire::EXTENDED_SIZE, 5)],
            Some("malformed payload pointer"),
        ),
        (
            s3_pointer(wire::S3_POINTER_CLASS, "qhost/java", "someone-elses"),
            vec![size(wire::EXTENDED_SIZE, payload.len())],
            Some("outside the allowed payload stores"),
        ),
        (
            s3_pointer(wire::S3_POINTER_CLASS, "other/java", &bucket),
            vec![size(wire::EXTENDED_SIZE, payload.len())],
            Some("outside the allowed payload stores"),
        ),
        (
            s3_pointer(wire::S3_POINTER_CLASS, "qhost/short", &bucket),
            vec![size(wire::EXTENDED_SIZE, payload.len())],
            Some("is 100 bytes but its pointer says 4000"),
        ),
        (
            s3_pointer(wire::S3_POINTER_CLASS, "qhost/java", &bucket),
            vec![size(wire::EXTENDED_SIZE, payload.len()), sha],
            Some("has sha256"),
        ),
        (
            s3_pointer(wire::S3_POINTER_CLASS, "qhost/gone", &bucket),
            vec![size(wire::EXTENDED_SIZE, 10)],
            Some("not found"),
        ),
        (
            s3_pointer(wire::S3_POINTER_CLASS, "qhost/java", &bucket),
            vec![size(wire::EXTENDED_SIZE, 10 << 30)],
            Some("declares 10737418240 bytes, over the 67108864-byte limit (payload.max-bytes)"),
        ),
        (
            s3_pointer(wire::S3_POINTER_CLASS, "qhost/java", &bucket),
            vec![size(wire::EXTENDED_SIZE, 100)],
            Some("holds more than the 100 bytes its pointer declares"),
        ),
        (
            s3_pointer(wire::S3_POINTER_CLASS, "qhost-x/java", &bucket),
            vec![size(wire::EXTENDED_SIZE, payload.len())],
            Some("outside the allowed payload stores"),
        ),
        (
            s3_pointer(wire::S3_POINTER_CLASS, "qhost/../other/java", &bucket),
            vec![size(wire::EXTENDED_SIZE, payload.len())],
            Some("outside the allowed payload stores"),
        ),
    ];
    let sqs = SqsQueue::from_sdk_config(&sdk_config());
    let msgs: Vec<Outgoing> = cases
        .iter()
        .enumerate()
        .map(|(i, (body, attributes, _))| {
            let mut m = Outgoing::new(&jobs, body.as_bytes());
            m.attributes = attributes.clone();
            m.attributes.push(Attribute::number("case", i));
            m
        })
        .collect();
    sqs.send(&msgs).await.expect("send");
    let total = cases.len() as u64;
    let host = run_until(host, |h| {
        let c = h.stats().total();
        c.acked + c.dead_lettered >= total
    })
    .await;

    assert_eq!(texts(&drain(&sink).await), vec![digest(&payload, "case")]);
    let dead = drain(&format!("{jobs}-dlq")).await;
    assert_eq!(
        dead.len(),
        cases.len() - 1,
        "every bad pointer dead-lettered once"
    );
    for (i, (body, _, reason)) in cases.iter().enumerate().skip(1) {
        let letter = dead
            .iter()
            .find(|d| attr(d, "case") == Some(i.to_string().as_str()))
            .unwrap_or_else(|| panic!("no dead letter for {body}"));
        let got = attr(letter, "qhost-dead-letter-reason").unwrap_or_default();
        assert!(got.contains(reason.unwrap()), "{body}: {got}");
        assert!(
            qhost::testing::is_pointer(&letter.attributes),
            "the dead letter keeps its pointer"
        );
    }
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked),
        (1, 1),
        "no bad pointer reached the handler: {c:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_payload_store_is_a_retry_not_a_reject() {
    let env = TestEnv::new();
    // Two attempts: an outage longer than that must not dead-letter the message.
    env.install("fixture", "fixture", "[limits]\nmax-attempts = 2\n");
    let mut redis = RedisServer::start();
    let mut config = env.config(&format!(
        "[payload]\nstore = \"redis\"\nurl = \"{}\"\nthreshold-bytes = 1000\n{}",
        redis.url(),
        queue_toml("jobs", "fixture")
    ));
    config.retry = qhost::RetryPolicy {
        base: Duration::from_secs(1),
        max: Duration::from_secs(2),
    };
    let host = env.host(config).await;
    let body = digest_body("sink", 5000);
    let sent = qhost::testing::payloads(&host)
        .offload_all("t", 0, vec![Outgoing::new("jobs", body.clone())])
        .await
        .expect("offload");
    redis.kill();
    env.queue().send(&sent).await.expect("send");
    let running = Running::start(host);
    // Put back more often than its two attempts would allow, had the put-backs counted.
    running
        .wait_for(Duration::from_secs(30), |h| h.stats().total().deferred >= 3)
        .await;
    assert!(
        running.host().stats().total().deferred >= 3,
        "put back while down: {:?}",
        running.host().stats().total()
    );
    // The store comes back (with its data: the server here keeps nothing on disk, so the
    // payload is written again, as a persistent store would have kept it).
    redis.restart();
    let pointer: serde_json::Value = serde_json::from_slice(&sent[0].body).expect("pointer");
    let key = format!("qhost:payload:{}", pointer[1]["key"].as_str().expect("key"));
    let mut conn = qhost_e2e::redis_server::connect(&redis.url()).await;
    redis::cmd("SET")
        .arg(&key)
        .arg(&body)
        .query_async::<()>(&mut conn)
        .await
        .expect("payload written back");
    running
        .wait_for(Duration::from_secs(30), |h| h.stats().total().acked >= 1)
        .await;
    let host = running.stop().await;
    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked, c.dead_lettered), (1, 1, 0), "{c:?}");
    assert_eq!(
        texts(&contents(&env.queue(), "sink").await),
        vec![digest(&body, "")]
    );
}
