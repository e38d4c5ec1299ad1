//! What handler state costs a message: the fixture plugin on the local queue (in-memory
//! SQLite), acking with no state write, with one (`kv-set` of its own key) and with ten
//! (`kv-many`), committed with the completion; on the embedded store and on Redis (the shared
//! server at 127.0.0.1:6379, or `QHOST_TEST_REDIS_URL`). Prints messages/second and CPU per
//! message for each, and the difference from the row without state on the same store, in the
//! same run. The cases run interleaved in three rounds and each figure is its median round.
//!
//! `cargo bench -p qhost-e2e --bench state` (QHOST_BENCH_MESSAGES overrides the 20,000).

use std::sync::Arc;
use std::time::Instant;

use qhost::plugins::Registry;
use qhost::sources::{LocalQueue, QueueSource};
use qhost::stores::{LocalStore, RedisStore, Store};
use qhost::{Config, Host, Outgoing};
use qhost_e2e::cpu::CpuTime;
use tokio_util::sync::CancellationToken;

const QUEUE: &str = "bench";
const PLUGIN: &str = "stateful";
const MANIFEST: &str = "[capabilities]\nkeyvalue = [\"counts\"]\n";

/// The body of message `i`.
type Body = fn(usize) -> String;

/// The cases: a label and the body of each message.
const CASES: [(&str, Body); 3] = [
    ("no state write", |_| "ack".into()),
    ("1 write", |i| format!("kv-set:counts:k{i}:v")),
    ("10 writes", |_| "kv-many:counts:10".into()),
];

fn config() -> Config {
    let mut c = Config::parse(&format!(
        "max-in-flight = 64\n[retry]\nbase-secs = 0.01\nmax-secs = 0.05\n\
         [[queue]]\nname = \"{QUEUE}\"\nplugin = \"{PLUGIN}\"\nwait-time-secs = 0\n"
    ))
    .expect("bench config");
    c.data_dir = None;
    c.namespace = format!("qs{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    c
}

#[derive(Clone)]
struct Run {
    rate: f64,
    cpu: CpuTime,
}

/// Runs `n` messages with bodies from `body` through the stateful plugin on `store`.
async fn measure(store: Arc<dyn Store>, n: usize, body: Body) -> Run {
    let config = config();
    let plugin = qhost_e2e::fixture_plugin_with(PLUGIN, &config, MANIFEST);
    let source = Arc::new(LocalQueue::open(None, Default::default()).expect("queue"));
    for start in (0..n).step_by(1000) {
        let batch: Vec<Outgoing> = (start..(start + 1000).min(n))
            .map(|i| Outgoing::new(QUEUE, body(i)))
            .collect();
        source.send(&batch).await.expect("fill");
    }
    let host = Host::new(config, source, store, Registry::new([plugin]));
    let cpu = CpuTime::now();
    let started = Instant::now();
    host.run_until_idle(CancellationToken::new())
        .await
        .expect("run");
    let (elapsed, cpu) = (started.elapsed(), cpu.elapsed());
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked),
        (n as u64, n as u64),
        "every message once"
    );
    Run {
        rate: n as f64 / elapsed.as_secs_f64(),
        cpu,
    }
}

fn median(mut runs: Vec<Run>) -> Run {
    runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    runs.swap_remove(runs.len() / 2)
}

fn print_store(store: &str, runs: Vec<Vec<Run>>, n: usize) {
    let runs: Vec<Run> = runs.into_iter().map(median).collect();
    let base = &runs[0];
    for ((label, _), run) in CASES.iter().zip(&runs) {
        let cpu = run.cpu.micros_per(n);
        println!(
            "{:<28} {:>8.0} {:>6.2} {cpu:>10.1} {:>+9.1}",
            format!("{store}, {label}"),
            run.rate,
            run.rate / base.rate,
            cpu - base.cpu.micros_per(n),
        );
    }
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(20_000);
    let rounds = 3;
    qhost_e2e::built_plugins(); // build before printing, so cargo's output stays out of the table
    let redis = RedisStore::connect(&qhost_e2e::redis_server::shared_url()).await;
    let mut embedded = vec![Vec::new(); CASES.len()];
    let mut on_redis = vec![Vec::new(); CASES.len()];
    for _ in 0..rounds {
        for (i, (_, body)) in CASES.iter().enumerate() {
            let local: Arc<dyn Store> = Arc::new(LocalStore::open(None).expect("store"));
            embedded[i].push(measure(local, n, *body).await);
            if let Ok(redis) = &redis {
                on_redis[i].push(measure(Arc::new(redis.clone()), n, *body).await);
            }
        }
    }
    println!(
        "handler state, {n} messages, max-in-flight 64, local queue in memory, median of {rounds} rounds"
    );
    println!(
        "{:<28} {:>8} {:>6} {:>10} {:>9}",
        "", "msg/s", "ratio", "CPU µs/msg", "+CPU µs"
    );
    print_store("embedded", embedded, n);
    match redis {
        Ok(_) => print_store("Redis", on_redis, n),
        Err(e) => println!("Redis: not measured ({e:#})"),
    }
}
