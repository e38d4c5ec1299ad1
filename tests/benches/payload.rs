//! Claim-check throughput, in one run: 512 KiB payloads offloaded to the Redis payload store
//! (the shared server at 127.0.0.1:6379, or `QHOST_TEST_REDIS_URL`) against inline 200 KiB
//! messages, both through the trivial wasm plugin on the in-memory local queue. Prints
//! messages/s and MB/s of payload delivered to the handler, and the ratio of the two.
//!
//! `cargo bench -p qhost-e2e --bench payload` (QHOST_BENCH_MESSAGES overrides the 400).

use std::sync::Arc;

use qhost::Outgoing;
use qhost::plugins::Registry;
use qhost::sources::LocalQueue;
use qhost::sources::QueueSource;
use qhost::stores::LocalStore;
use qhost::{Config, Host};

const QUEUE: &str = "bench";

fn config() -> Config {
    let mut c = Config::parse(&format!(
        "max-in-flight = 32\n[payload]\nstore = \"redis\"\nurl = \"{}\"\n\
         [[queue]]\nname = \"{QUEUE}\"\nplugin = \"trivial\"\nwait-time-secs = 0\n",
        qhost_e2e::redis_server::shared_url()
    ))
    .expect("bench config");
    c.data_dir = None;
    c.compiled_cache = None;
    c.namespace = format!("qhost-bench-{}", uuid::Uuid::new_v4().simple());
    c
}

/// Messages/s and MB/s for `n` messages of `size` bytes.
async fn measure(size: usize, n: usize) -> (f64, f64, usize) {
    let config = config();
    let payloads = qhost::payloads::open(&config).await.expect("payload store");
    let mut body = b"ack;".to_vec();
    body.resize(size, b'p');
    let msgs: Vec<Outgoing> = (0..n).map(|_| Outgoing::new(QUEUE, body.clone())).collect();
    let msgs = payloads
        .offload_all(&config.namespace, 0, msgs)
        .await
        .expect("offload");
    let offloaded = msgs
        .iter()
        .filter(|m| qhost::testing::is_pointer(&m.attributes))
        .count();
    let source = Arc::new(LocalQueue::open(None, Default::default()).expect("queue"));
    for chunk in msgs.chunks(10) {
        source.send(chunk).await.expect("fill");
    }
    let plugin = qhost_e2e::fixture_plugin("trivial", &config);
    let store = Arc::new(LocalStore::open(None).expect("store"));
    let host = Host::new(config, source, store, Registry::new([plugin])).with_payloads(payloads);
    let rate = qhost_e2e::timed_run(&host, n).await;
    (rate, rate * size as f64 / 1e6, offloaded)
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(400);
    let (inline_rate, inline_mb, inline_off) = measure(200 * 1024, n).await;
    let (offload_rate, offload_mb, offloaded) = measure(512 * 1024, n).await;
    assert_eq!(
        (inline_off, offloaded),
        (0, n),
        "inline stayed inline, large went to Redis"
    );
    println!("{n} messages each, max-in-flight 32, trivial wasm plugin, local queue in memory");
    println!(
        "{:<36} {:>9} {:>9} {:>10}",
        "run", "msg/s", "MB/s", "vs inline"
    );
    println!(
        "{:<36} {inline_rate:>9.0} {inline_mb:>9.1} {:>10.2}",
        "inline 200 KiB", 1.0
    );
    println!(
        "{:<36} {offload_rate:>9.0} {offload_mb:>9.1} {:>10.2}",
        "512 KiB via the Redis payload store",
        offload_rate / inline_rate
    );
    println!(
        "MB/s ratio (offloaded / inline): {:.2}",
        offload_mb / inline_mb
    );
}
