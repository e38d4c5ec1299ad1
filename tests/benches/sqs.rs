//! The SQS source against the local SQS-compatible server (moto): messages/second through a
//! trivial WebAssembly plugin, and SQS API requests per 1,000 messages at steady state, next to
//! the floor for batches of ten (100 receives + 100 batch deletes = 200).
//!
//! The server sets the pace here (moto scans its whole queue on every receive), so the same run
//! first measures the server's own ceiling, a bare receive-and-delete loop through the same
//! client with no host, and prints qhost's rate as a ratio of it.
//!
//! `cargo bench -p qhost-e2e --bench sqs` (QHOST_BENCH_MESSAGES overrides the 500; run
//! `scripts/install-test-tools` first).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use qhost::idempotency::local::LocalStore;
use qhost::message::Outgoing;
use qhost::runtime::registry::Registry;
use qhost::source::QueueSource;
use qhost::source::sqs::SqsQueue;
use qhost::{Config, Host};
use qhost_e2e::sqs_server::{create_queue, endpoint, sdk_config, unique};
use tokio_util::sync::CancellationToken;

fn snapshot(q: &SqsQueue) -> [u64; 5] {
    let r = q.requests();
    [
        &r.receive,
        &r.delete,
        &r.change_visibility,
        &r.send,
        &r.other,
    ]
    .map(|c| c.load(Ordering::Relaxed))
}

async fn fill(sqs: &SqsQueue, queue: &str, n: usize) {
    for start in (0..n).step_by(10) {
        let batch: Vec<Outgoing> = (start..(start + 10).min(n))
            .map(|i| Outgoing::new(queue, format!("ack {i}")))
            .collect();
        sqs.send(&batch).await.expect("fill");
    }
}

/// Messages/second the server sustains for one receiver that deletes each batch at once.
async fn bare_loop(sqs: &SqsQueue, queue: &str, n: usize) -> f64 {
    let started = Instant::now();
    let mut done = 0;
    while done < n {
        let got = sqs
            .receive(queue, 10, Duration::from_secs(30), Duration::from_secs(1))
            .await
            .expect("receive");
        let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
        if !receipts.is_empty() {
            sqs.ack(queue, &receipts).await.expect("delete");
        }
        done += receipts.len();
    }
    n as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(500);
    let queue = unique("bench");
    create_queue(&queue, &[]).await;
    create_queue(&format!("{queue}-dlq"), &[]).await;
    let mut config = Config::parse(&format!(
        "max-in-flight = 64\n[[queue]]\nname = \"{queue}\"\nplugin = \"trivial\"\nwait-time-secs = 1\n"
    ))
    .expect("config");
    config.data_dir = None;

    let plugin = qhost_e2e::fixture_plugin("trivial", &config);

    let sqs = Arc::new(SqsQueue::from_sdk_config(&sdk_config()));
    fill(&sqs, &queue, n).await;
    let ceiling = bare_loop(&sqs, &queue, n).await;
    fill(&sqs, &queue, n).await;
    let store = Arc::new(LocalStore::open(None).expect("store"));
    let host = Host::new(config, sqs.clone(), store, Registry::new([plugin]));

    let before = snapshot(&sqs);
    let started = Instant::now();
    host.run_until_idle(CancellationToken::new())
        .await
        .expect("run");
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let after = snapshot(&sqs);
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked),
        (n as u64, n as u64),
        "every message handled once"
    );

    let per_k = |i: usize| (after[i] - before[i]) as f64 * 1000.0 / n as f64;
    let steady = per_k(0) + per_k(1) + per_k(2) + per_k(3);
    println!(
        "SQS source against {} (moto), {n} messages, max-in-flight 64",
        endpoint()
    );
    println!("server ceiling (receive + delete, no host): {ceiling:>8.1} msg/s");
    println!(
        "qhost, trivial wasm plugin:                 {rate:>8.1} msg/s   (ratio {:.2})",
        rate / ceiling
    );
    println!("requests per 1,000 messages:");
    println!("  ReceiveMessage                     {:>8.1}", per_k(0));
    println!("  DeleteMessageBatch                 {:>8.1}", per_k(1));
    println!("  ChangeMessageVisibility            {:>8.1}", per_k(2));
    println!("  SendMessageBatch                   {:>8.1}", per_k(3));
    println!(
        "  total, steady state                {steady:>8.1}   (floor with batches of 10: 200; ratio {:.2})",
        steady / 200.0
    );
    println!(
        "  GetQueueAttributes (idle checks)   {:>8.1}   (--until-idle only; not part of consuming)",
        per_k(4)
    );
}
