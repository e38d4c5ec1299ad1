//! Pipeline throughput on the local queue (in-memory SQLite), in one process: a native Rust
//! handler as the baseline, the same work through a trivial WebAssembly plugin, and the wasm
//! plugin with the Redis idempotency store (the shared server at 127.0.0.1:6379, or
//! `QHOST_TEST_REDIS_URL`), printing messages/second and CPU per message (with the kernel's
//! share), each with its ratio to the baseline, and Redis round trips per message; the same
//! plugin on a local Redis Cluster (three primaries, started here when redis-cli is
//! installed); the same plugin with the PostgreSQL store (the tests' database, a schema of its
//! own, dropped after), with its round trips per message and the database server's CPU per
//! message; and the memory a completed key costs in Redis. The cases run
//! interleaved in three rounds and each figure is its median round.
//!
//! A batch handler (`handle-batch`, the `batch-fixture` plugin, acking each message it is
//! given) runs the same messages in calls of 10 and of 100, against the one-message-per-call
//! wasm row: max-in-flight is raised to twice the batch size for those, so calls can fill.
//!
//! The wasm case also runs with a canary beside it (another version of the plugin taking half
//! the keys, as a rollout's canary does), and traced, exporting every span over OTLP/HTTP to a receiver on
//! loopback, with the spans and bytes exported per message.
//!
//! `cargo bench -p qhost-e2e --bench pipeline` (QHOST_BENCH_MESSAGES overrides the 50,000).

use std::sync::Arc;
use std::time::Instant;

use qhost::Outgoing;
use qhost::handlers::{HandlerMessage, Invocation, Outcome};
use qhost::plugins::Manifest;
use qhost::plugins::Plugin;
use qhost::plugins::Registry;
use qhost::sources::LocalQueue;
use qhost::sources::QueueSource;
use qhost::stores::LocalStore;
use qhost::stores::RedisStore;
use qhost::stores::Store;
use qhost::{Config, Host};
use qhost::{Tracer, Traces};
use qhost_e2e::cpu::CpuTime;
use qhost_e2e::otlp::Receiver;
use qhost_e2e::redis_cluster::RedisCluster;
use tokio_util::sync::CancellationToken;

const QUEUE: &str = "bench";

fn config(plugin: &str) -> Config {
    let mut c = Config::parse(&format!(
        "max-in-flight = 64\n[retry]\nbase-secs = 0.01\nmax-secs = 0.05\n\
         [[queue]]\nname = \"{QUEUE}\"\nplugin = \"{plugin}\"\nwait-time-secs = 0\n"
    ))
    .expect("bench config");
    c.data_dir = None;
    // As short as the default `qhost`, give or take three characters, so the memory a key
    // costs below is what a deployment's keys cost.
    c.namespace = format!("qb{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
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

/// One run's figures: messages per second, and CPU per message (user and kernel).
#[derive(Clone)]
struct Run {
    namespace: String,
    rate: f64,
    cpu: CpuTime,
}

/// Runs `n` messages through `plugin` with `store`.
async fn measure(plugin: Plugin, store: Arc<dyn Store>, n: usize) -> Run {
    measure_traced(plugin, store, n, None).await
}

/// Runs `n` messages through `plugin` with `store`, traced by `tracer` if given.
async fn measure_traced(
    plugin: Plugin,
    store: Arc<dyn Store>,
    n: usize,
    tracer: Option<Tracer>,
) -> Run {
    measure_in(plugin, store, n, tracer, None).await
}

/// Runs `n` messages through `plugin` with `store`, traced by `tracer` if given, with
/// `canary` beside it taking half the keys if given.
async fn measure_in(
    plugin: Plugin,
    store: Arc<dyn Store>,
    n: usize,
    tracer: Option<Tracer>,
    canary: Option<Plugin>,
) -> Run {
    let mut config = config(&plugin.name);
    if plugin.is_batch() {
        config.max_in_flight = config.max_in_flight.max(2 * BATCH_SIZES[1]);
    }
    let namespace = config.namespace.clone();
    let source = Arc::new(LocalQueue::open(None, Default::default()).expect("queue"));
    fill(&source, n).await;
    let mut host = Host::new(config, source, store, Registry::new([plugin]));
    if let Some(tracer) = tracer {
        host = host.traced_by(tracer);
    }
    if let Some(canary) = canary {
        qhost::testing::start_canary(&host, canary, CANARY_PERCENT);
    }
    let cpu = CpuTime::now();
    let started = Instant::now();
    host.run_until_idle(CancellationToken::new())
        .await
        .expect("run");
    let elapsed = started.elapsed();
    let cpu = cpu.elapsed();
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked),
        (n as u64, n as u64),
        "every message handled once"
    );
    Run {
        namespace,
        rate: n as f64 / elapsed.as_secs_f64(),
        cpu,
    }
}

/// The run with the median rate of `runs`.
fn median(mut runs: Vec<Run>) -> Run {
    runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    runs.swap_remove(runs.len() / 2)
}

fn wasm_plugin() -> Plugin {
    qhost_e2e::fixture_plugin("trivial", &config("trivial"))
}

/// The share of keys the canary case's new version takes.
const CANARY_PERCENT: u8 = 50;

/// The trivial plugin's other version (the same behaviour, another content hash).
fn canary_plugin() -> Plugin {
    qhost_e2e::fixture_variant("trivial", &config("trivial"), "canary")
}

/// The batch sizes the batch rows run.
const BATCH_SIZES: [usize; 2] = [10, 100];

/// The batch fixture, gathering up to `size` messages per call.
fn batch_plugin(size: usize) -> Plugin {
    let manifest = format!("[batch]\nmax-messages = {size}\nmax-wait-ms = 5\n");
    qhost_e2e::built_plugin_as("batch-fixture", "batched", &config("batched"), &manifest)
}

/// The trivial plugin under a fleet-wide concurrency limit (`docs/flow.md`), high enough that
/// no message waits: what taking and giving back a flow slot costs.
fn flow_plugin() -> Plugin {
    let manifest = "[flow]\nmax-concurrency = 10000\n";
    qhost_e2e::fixture_plugin_with("trivial", &config("trivial"), manifest)
}

fn native_plugin() -> Plugin {
    let handler = |_: HandlerMessage| Ok(Invocation::new(Outcome::Ack));
    Plugin::new("native", "native", Manifest::default(), Arc::new(handler))
}

fn local_store() -> Arc<dyn Store> {
    Arc::new(LocalStore::open(None).expect("store"))
}

fn row(label: &str, run: &Run, baseline: &Run, n: usize, extra: &str) {
    let cpu = run.cpu.micros_per(n);
    println!(
        "{label:<28} {:>8.0} {:>6.2} {cpu:>10.1} {:>6.2} {:>7.0}%  {extra}",
        run.rate,
        run.rate / baseline.rate,
        baseline.cpu.micros_per(n) / cpu,
        run.cpu.kernel_share() * 100.0,
    );
}

/// Mean `MEMORY USAGE` of up to 200 completed keys in `namespace`, and their mean length.
async fn memory_per_key(namespace: &str) -> (f64, usize) {
    let url = qhost_e2e::redis_server::shared_url();
    let mut conn = qhost_e2e::redis_server::connect(&url).await;
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{namespace}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("SCAN");
        keys.extend(batch);
        cursor = next;
        if cursor == 0 || keys.len() >= 200 {
            break;
        }
    }
    keys.truncate(200);
    let mut total = 0u64;
    for key in &keys {
        let bytes: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("MEMORY USAGE");
        total += bytes;
    }
    let n = keys.len().max(1);
    (
        total as f64 / n as f64,
        keys.iter().map(String::len).sum::<usize>() / n,
    )
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(50_000);
    let rounds = 3;
    qhost_e2e::built_plugins(); // build before printing, so cargo's output stays out of the table
    let redis = RedisStore::connect(&qhost_e2e::redis_server::shared_url()).await;
    // Its own connection, so its round trips are counted apart.
    let flow_redis = RedisStore::connect(&qhost_e2e::redis_server::shared_url()).await;
    // A local cluster when redis-server and redis-cli are installed (scripts/install-test-tools):
    // three primaries without replicas, like for like with the single server (on one machine,
    // replicas would only take CPU from the rest).
    let cluster = which("redis-cli").then(|| RedisCluster::without_replicas(3));
    let cluster_store = match &cluster {
        Some(c) => Some(
            RedisStore::connect_to(&c.target())
                .await
                .expect("the local cluster"),
        ),
        None => None,
    };
    // Traces exported over OTLP/HTTP to a receiver on loopback that keeps the bytes.
    let receiver = Receiver::start().await;
    let traces = Traces::exporting_to(format!("{}/v1/traces", receiver.endpoint()))
        .expect("the trace exporter");
    // Rounds interleave the cases, so a machine that drifts moves them all alike; each figure is
    // the round with the median rate.
    let (mut native, mut wasm, mut traced, mut with_redis, mut on_cluster) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut canary, mut flowed) = (Vec::new(), Vec::new());
    let pg_schema = qhost_e2e::postgres::unique_schema("bench");
    let postgres = qhost_e2e::postgres::store(&pg_schema).await;
    let (mut on_postgres, mut pg_server) = (Vec::new(), Vec::new());
    let mut batched: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        native.push(measure(native_plugin(), local_store(), n).await);
        wasm.push(measure(wasm_plugin(), local_store(), n).await);
        for (runs, size) in batched.iter_mut().zip(BATCH_SIZES) {
            runs.push(measure(batch_plugin(size), local_store(), n).await);
        }
        let beside = Some(canary_plugin());
        canary.push(measure_in(wasm_plugin(), local_store(), n, None, beside).await);
        let tracer = Some(traces.tracer());
        traced.push(measure_traced(wasm_plugin(), local_store(), n, tracer).await);
        if let Ok(redis) = &redis {
            with_redis.push(measure(wasm_plugin(), Arc::new(redis.clone()), n).await);
        }
        if let Ok(store) = &flow_redis {
            flowed.push(measure(flow_plugin(), Arc::new(store.clone()), n).await);
        }
        if let Some(store) = &cluster_store {
            on_cluster.push(measure(wasm_plugin(), Arc::new(store.clone()), n).await);
        }
        if let Ok(store) = &postgres {
            let server = qhost_e2e::postgres::server_cpu();
            on_postgres.push(measure(wasm_plugin(), Arc::new(store.clone()), n).await);
            pg_server.push(qhost_e2e::postgres::server_cpu().saturating_sub(server));
        }
    }
    println!(
        "pipeline, {n} messages, max-in-flight 64, local queue in memory, median of {rounds} rounds"
    );
    println!(
        "{:<28} {:>8} {:>6} {:>10} {:>6} {:>8}",
        "", "msg/s", "ratio", "CPU µs/msg", "ratio", "kernel"
    );
    let native = median(native);
    row("native handler, local store", &native, &native, n, "");
    let wasm = median(wasm);
    row(
        "wasm plugin, local store",
        &wasm,
        &native,
        n,
        "(fresh instance per message)",
    );
    for (runs, size) in batched.into_iter().zip(BATCH_SIZES) {
        let run = median(runs);
        row(
            &format!("  batch handler, calls of {size}"),
            &run,
            &native,
            n,
            &format!(
                "({:.2}x the rate of one message per call, {:.2}x less CPU per message)",
                run.rate / wasm.rate,
                wasm.cpu.micros_per(n) / run.cpu.micros_per(n),
            ),
        );
    }
    let canary = median(canary);
    row(
        "  with a canary beside it",
        &canary,
        &native,
        n,
        &format!(
            "({CANARY_PERCENT}% of keys on another version; {:.2} of the rate without, {:+.1} µs CPU per message)",
            canary.rate / wasm.rate,
            canary.cpu.micros_per(n) - wasm.cpu.micros_per(n),
        ),
    );
    traces.shutdown().await;
    let spans = receiver.spans();
    let traced = median(traced);
    row(
        "  and traced (OTLP/HTTP)",
        &traced,
        &native,
        n,
        &format!(
            "({:.2} of the untraced rate, {:.2}x its CPU; {:.1} spans and {:.0} bytes exported \
             per message)",
            traced.rate / wasm.rate,
            traced.cpu.micros_per(n) / wasm.cpu.micros_per(n),
            spans.len() as f64 / (n * rounds) as f64,
            receiver.bytes() as f64 / (n * rounds) as f64,
        ),
    );
    let (mut single_rate, mut single_cpu) = (None, None);
    match &redis {
        Ok(redis) => {
            let per_message = redis.round_trips() as f64 / (n * rounds) as f64;
            let run = median(with_redis);
            single_rate = Some(run.rate);
            single_cpu = Some(run.cpu.micros_per(n));
            row(
                "wasm plugin, Redis store",
                &run,
                &native,
                n,
                &format!("({per_message:.3} Redis round trips per message)"),
            );
            let (bytes, key_len) = memory_per_key(&run.namespace).await;
            println!(
                "Redis memory per completed key: {bytes:.0} bytes (MEMORY USAGE over 200 keys \
                 of {key_len} characters, such as `{}:{{trivial:MESSAGE-ID}}`)",
                run.namespace
            );
        }
        Err(e) => println!("wasm plugin, Redis store: skipped ({e:#})"),
    }
    if let (Ok(store), Some(run), Ok(redis)) = (&flow_redis, flowed.first(), &redis) {
        let per_message = store.round_trips() as f64 / (n * rounds) as f64;
        let plain = redis.round_trips() as f64 / (n * rounds) as f64;
        let flowed = median(flowed.clone());
        let redis_cpu = single_cpu.unwrap_or(run.cpu.micros_per(n));
        row(
            "  with a flow limit",
            &flowed,
            &native,
            n,
            &format!(
                "(max-concurrency: {per_message:.3} round trips per message against {plain:.3}, \
                 {:+.1} µs CPU per message)",
                flowed.cpu.micros_per(n) - redis_cpu,
            ),
        );
    }
    match (cluster_store, single_rate) {
        (Some(store), Some(single)) => {
            let per_message = store.round_trips() as f64 / (n * rounds) as f64;
            let run = median(on_cluster);
            row(
                "wasm plugin, Redis Cluster",
                &run,
                &native,
                n,
                &format!(
                    "(3 primaries; {:.2} of the single server's rate; {per_message:.3} round \
                     trips per message, one pipeline per primary)",
                    run.rate / single
                ),
            );
        }
        _ => println!("wasm plugin, Redis Cluster: skipped (no redis-cli, or no Redis)"),
    }
    match (&postgres, single_cpu) {
        (Ok(store), Some(redis_cpu)) => {
            let per_message = store.round_trips() as f64 / (n * rounds) as f64;
            let server: std::time::Duration = pg_server.iter().sum();
            let server_us = server.as_secs_f64() * 1e6 / (n * rounds) as f64;
            let run = median(on_postgres);
            row(
                "wasm plugin, PostgreSQL store",
                &run,
                &native,
                n,
                &format!(
                    "({per_message:.3} round trips per message; {:+.1} µs CPU per message \
                     against the Redis store; the database server {server_us:.1} µs per message)",
                    run.cpu.micros_per(n) - redis_cpu
                ),
            );
            store.drop_schema().await.expect("drop the bench's schema");
        }
        (Err(e), _) => println!("wasm plugin, PostgreSQL store: skipped ({e:#})"),
        (Ok(store), None) => {
            store.drop_schema().await.expect("drop the bench's schema");
            println!("wasm plugin, PostgreSQL store: skipped (no Redis to compare with)");
        }
    }
}

/// Whether `program` is on the PATH.
fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
