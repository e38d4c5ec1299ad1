//! The SQS path's client cost, with the server out of the picture: a loopback responder in
//! this process (`qhost_e2e::sqs_responder`: canned answers over HTTP/1.1 keep-alive, on a
//! thread whose CPU is left out) serves three consumers of the same messages, one after the
//! other, in one run:
//!
//! - a bare aws-sdk-sqs loop: receive 10, delete the batch (the floor any consumer using the SDK
//!   pays per message at that batch size);
//! - qhost with a trivial wasm plugin and the embedded store;
//! - the same with the Redis store (the tests' Redis on 127.0.0.1:6379).
//!
//! Each row prints CPU per message (user and system), CPU per SQS request, requests per message
//! by operation, and its ratio to the bare loop.
//!
//! `cargo bench -p qhost-e2e --bench sqs_client` (QHOST_BENCH_MESSAGES overrides the 20,000).

use std::sync::Arc;
use std::time::Duration;

use qhost::{Config, Host, IdempotencyStore, LocalStore, RedisStore, Registry, SqsQueue};
use qhost_e2e::cpu::CpuTime;
use qhost_e2e::sqs_responder::{OPERATIONS, Responder};
use qhost_e2e::sqs_server::sdk_config_for;
use tokio_util::sync::CancellationToken;

const QUEUE: &str = "bench";

/// What one row used.
struct Row {
    name: &'static str,
    cpu: CpuTime,
    requests: [u64; OPERATIONS.len()],
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
    }
}

async fn qhost_row(
    name: &'static str,
    responder: &Responder,
    store: Arc<dyn IdempotencyStore>,
    n: usize,
) -> Row {
    let mut config = Config::parse(&format!(
        "max-in-flight = 64\n[[queue]]\nname = \"{QUEUE}\"\nplugin = \"trivial\"\nwait-time-secs = 0\n"
    ))
    .expect("config");
    config.data_dir = None;
    let plugin = qhost_e2e::fixture_plugin("trivial", &config);
    let sqs = Arc::new(SqsQueue::from_sdk_config(&sdk_config_for(
        &responder.endpoint(),
    )));
    let host = Host::new(config, sqs, store, Registry::new([plugin]));
    responder.offer(n);
    let (start, served, calls) = (CpuTime::now(), responder.cpu(), responder.requests());
    host.run_until_idle(CancellationToken::new())
        .await
        .expect("run");
    let cpu = consumer_cpu(start, responder, served);
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked),
        (n as u64, n as u64),
        "every message ran once: {c:?}"
    );
    Row {
        name,
        cpu,
        requests: minus(responder.requests(), calls),
    }
}

fn minus(a: [u64; OPERATIONS.len()], b: [u64; OPERATIONS.len()]) -> [u64; OPERATIONS.len()] {
    std::array::from_fn(|i| a[i] - b[i])
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(20_000);
    let responder = Responder::start();
    let redis = RedisStore::connect(&qhost_e2e::redis_server::shared_url())
        .await
        .expect("the tests' Redis on 127.0.0.1:6379 (scripts/install-test-tools starts it)");
    let rows = [
        bare_loop(&responder, n).await,
        qhost_row(
            "qhost, trivial wasm plugin, embedded store",
            &responder,
            Arc::new(LocalStore::open(None).expect("store")),
            n,
        )
        .await,
        qhost_row(
            "qhost, trivial wasm plugin, Redis store",
            &responder,
            Arc::new(redis),
            n,
        )
        .await,
    ];
    println!(
        "SQS client cost, {n} messages per row, a loopback responder in this process (its CPU left out)\n"
    );
    let base = rows[0].cpu.micros_per(n);
    for r in &rows {
        let requests: u64 = r.requests.iter().sum();
        let per_request = (r.cpu.user + r.cpu.system).as_secs_f64() * 1e6 / requests.max(1) as f64;
        println!("{}", r.name);
        println!(
            "  CPU per message   {:>7.1} µs  (user {:.1}, system {:.1}; {:.2}× the bare loop)",
            r.cpu.micros_per(n),
            r.cpu.user.as_secs_f64() * 1e6 / n as f64,
            r.cpu.system.as_secs_f64() * 1e6 / n as f64,
            r.cpu.micros_per(n) / base
        );
        println!("  CPU per request   {per_request:>7.1} µs  ({requests} requests)");
        let by_op: Vec<String> = (OPERATIONS.iter().zip(r.requests))
            .filter(|(_, c)| *c > 0)
            .map(|(op, c)| format!("{op} {:.3}", c as f64 / n as f64))
            .collect();
        println!(
            "  requests/message  {:>7.3}     ({})\n",
            requests as f64 / n as f64,
            by_op.join(", ")
        );
    }
}
