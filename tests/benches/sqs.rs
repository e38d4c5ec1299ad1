//! The SQS source against the local SQS-compatible server (moto): messages/second through a
//! trivial WebAssembly plugin with the Redis idempotency store (the local store when Redis is
//! not there), qhost's CPU per message with the kernel's share, and SQS API requests per 1,000
//! messages at steady state, next to the floor for batches of ten (100 receives + 100 batch
//! deletes = 200).
//!
//! The server sets the pace here (moto scans its whole queue on every receive and delete), so the same run
//! first measures the server's own ceiling, a bare receive-and-delete loop through the same
//! client with no host, and prints qhost's rate as a ratio of it. The same loop's CPU per
//! message is the floor any consumer using the SDK pays; the server's CPU is not counted (it is
//! another process). moto closes the connection after every response, so each request here
//! also pays a TCP connect; the loop's CPU per request prices that, and qhost's CPU less its
//! requests at that price is the host's own work per message.
//!
//! Both run a chunk at a time (see [`CHUNK`]), and only the consuming is timed and counted.
//!
//! `cargo bench -p qhost-e2e --bench sqs` (QHOST_BENCH_MESSAGES overrides the 20,000; the bare
//! loop runs at most 2,000; run `scripts/install-test-tools` first).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use qhost::Outgoing;
use qhost::plugins::Registry;
use qhost::sources::QueueSource;
use qhost::sources::SqsQueue;
use qhost::stores::LocalStore;
use qhost::stores::RedisStore;
use qhost::stores::Store;
use qhost::{Config, Host};
use qhost_e2e::cpu::CpuTime;
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

/// Messages put on the queue at a time: moto's receive and delete scan its whole queue, so a
/// long backlog would measure moto, not the consumer.
const CHUNK: usize = 250;

/// Time and CPU over the measured stretches of a run.
#[derive(Default)]
struct Tally {
    secs: f64,
    cpu: CpuTime,
}

impl Tally {
    /// Adds the stretch that began at `started`, with CPU `cpu` at its start.
    fn add(&mut self, started: Instant, cpu: CpuTime) {
        let used = cpu.elapsed();
        self.secs += started.elapsed().as_secs_f64();
        self.cpu.user += used.user;
        self.cpu.system += used.system;
    }
}

/// One receiver that deletes each batch at once, with no host: the server's ceiling and the
/// SDK's own CPU per message.
async fn bare_loop(sqs: &SqsQueue, filler: &SqsQueue, queue: &str, n: usize) -> Tally {
    let mut tally = Tally::default();
    for start in (0..n).step_by(CHUNK) {
        let chunk = CHUNK.min(n - start);
        fill(filler, queue, chunk).await;
        let (cpu, started) = (CpuTime::now(), Instant::now());
        let mut done = 0;
        while done < chunk {
            let got = sqs
                .receive(queue, 10, Duration::from_secs(30), Duration::from_secs(1))
                .await
                .expect("receive");
            let receipts: Vec<String> = got.iter().map(|m| m.handle.clone()).collect();
            if !receipts.is_empty() {
                sqs.settle(queue, &receipts).await.expect("delete");
            }
            done += receipts.len();
        }
        tally.add(started, cpu);
    }
    tally
}

/// The host consuming `n` messages, a chunk at a time.
async fn consume(host: &Host, filler: &SqsQueue, queue: &str, n: usize) -> Tally {
    let mut tally = Tally::default();
    for start in (0..n).step_by(CHUNK) {
        fill(filler, queue, CHUNK.min(n - start)).await;
        let (cpu, started) = (CpuTime::now(), Instant::now());
        host.run_until_idle(CancellationToken::new())
            .await
            .expect("run");
        tally.add(started, cpu);
    }
    tally
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(20_000);
    let bare_n = n.min(2_000);
    let queue = unique("bench");
    create_queue(&queue, &[]).await;
    create_queue(&format!("{queue}-dlq"), &[]).await;
    let mut config = Config::parse(&format!(
        "max-in-flight = 64\n[[queue]]\nname = \"{queue}\"\nplugin = \"trivial\"\nwait-time-secs = 0\n"
    ))
    .expect("config");
    config.data_dir = None;

    let plugin = qhost_e2e::fixture_plugin("trivial", &config);

    // Filling goes through its own client, so the counts below are the consumer's alone.
    let filler = SqsQueue::from_sdk_config(&sdk_config());
    let sqs = Arc::new(SqsQueue::from_sdk_config(&sdk_config()));
    let bare_before = snapshot(&sqs);
    let bare = bare_loop(&sqs, &filler, &queue, bare_n).await;
    let bare_requests: u64 = snapshot(&sqs)
        .iter()
        .zip(bare_before)
        .map(|(a, b)| a - b)
        .sum();
    let (store, store_name): (Arc<dyn Store>, _) =
        match RedisStore::connect(&qhost_e2e::redis_server::shared_url()).await {
            Ok(redis) => (Arc::new(redis), "Redis"),
            Err(_) => (Arc::new(LocalStore::open(None).expect("store")), "local"),
        };
    let host = Host::new(config, sqs.clone(), store, Registry::new([plugin]));

    let before = snapshot(&sqs);
    let run = consume(&host, &filler, &queue, n).await;
    let after = snapshot(&sqs);
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked),
        (n as u64, n as u64),
        "every message handled once"
    );

    let ceiling = bare_n as f64 / bare.secs;
    let rate = n as f64 / run.secs;
    let per_k = |i: usize| (after[i] - before[i]) as f64 * 1000.0 / n as f64;
    let steady = per_k(0) + per_k(1) + per_k(2) + per_k(3);
    // What one request costs this process, from the bare loop; what is left of qhost's CPU
    // after its own requests at that price is its work per message.
    let per_request = (bare.cpu.user + bare.cpu.system).as_secs_f64() * 1e6 / bare_requests as f64;
    let requests: u64 = after.iter().zip(before).map(|(a, b)| a - b).sum();
    let own = run.cpu.micros_per(n) - per_request * requests as f64 / n as f64;
    println!(
        "SQS source against {} (moto), {n} messages in chunks of {CHUNK}, max-in-flight 64",
        endpoint()
    );
    let label = |text: String| format!("{text:<46}");
    println!(
        "{}{ceiling:>8.1} msg/s",
        label("server ceiling (receive + delete, no host)".into())
    );
    println!(
        "{}{rate:>8.1} msg/s   (ratio {:.2})",
        label(format!("qhost, trivial wasm plugin, {store_name} store")),
        rate / ceiling
    );
    println!("CPU per message in this process (the server's is not counted):");
    println!(
        "{}{:>8.1} µs   ({:.0}% kernel)",
        label("  bare receive + delete loop".into()),
        bare.cpu.micros_per(bare_n),
        bare.cpu.kernel_share() * 100.0
    );
    println!(
        "{}{:>8.1} µs   ({:.0}% kernel; {:.2}× the loop)",
        label("  qhost".into()),
        run.cpu.micros_per(n),
        run.cpu.kernel_share() * 100.0,
        run.cpu.micros_per(n) / bare.cpu.micros_per(bare_n)
    );
    println!(
        "{}{per_request:>8.1} µs   (the loop's CPU / its {bare_requests} requests)",
        label("  one SQS request".into())
    );
    println!(
        "{}{own:>8.1} µs   (qhost less its {:.2} requests/message at that price)",
        label("  qhost's own work".into()),
        requests as f64 / n as f64
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
