//! NATS JetStream on the machine's nats-server (streams of the bench's own, deleted after):
//! messages/second and CPU per message through a trivial WebAssembly plugin with a fresh
//! sandbox per message, in the same run on the same server and Redis:
//!
//! - qhost on a stream read by its durable pull consumer, with the Redis store;
//! - the Python worker a team writes today (`tests/support/nats_python_worker.py`: nats-py's
//!   pull consumer fetching batches, a Redis `SET NX` per message as its dedup, an ack per
//!   message), its CPU read from its loop alone.
//!
//! Each row has its stream of its own, filled before the row starts, so only consuming is
//! timed. The NATS server's and Redis's CPU are reported per message beside each row.
//!
//! `cargo bench -p qhost-e2e --bench nats` (QHOST_BENCH_MESSAGES overrides the 20,000; run
//! `scripts/install-test-tools` first).

use std::sync::Arc;
use std::time::{Duration, Instant};

use qhost::plugins::Registry;
use qhost::sources::{NatsQueue, NatsSettings, QueueSource};
use qhost::stores::RedisStore;
use qhost::{Config, Host, Outgoing};
use qhost_e2e::cpu::CpuTime;
use qhost_e2e::nats::{Streams, unique, url};
use qhost_e2e::proc_tree;
use qhost_e2e::redis_server::shared_url;
use tokio_util::sync::CancellationToken;

/// In-flight messages: qhost's max-in-flight, the peer's batch.
const IN_FLIGHT: usize = 64;

/// One row's figures per message.
struct Row {
    rate: f64,
    cpu_us: f64,
    kernel: f64,
    nats_us: f64,
    redis_us: f64,
}

/// The CPU a server named `name` listening on `port` has used so far.
fn server_cpu(name: &str, port: &str) -> Duration {
    proc_tree::named(name, port)
        .into_iter()
        .map(proc_tree::cpu)
        .sum()
}

fn nats_cpu() -> Duration {
    // The machine's server is started with `-p 4222`.
    server_cpu("nats-server", "4222")
}

fn redis_cpu() -> Duration {
    let port = (shared_url().rsplit(':').next().unwrap_or_default()).replace('/', "");
    server_cpu("redis-server", &format!(":{port}"))
}

async fn source() -> NatsQueue {
    let mut settings = NatsSettings::new(&url());
    settings.default_hold = Duration::from_secs(30);
    NatsQueue::connect(settings).await.expect("NATS")
}

async fn fill(nats: &NatsQueue, stream: &str, n: usize) {
    nats.prepare(stream, &format!("{stream}-dlq"))
        .await
        .expect("the stream");
    for start in (0..n).step_by(500) {
        let batch: Vec<Outgoing> = (start..(start + 500).min(n))
            .map(|i| Outgoing::new(stream, format!("{{\"job\": {i}}}")))
            .collect();
        nats.send(&batch).await.expect("fill");
    }
}

/// qhost consuming the `n` messages of `stream` with the Redis store, until the last is acked.
async fn qhost_row(stream: &str, n: usize, store: RedisStore) -> Row {
    let mut config = Config::parse(&format!(
        "max-in-flight = {IN_FLIGHT}\n[[queue]]\nname = \"{stream}\"\nplugin = \"trivial\"\n\
         wait-time-secs = 1\n"
    ))
    .expect("config");
    config.data_dir = None;
    config.namespace = format!("qb{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    let plugin = qhost_e2e::fixture_plugin("trivial", &config);
    let nats = Arc::new(source().await);
    let host = Arc::new(Host::new(
        config,
        nats,
        Arc::new(store),
        Registry::new([plugin]),
    ));
    let (cpu, started, server, redis) = (CpuTime::now(), Instant::now(), nats_cpu(), redis_cpu());
    let running = tokio::spawn({
        let host = Arc::clone(&host);
        async move { host.run_until_idle(CancellationToken::new()).await }
    });
    while host.stats().total().acked < n as u64 && !running.is_finished() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let cpu = cpu.elapsed();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    let row = Row {
        rate: n as f64 / started.elapsed().as_secs_f64(),
        cpu_us: cpu.micros_per(n),
        kernel: cpu.kernel_share(),
        nats_us: per(nats_cpu().saturating_sub(server)),
        redis_us: per(redis_cpu().saturating_sub(redis)),
    };
    (running.await.expect("the host's task")).expect("run");
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked),
        (n as u64, n as u64),
        "every message handled once"
    );
    row
}

/// Leaves `stream` to a consumer of another's: a work-queue stream takes one consumer per
/// subject, and filling it made qhost's.
async fn without_qhost_consumer(stream: &str) {
    let client = async_nats::connect(url()).await.expect("NATS");
    let js = async_nats::jetstream::new(client);
    let s = js.get_stream(stream).await.expect("the stream");
    s.delete_consumer("qhost")
        .await
        .expect("qhost's consumer deleted");
}

/// The Python worker on `stream`, from its own report.
fn python_row(stream: &str, n: usize) -> Row {
    let (server, redis) = (nats_cpu(), redis_cpu());
    let report = qhost_e2e::python(&[
        "tests/support/nats_python_worker.py",
        &url(),
        stream,
        &n.to_string(),
        &IN_FLIGHT.to_string(),
        &shared_url(),
    ]);
    let report: serde_json::Value = serde_json::from_slice(&report).expect("its report");
    let secs = |k: &str| report[k].as_f64().expect("seconds");
    assert_eq!(report["handled"].as_u64(), Some(n as u64), "{report}");
    let cpu = secs("user") + secs("system");
    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    Row {
        rate: n as f64 / secs("wall"),
        cpu_us: cpu * 1e6 / n as f64,
        kernel: if cpu > 0.0 { secs("system") / cpu } else { 0.0 },
        nats_us: per(nats_cpu().saturating_sub(server)),
        redis_us: per(redis_cpu().saturating_sub(redis)),
    }
}

fn line(label: &str, r: &Row, note: String) {
    println!(
        "{label:<40}{:>8.0} msg/s {:>7.1} µs CPU ({:>2.0}% kernel)  NATS {:>6.1} µs  \
         Redis {:>5.1} µs  {note}",
        r.rate,
        r.cpu_us,
        r.kernel * 100.0,
        r.nats_us,
        r.redis_us
    );
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(20_000);
    qhost_e2e::built_plugins();
    let filler = source().await;
    let redis = RedisStore::connect(&shared_url()).await.expect("Redis");
    let rounds = 3;
    // Every row's stream and dead-letter stream, deleted at the end, a failed run's too.
    let rows: Vec<(String, String)> = (0..rounds)
        .map(|_| (unique("bench_qhost"), unique("bench_python")))
        .collect();
    let made: Vec<String> = (rows.iter())
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .flat_map(|s| [format!("{s}-dlq"), s])
        .collect();
    let _streams = Streams::new(&made.iter().map(String::as_str).collect::<Vec<_>>());
    let (mut qhost, mut python) = (Vec::new(), Vec::new());
    for (for_qhost, for_python) in &rows {
        fill(&filler, for_qhost, n).await;
        qhost.push(qhost_row(for_qhost, n, redis.clone()).await);
        fill(&filler, for_python, n).await;
        without_qhost_consumer(for_python).await;
        python.push(python_row(for_python, n));
    }
    let median = |mut rows: Vec<Row>| {
        rows.sort_by(|a, b| a.cpu_us.total_cmp(&b.cpu_us));
        rows.swap_remove(rows.len() / 2)
    };
    let (qhost, python) = (median(qhost), median(python));
    println!(
        "NATS JetStream, {n} messages a row, max-in-flight {IN_FLIGHT}, trivial plugin (fresh \
         sandbox), median of {rounds} rounds by CPU"
    );
    line(
        "qhost, JetStream + Redis store",
        &qhost,
        format!(
            "({:.1}x less CPU than the Python worker)",
            python.cpu_us / qhost.cpu_us
        ),
    );
    line("Python worker (nats-py, SET NX)", &python, String::new());
}
