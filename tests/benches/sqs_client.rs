//! The SQS path's client cost, with the server out of the picture: a loopback responder in
//! this process (`qhost_e2e::sqs_responder`: canned answers over HTTP/1.1 keep-alive, on a
//! thread whose CPU is left out) serves six consumers of the same deliveries, one after the
//! other, in one run. Every tenth delivery is a duplicate of a message delivered 200 messages
//! earlier (SQS's at-least-once delivery), which a consumer must not run again:
//!
//! - a bare aws-sdk-sqs loop: receive 10, delete the batch, no lease (the floor any consumer
//!   using the SDK pays per message at that batch size; it runs the duplicates);
//! - qhost with a trivial wasm plugin and the embedded store;
//! - the same with the Redis store (the tests' Redis on 127.0.0.1:6379);
//! - the Python worker a team writes today (`tests/support/sqs_python_worker.py`: boto3 and
//!   redis-py, a `SET NX` lease per message, the seed's shape), its CPU as it reports it for its
//!   consuming loop (interpreter start-up left out);
//! - qhost with Redis again, every tenth delivery now a copy of the message three before it
//!   (a producer's retried send): copies meet their first one while it runs and are put back,
//!   which shows what put-backs cost in requests;
//! - qhost with Redis and the plugin's instance reused for 1,000 messages (`reuse-instance`):
//!   what the path costs without a fresh sandbox per message.
//!
//! Each row prints CPU per delivery (user and system), CPU per SQS request, SQS requests and
//! Redis round trips per delivery, by operation, and its ratio to the bare loop and to the
//! Python worker.
//!
//! `cargo bench -p qhost-e2e --bench sqs_client` (QHOST_BENCH_MESSAGES overrides the 20,000
//! deliveries; run `scripts/install-test-tools` first, for Redis and the Python peer). To profile
//! one row alone, `QHOST_BENCH_ONLY=redis` (or `embedded`, `reused` or `bare`) runs just that row, for
//! `perf record`.

use std::sync::Arc;
use std::time::Duration;

use qhost::{Config, Host, LocalStore, RedisStore, Registry, SqsQueue, Store};
use qhost_e2e::cpu::CpuTime;
use qhost_e2e::sqs_responder::{OPERATIONS, Responder};
use qhost_e2e::sqs_server::sdk_config_for;
use tokio_util::sync::CancellationToken;

const QUEUE: &str = "bench";

/// Every n-th delivery is a duplicate.
const DUPLICATE_EVERY: usize = 10;
/// How far back a duplicate reaches, in messages: its first copy has finished, as a
/// redelivery minutes later finds it.
const FAR: u64 = 200;
/// How far back a close copy reaches: in the same batch, or while the first copy runs.
const CLOSE: u64 = 3;

/// The plugin's manifest in the last row: an instance serves many messages, which takes the
/// price of a fresh sandbox per message out of the path.
const REUSED: &str = "[limits]\nreuse-instance = 1000\n";

/// What one row used.
struct Row {
    name: &'static str,
    cpu: CpuTime,
    requests: [u64; OPERATIONS.len()],
    /// Redis round trips, where the row uses Redis.
    round_trips: Option<u64>,
    /// Copies put back because their key was leased (qhost's rows).
    busy: Option<u64>,
}

/// CPU this process used since `before`, less what the responder's thread used since
/// `responder_before` (taken from user time: it is nearly all user time).
fn consumer_cpu(before: CpuTime, responder: &Responder, responder_before: Duration) -> CpuTime {
    let mut used = before.elapsed();
    let served = responder.cpu().saturating_sub(responder_before);
    used.user = used.user.saturating_sub(served);
    used
}

async fn bare_loop(responder: &Responder, n: usize) -> Row {
    let client = aws_sdk_sqs::Client::new(&sdk_config_for(&responder.endpoint()));
    let url = (client.get_queue_url().queue_name(QUEUE).send().await)
        .expect("a queue URL")
        .queue_url()
        .expect("a URL")
        .to_string();
    responder.offer(n);
    let (start, served, calls) = (CpuTime::now(), responder.cpu(), responder.requests());
    let mut done = 0;
    while done < n {
        let got = (client.receive_message().queue_url(&url))
            .max_number_of_messages(10)
            .send()
            .await
            .expect("receive");
        let entries: Vec<_> = (got.messages().iter().enumerate())
            .map(|(i, m)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .expect("an entry")
            })
            .collect();
        done += entries.len();
        if !entries.is_empty() {
            (client.delete_message_batch().queue_url(&url))
                .set_entries(Some(entries))
                .send()
                .await
                .expect("delete");
        }
    }
    Row {
        name: "bare aws-sdk-sqs loop (receive 10 + delete batch)",
        cpu: consumer_cpu(start, responder, served),
        requests: minus(responder.requests(), calls),
        round_trips: None,
        busy: None,
    }
}

/// qhost on `store`, the trivial plugin under `manifest` (a manifest's TOML, "" for none).
async fn qhost_row(
    name: &'static str,
    responder: &Responder,
    store: Arc<dyn Store>,
    redis: Option<&RedisStore>,
    n: usize,
    manifest: &str,
) -> Row {
    let mut config = Config::parse(&format!(
        "max-in-flight = 64\n[[queue]]\nname = \"{QUEUE}\"\nplugin = \"trivial\"\n"
    ))
    .expect("config");
    config.data_dir = None;
    let plugin = qhost_e2e::fixture_plugin_with("trivial", &config, manifest);
    let sqs = Arc::new(SqsQueue::from_sdk_config(&sdk_config_for(
        &responder.endpoint(),
    )));
    let host = Host::new(config, sqs, store, Registry::new([plugin]));
    let (duplicates, trips) = (responder.duplicates(), redis.map(RedisStore::round_trips));
    responder.offer(n);
    let (start, served, calls) = (CpuTime::now(), responder.cpu(), responder.requests());
    host.run_until_idle(CancellationToken::new())
        .await
        .expect("run");
    let cpu = consumer_cpu(start, responder, served);
    let c = host.stats().total();
    let duplicates = responder.duplicates() - duplicates;
    let distinct = n as u64 - duplicates;
    assert_eq!(
        (c.invoked, c.acked, c.duplicates),
        (distinct, distinct, duplicates),
        "every message ran once and every duplicate was suppressed: {c:?}"
    );
    Row {
        name,
        cpu,
        requests: minus(responder.requests(), calls),
        round_trips: redis.zip(trips).map(|(r, before)| r.round_trips() - before),
        busy: Some(c.busy),
    }
}

/// qhost on Redis with every tenth delivery a copy of a message three before it, as a
/// producer's retried sends arrive: copies meet their first one in a batch or while it runs,
/// and go back (busy) until it is done. Shows what the put-backs cost in requests.
async fn close_copies(responder: &Responder, redis: &RedisStore, n: usize) -> Row {
    responder.duplicate_every(DUPLICATE_EVERY, CLOSE);
    let row = qhost_row(
        "qhost, Redis store, copies close together (put back while the first runs)",
        responder,
        Arc::new(redis.clone()),
        Some(redis),
        n,
        "",
    )
    .await;
    responder.duplicate_every(DUPLICATE_EVERY, FAR);
    row
}

fn python_row(responder: &Responder, n: usize) -> Row {
    let root = qhost_e2e::workspace();
    let duplicates = responder.duplicates();
    responder.offer(n);
    let calls = responder.requests();
    let out = std::process::Command::new(root.join("target/tools/moto/bin/python"))
        .arg(root.join("tests/support/sqs_python_worker.py"))
        .arg(responder.endpoint())
        .arg(QUEUE)
        .arg(qhost_e2e::redis_server::shared_url())
        .arg(n.to_string())
        .arg(format!("bench-py-{}", uuid::Uuid::new_v4().simple()))
        .output()
        .expect("the Python worker (scripts/install-test-tools installs boto3 and redis-py)");
    assert!(
        out.status.success(),
        "the Python worker: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the Python worker's report");
    let duplicates = responder.duplicates() - duplicates;
    assert_eq!(
        (report["handled"].as_u64(), report["duplicates"].as_u64()),
        (Some(n as u64 - duplicates), Some(duplicates)),
        "the Python worker ran each message once: {report}"
    );
    let seconds = |field: &str| Duration::from_secs_f64(report[field].as_f64().unwrap_or(0.0));
    Row {
        name: "Python worker: boto3 + redis-py SET NX (the seed's shape)",
        cpu: CpuTime {
            user: seconds("user"),
            system: seconds("system"),
        },
        requests: minus(responder.requests(), calls),
        round_trips: report["round_trips"].as_u64(),
        busy: None,
    }
}

fn minus(a: [u64; OPERATIONS.len()], b: [u64; OPERATIONS.len()]) -> [u64; OPERATIONS.len()] {
    std::array::from_fn(|i| a[i] - b[i])
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(20_000);
    let responder = Responder::start();
    responder.duplicate_every(DUPLICATE_EVERY, FAR);
    let redis = RedisStore::connect(&qhost_e2e::redis_server::shared_url())
        .await
        .expect("the tests' Redis on 127.0.0.1:6379 (scripts/install-test-tools starts it)");
    if let Ok(only) = std::env::var("QHOST_BENCH_ONLY") {
        let row = match only.as_str() {
            "bare" => bare_loop(&responder, n).await,
            "reused" => {
                qhost_row(
                    "qhost, Redis store, instance reused",
                    &responder,
                    Arc::new(redis.clone()),
                    Some(&redis),
                    n,
                    REUSED,
                )
                .await
            }
            "redis" => {
                qhost_row(
                    "qhost, Redis store",
                    &responder,
                    Arc::new(redis.clone()),
                    Some(&redis),
                    n,
                    "",
                )
                .await
            }
            _ => {
                qhost_row(
                    "qhost, embedded store",
                    &responder,
                    Arc::new(LocalStore::open(None).expect("store")),
                    None,
                    n,
                    "",
                )
                .await
            }
        };
        let cpu = row.cpu.micros_per(n);
        print_row(&row, n, cpu, cpu);
        return;
    }
    let rows = [
        bare_loop(&responder, n).await,
        qhost_row(
            "qhost, trivial wasm plugin, embedded store",
            &responder,
            Arc::new(LocalStore::open(None).expect("store")),
            None,
            n,
            "",
        )
        .await,
        qhost_row(
            "qhost, trivial wasm plugin, Redis store",
            &responder,
            Arc::new(redis.clone()),
            Some(&redis),
            n,
            "",
        )
        .await,
        python_row(&responder, n),
        close_copies(&responder, &redis, n).await,
        qhost_row(
            "qhost, Redis store, one instance for 1,000 messages (reuse-instance = 1000)",
            &responder,
            Arc::new(redis.clone()),
            Some(&redis),
            n,
            REUSED,
        )
        .await,
    ];
    println!(
        "SQS client cost, {n} deliveries per row (every {DUPLICATE_EVERY}th a duplicate), a \
         loopback responder in this process (its CPU left out)\n"
    );
    let (base, python) = (rows[0].cpu.micros_per(n), rows[3].cpu.micros_per(n));
    for r in &rows {
        print_row(r, n, base, python);
    }
}

fn print_row(r: &Row, n: usize, base: f64, python: f64) {
    let requests: u64 = r.requests.iter().sum();
    let per_request = (r.cpu.user + r.cpu.system).as_secs_f64() * 1e6 / requests.max(1) as f64;
    println!("{}", r.name);
    println!(
        "  CPU per delivery  {:>7.1} µs  (user {:.1}, system {:.1}; {:.2}× the bare loop, \
         {:.1}× less than the Python worker)",
        r.cpu.micros_per(n),
        r.cpu.user.as_secs_f64() * 1e6 / n as f64,
        r.cpu.system.as_secs_f64() * 1e6 / n as f64,
        r.cpu.micros_per(n) / base,
        python / r.cpu.micros_per(n)
    );
    println!("  CPU per request   {per_request:>7.1} µs  ({requests} requests)");
    let by_op: Vec<String> = (OPERATIONS.iter().zip(r.requests))
        .filter(|(_, c)| *c > 0)
        .map(|(op, c)| format!("{op} {:.3}", c as f64 / n as f64))
        .collect();
    println!(
        "  requests/delivery {:>7.3}     ({}; {:.0} per 1,000 deliveries)",
        requests as f64 / n as f64,
        by_op.join(", "),
        requests as f64 * 1000.0 / n as f64
    );
    if let Some(trips) = r.round_trips {
        println!(
            "  Redis round trips {:>7.3}     per delivery",
            trips as f64 / n as f64
        );
    }
    if let Some(busy) = r.busy.filter(|b| *b > 0) {
        println!("  put back busy     {busy:>7}     (copies whose key was leased while they came)");
    }
    println!();
}
