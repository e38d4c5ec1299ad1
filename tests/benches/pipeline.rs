//! Pipeline throughput on the embedded backends (in-memory SQLite queue and idempotency store):
//! the same messages through a trivial WebAssembly plugin and through a native Rust handler,
//! in one process, printing messages/second for each and their ratio.
//!
//! `cargo bench -p qhost-e2e --bench pipeline` (QHOST_BENCH_MESSAGES overrides the 50,000).

use std::sync::Arc;
use std::time::Instant;

use qhost::handler::{HandlerMessage, Invocation, Outcome, Plugin};
use qhost::idempotency::local::LocalStore;
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
        "max-in-flight = 64\n[retry]\nbase-secs = 0\nmax-secs = 0\n\
         [[queue]]\nname = \"{QUEUE}\"\nplugin = \"{plugin}\"\nwait-time-secs = 0\n"
    ))
    .expect("bench config");
    c.data_dir = None;
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

/// Messages per second for `n` messages through `plugin`.
async fn measure(plugin: Plugin, n: usize) -> f64 {
    let config = config(&plugin.name);
    let source = Arc::new(LocalQueue::open(None, Default::default()).expect("queue"));
    fill(&source, n).await;
    let store = Arc::new(LocalStore::open(None).expect("store"));
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
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("trivial.wasm");
    std::fs::write(&path, qhost_e2e::plugin_bytes("fixture")).expect("install");
    let runtime = qhost::host::runtime_for(&config("trivial")).expect("engine");
    qhost::runtime::loader::load_file(&runtime, &path).expect("load")
}

fn native_plugin() -> Plugin {
    let handler = |_: &HandlerMessage| Ok(Invocation::new(Outcome::Ack));
    Plugin::new("native", "native", Manifest::default(), Arc::new(handler))
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("QHOST_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let wasm = wasm_plugin();
    println!("pipeline on the local queue, in-memory stores, {n} messages, max-in-flight 64");
    let wasm_rate = measure(wasm, n).await;
    println!("wasm plugin (fresh instance per message): {wasm_rate:>10.0} msg/s");
    let native_rate = measure(native_plugin(), n).await;
    println!("native Rust handler:                      {native_rate:>10.0} msg/s");
    println!(
        "wasm / native:                            {:>10.2}",
        wasm_rate / native_rate
    );
}
