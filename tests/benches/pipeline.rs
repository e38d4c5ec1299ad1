//! Pipeline throughput on the local queue (in-memory SQLite), in one process: a native Rust
//! handler as the baseline, the same work through a trivial WebAssembly plugin, and the wasm
//! plugin with the Redis idempotency store (the shared server at 127.0.0.1:6379, or
//! `QHOST_TEST_REDIS_URL`), printing messages/second, the ratio to the baseline, and Redis
//! round trips per message.
//!
//! `cargo bench -p qhost-e2e --bench pipeline` (QHOST_BENCH_MESSAGES overrides the 50,000).

use std::sync::Arc;
use std::time::Instant;

use qhost::handler::{HandlerMessage, Invocation, Outcome, Plugin};
use qhost::idempotency::IdempotencyStore;
use qhost::idempotency::local::LocalStore;
use qhost::idempotency::redis::RedisStore;
use qhost::message::Outgoing;
use qhost::runtime::manifest::Manifest;
use qhost::runtime::registry::Registry;
use qhost::source::QueueSource;
use qhost::source::local::LocalQueue;
use qhost::{Config, Host};
use tokio_util::sync::CancellationToken;

const QUEUE: &str = "bench";

fn config(plugin: &str) -> Config {
    let mut c = Config::parse(&format!(
        "max-in-flight = 64\n[retry]\nbase-secs = 0.01\nmax-secs = 0.05\n\
         [[queue]]\nname = \"{QUEUE}\"\nplugin = \"{plugin}\"\nwait-time-secs = 0\n"
    ))
    .expect("bench config");
    c.data_dir = None;
    c.namespace = format!("qhost-bench-{}", uuid::Uuid::new_v4().simple());
    c
}

async fn fill(source: &LocalQueue, n: usize) {
    for start in (0..n).step_by(1000) {
        let batch: Vec<Outgoing> = (start..(start + 1000).min(n))
            .map(|i| Outgoing::new(QUEUE, format!("ack {i}")))
            .collect();
        source.send(&batch).await.expect("fill");
    }
}

/// Messages per second for `n` messages through `plugin` with `store`.
async fn measure(plugin: Plugin, store: Arc<dyn IdempotencyStore>, n: usize) -> f64 {
    let config = config(&plugin.name);
    let source = Arc::new(LocalQueue::open(None, Default::default()).expect("queue"));
    fill(&source, n).await;
    let host = Host::new(config, source, store, Registry::new([plugin]));
    let started = Instant::now();
    host.run_until_idle(CancellationToken::new())
        .await
        .expect("run");
    let elapsed = started.elapsed();
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked),
        (n as u64, n as u64),
        "every message handled once"
    );
    n as f64 / elapsed.as_secs_f64()
}

fn wasm_plugin() -> Plugin {
    qhost_e2e::fixture_plugin("trivial", &config("trivial"))
}

fn native_plugin() -> Plugin {
    let handler = |_: HandlerMessage| Ok(Invocation::new(Outcome::Ack));
    Plugin::new("native", "native", Manifest::default(), Arc::new(handler))
}

fn local_store() -> Arc<dyn IdempotencyStore> {
    Arc::new(LocalStore::open(None).expect("store"))
}

fn row(label: &str, rate: f64, baseline: f64, extra: &str) {
    println!("{label:<34} {rate:>9.0} {:>10.2}  {extra}", rate / baseline);
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(50_000);
    qhost_e2e::built_plugins(); // build before printing, so cargo's output stays out of the table
    println!("pipeline, {n} messages, max-in-flight 64, local queue in memory");
    println!("{:<34} {:>9} {:>10}", "", "msg/s", "vs native");
    let native = measure(native_plugin(), local_store(), n).await;
    row("native handler, local store", native, native, "");
    let wasm = measure(wasm_plugin(), local_store(), n).await;
    row(
        "wasm plugin, local store",
        wasm,
        native,
        "(fresh instance per message)",
    );
    let url = qhost_e2e::redis_server::shared_url();
    match RedisStore::connect(&url).await {
        Ok(redis) => {
            let rate = measure(wasm_plugin(), Arc::new(redis.clone()), n).await;
            let per_message = redis.round_trips() as f64 / n as f64;
            row(
                "wasm plugin, Redis store",
                rate,
                native,
                &format!("({per_message:.3} Redis round trips per message)"),
            );
        }
        Err(e) => println!("wasm plugin, Redis store: skipped ({e:#})"),
    }
}
