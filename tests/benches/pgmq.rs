//! pgmq on the machine's PostgreSQL (a database of the bench's own, dropped after):
//! messages/second and CPU per message through a trivial WebAssembly plugin with a fresh
//! sandbox per message, in the same run on the same server:
//!
//! - qhost on a pgmq queue with the PostgreSQL store in the same database: PostgreSQL alone;
//! - qhost on a pgmq queue with the Redis store (the shared server at 127.0.0.1:6379);
//! - the Python worker a team writes today (`tests/support/pgmq_python_worker.py`: pgmq's own
//!   client reading batches, a unique-constraint insert per message as its dedup, a delete per
//!   message), its CPU read from its loop alone.
//!
//! - qhost with the PostgreSQL store and a handler that sends one message per message, its
//!   outbox written into pgmq's queue in the completion's transaction (the store and the
//!   queues in one database, as a host configures itself) against sent after the commit and
//!   marked sent (as when they are two databases).
//!
//! Each row has its queue of its own, filled before the row starts, so only consuming is timed.
//! The database server's CPU (its postmaster and every backend) and Redis's are reported per
//! message beside each row: with PostgreSQL alone, that is the whole cost of the dependency.
//! Round trips to the database per message are the store's and the source's statements.
//!
//! `cargo bench -p qhost-e2e --bench pgmq` (QHOST_BENCH_MESSAGES overrides the 20,000; run
//! `scripts/install-test-tools` first).

use std::sync::Arc;
use std::time::{Duration, Instant};

use qhost::plugins::Registry;
use qhost::sources::{PgmqQueue, PgmqSettings, QueueSource, pgmq_outbox_row};
use qhost::stores::{PostgresStore, PostgresTarget, RedisStore, Store};
use qhost::{Attribute, Config, Host, Outgoing};
use qhost_e2e::cpu::CpuTime;
use qhost_e2e::postgres::{Database, server_cpu, target};
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
    database_us: f64,
    redis_us: f64,
}

fn redis_cpu() -> Duration {
    let port = (shared_url().rsplit(':').next().unwrap_or_default()).replace('/', "");
    let pids = proc_tree::named("redis-server", &format!(":{port}"));
    pids.into_iter().map(proc_tree::cpu).sum()
}

fn source(url: &str) -> PgmqQueue {
    source_with(url, false)
}

fn source_with(url: &str, notify: bool) -> PgmqQueue {
    PgmqQueue::new(PgmqSettings {
        pg: target(url),
        declare: true,
        install: true,
        poll: Duration::from_millis(250),
        notify,
    })
    .expect("the pgmq source")
}

async fn fill(pgmq: &PgmqQueue, queue: &str, n: usize) {
    fill_with(pgmq, queue, n, None).await;
}

/// Fills `queue` with `n` messages, each telling the fixture handler `command` (none: ack).
async fn fill_with(pgmq: &PgmqQueue, queue: &str, n: usize, command: Option<&str>) {
    pgmq.prepare(queue, &format!("{queue}-dlq"))
        .await
        .expect("the queue");
    let message = |i: usize| {
        let m = Outgoing::new(queue, format!("{{\"job\": {i}}}"));
        match command {
            Some(c) => m.with_attribute(Attribute::string("command", c)),
            None => m,
        }
    };
    for start in (0..n).step_by(500) {
        let batch: Vec<Outgoing> = (start..(start + 500).min(n)).map(message).collect();
        pgmq.send(&batch).await.expect("fill");
    }
}

/// qhost consuming the `n` messages of `queue` with `store`, until the last is acked.
async fn qhost_row(url: &str, queue: &str, n: usize, store: Arc<dyn Store>) -> Row {
    // The source as the host is given it, so a handler's sends are checked as on pgmq.
    let mut config = Config::parse(&format!(
        "max-in-flight = {IN_FLIGHT}\n{}[[queue]]\nname = \"{queue}\"\nplugin = \"trivial\"\n\
         wait-time-secs = 1\n",
        qhost_e2e::postgres::pgmq_source_table(url)
    ))
    .expect("config");
    config.data_dir = None;
    // A namespace of the row's own: the shared Redis keeps other runs' keys.
    config.namespace = format!("qb{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    // Granted the sink the outbox rows' handler sends to.
    let manifest = "[outbox]\nqueues = [\"bench_sink\"]\n";
    let plugin = qhost_e2e::fixture_plugin_with("trivial", &config, manifest);
    let pgmq = Arc::new(source(url));
    let host = Arc::new(Host::new(config, pgmq, store, Registry::new([plugin])));
    let (cpu, started, db, redis) = (CpuTime::now(), Instant::now(), server_cpu(), redis_cpu());
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
        database_us: per(server_cpu().saturating_sub(db)),
        redis_us: per(redis_cpu().saturating_sub(redis)),
    };
    (running.await.expect("the host's task")).expect("run");
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked),
        (n as u64, n as u64),
        "every message handled once: {c:?}"
    );
    row
}

/// Transactions a second the database runs while a host consumes `queues` empty queues for
/// `secs` seconds (each statement of the source's reads is one): its idle load, polling or
/// waiting on pgmq's insert notifications (`notify`).
async fn idle_load(url: &str, queues: usize, secs: u64, notify: bool) -> f64 {
    let names: Vec<String> = (0..queues)
        .map(|i| format!("bench_idle_{notify}_{i}"))
        .collect();
    let filler = source_with(url, notify);
    // Room for every queue's batch at once: a poller waits for free slots before it reads.
    let mut text = format!("max-in-flight = {}\n", queues * 10);
    for name in &names {
        filler
            .prepare(name, &format!("{name}-dlq"))
            .await
            .expect("a queue");
        text += &format!("[[queue]]\nname = \"{name}\"\nplugin = \"trivial\"\n");
    }
    let mut config = Config::parse(&text).expect("config");
    config.data_dir = None;
    let plugin = qhost_e2e::fixture_plugin("trivial", &config);
    let store = Arc::new(qhost::stores::LocalStore::open(None).expect("a store"));
    let host = Host::new(
        config,
        Arc::new(source_with(url, notify)),
        store,
        Registry::new([plugin]),
    );
    let stop = CancellationToken::new();
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("a connection");
    tokio::spawn(connection);
    let committed = async || -> i64 {
        let sql = "SELECT xact_commit + xact_rollback FROM pg_stat_database
                   WHERE datname = current_database()";
        client.query_one(sql, &[]).await.expect(sql).get(0)
    };
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { host.run(stop).await }
    });
    // Past start-up, then `secs` of waiting on empty queues.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = committed().await;
    tokio::time::sleep(Duration::from_secs(secs)).await;
    // The server's statistics reach the view within a second of a transaction's end.
    let after = committed().await;
    stop.cancel();
    (running.await.expect("the host's task")).expect("run");
    (after - before) as f64 / secs as f64
}

/// The Python worker on `queue`, from its own report.
fn python_row(url: &str, queue: &str, n: usize) -> Row {
    let (db, redis) = (server_cpu(), redis_cpu());
    let report = qhost_e2e::python(&[
        "tests/support/pgmq_python_worker.py",
        url,
        queue,
        &n.to_string(),
        &IN_FLIGHT.to_string(),
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
        database_us: per(server_cpu().saturating_sub(db)),
        redis_us: per(redis_cpu().saturating_sub(redis)),
    }
}

fn line(label: &str, r: &Row, note: String) {
    println!(
        "{label:<44}{:>8.0} msg/s {:>7.1} µs CPU ({:>2.0}% kernel)  PostgreSQL {:>6.1} µs  \
         Redis {:>5.1} µs  {note}",
        r.rate,
        r.cpu_us,
        r.kernel * 100.0,
        r.database_us,
        r.redis_us
    );
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(20_000);
    qhost_e2e::built_plugins();
    let db = Database::new("bench_pgmq").await;
    let url = db.url();
    let filler = source(&url);
    let pg_store = PostgresStore::connect(&PostgresTarget {
        pg: target(&url),
        schema: "qhost".into(),
    })
    .await
    .expect("the PostgreSQL store");
    let redis = RedisStore::connect(&shared_url()).await.expect("Redis");
    // Stores of their own for the outbox rows, so each counts its own round trips.
    let outbox_store = async || {
        PostgresStore::connect(&PostgresTarget {
            pg: target(&url),
            schema: "qhost".into(),
        })
        .await
        .expect("the PostgreSQL store")
    };
    let in_commit = outbox_store().await.delivering_to_pgmq(pgmq_outbox_row);
    let after_commit = outbox_store().await;
    let send = "send-fence:bench_sink";
    (filler.prepare("bench_sink", "bench_sink-dlq").await).expect("the sink queue");
    let rounds = 3;
    let (mut alone, mut with_redis, mut python) = (Vec::new(), Vec::new(), Vec::new());
    let (mut sent_in, mut sent_after) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let q = format!("bench_in_commit_{round}");
        fill_with(&filler, &q, n, Some(send)).await;
        sent_in.push(qhost_row(&url, &q, n, Arc::new(in_commit.clone())).await);
        let q = format!("bench_after_commit_{round}");
        fill_with(&filler, &q, n, Some(send)).await;
        sent_after.push(qhost_row(&url, &q, n, Arc::new(after_commit.clone())).await);
        let q = format!("bench_pg_{round}");
        fill(&filler, &q, n).await;
        alone.push(qhost_row(&url, &q, n, Arc::new(pg_store.clone())).await);
        let q = format!("bench_redis_{round}");
        fill(&filler, &q, n).await;
        with_redis.push(qhost_row(&url, &q, n, Arc::new(redis.clone())).await);
        let q = format!("bench_python_{round}");
        fill(&filler, &q, n).await;
        python.push(python_row(&url, &q, n));
    }
    let trips = pg_store.round_trips() as f64 / (n * rounds) as f64;
    let median = |mut rows: Vec<Row>| {
        rows.sort_by(|a, b| a.cpu_us.total_cmp(&b.cpu_us));
        rows.swap_remove(rows.len() / 2)
    };
    let (alone, with_redis, python) = (median(alone), median(with_redis), median(python));
    let sink = filler.depth("bench_sink").await.expect("the sink's depth");
    assert_eq!(
        sink.total(),
        (2 * n * rounds) as u64,
        "one message per message handled"
    );
    let per_message = |store: &PostgresStore| store.round_trips() as f64 / (n * rounds) as f64;
    let (trips_in, trips_after) = (per_message(&in_commit), per_message(&after_commit));
    let (sent_in, sent_after) = (median(sent_in), median(sent_after));
    println!(
        "pgmq, {n} messages a row, max-in-flight {IN_FLIGHT}, trivial plugin (fresh sandbox), \
         median of {rounds} rounds by CPU"
    );
    line(
        "qhost, pgmq + PostgreSQL store",
        &alone,
        format!(
            "({trips:.3} store round trips per message; {:.1}x less CPU than the Python worker)",
            python.cpu_us / alone.cpu_us
        ),
    );
    line(
        "qhost, pgmq + Redis store",
        &with_redis,
        format!(
            "({:.1}x less CPU than the Python worker)",
            python.cpu_us / with_redis.cpu_us
        ),
    );
    line(
        "Python worker (pgmq client, unique insert)",
        &python,
        String::new(),
    );
    println!("with a message sent per message (the fixture handler's send-fence):");
    line(
        "qhost, outbox in the completion's transaction",
        &sent_in,
        format!(
            "({trips_in:.3} store round trips per message; {:.2}x the CPU, {:.2}x the \
             database's, of sending after the commit)",
            sent_in.cpu_us / sent_after.cpu_us,
            sent_in.database_us / sent_after.database_us
        ),
    );
    line(
        "qhost, outbox sent after the commit",
        &sent_after,
        format!("({trips_after:.3} store round trips per message, and a send)"),
    );
    let (polling, waiting) = (
        idle_load(&url, 20, 10, false).await,
        idle_load(&url, 20, 10, true).await,
    );
    println!(
        "idle: a host consuming 20 empty queues costs the database {polling:.1} transactions a \
         second polling (pauses growing to poll-ms, 250 ms), {waiting:.1} waiting on pgmq's \
         insert notifications (notify = true)"
    );
    drop(pg_store);
    drop(db);
}
