//! The RabbitMQ source on the machine's broker: messages/second and CPU per message through a
//! trivial WebAssembly plugin with a fresh sandbox per message and the Redis idempotency store,
//! against what bounds it and what it replaces, in the same run on the same broker:
//!
//! - the broker's ceiling: a bare consume-and-ack loop through the same client, no host and no
//!   store (its rate is what one consumer can get from this broker; its CPU the client's floor);
//! - qhost, the same messages, its data path on the host's runtime (a worker per core, the
//!   default) and on two lanes (`lanes = 2`: a thread each, what docs/operations.md advises for
//!   the least CPU per message);
//! - the Python worker a team writes today (`tests/support/rabbit_python_worker.py`: kombu on
//!   py-amqp with manual acks, redis-py `SET NX` per message, the seed's shape), its CPU read
//!   from its consuming loop alone;
//! - Celery's own tasks (sent by Celery's producer): a Celery worker on RabbitMQ (a thread pool
//!   of four, Celery's default early acks) running the task, whose one act is noting its id in
//!   a file, its CPU (process and children) from its first task to its last; and qhost running
//!   the same messages through its `celery` format with the trivial plugin;
//! - and the two ways a retry's delay can wait (`delay-by`): messages that each fail their
//!   first run and are retried after a second, through delay queues or held unacked.
//!
//! Each row has its queue of its own (a quorum queue, as qhost declares), filled before the row
//! starts, so only consuming is timed. The broker's CPU is not counted in any row (it is
//! another process, the same work for each).
//!
//! `cargo bench -p qhost-e2e --bench rabbitmq` (QHOST_BENCH_MESSAGES overrides the 20,000; run
//! `scripts/install-test-tools` first).

use std::sync::Arc;
use std::time::{Duration, Instant};

use qhost::plugins::Registry;
use qhost::sources::{DelayBy, QueueSource, RabbitQueue, RabbitSettings};
use qhost::stores::{RedisStore, Store};
use qhost::{Config, Counts, Host, Outgoing};
use qhost_e2e::cpu::CpuTime;
use qhost_e2e::proc_tree;
use qhost_e2e::rabbitmq::{
    TestQueues, celery_send, celery_worker, client, lines_of, settings, url,
};
use qhost_e2e::redis_server::shared_url;
use tokio_util::sync::CancellationToken;

/// In-flight messages in each row: qhost's max-in-flight and prefetch, the peer's prefetch.
const IN_FLIGHT: usize = 64;

/// The fixture's command for a message that fails its first run and acks its second.
const RETRY_ONCE: &str = "fail-below-fence:2";

/// A row: messages per second and CPU per message, and what the servers beside it used.
struct Row {
    rate: f64,
    cpu_us: f64,
    kernel: f64,
    beside: Beside,
}

/// Over a row, per message: the broker's CPU and Redis's, and how busy the machine was (in
/// cores). What bounds a row's rate shows here: with the machine's cores all busy, the
/// process using most of them does.
#[derive(Clone, Copy, Default)]
struct Beside {
    broker_us: f64,
    redis_us: f64,
    busy_cores: f64,
}

/// The CPU the broker and Redis have used so far, and the machine's (busy, in all).
#[derive(Clone, Copy)]
struct Servers {
    broker: Duration,
    redis: Duration,
    machine: (Duration, Duration),
}

impl Servers {
    fn now() -> Servers {
        let used = |pids: Vec<u32>| pids.into_iter().map(proc_tree::cpu).sum();
        let port = shared_url()
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .replace('/', "");
        Servers {
            broker: used(proc_tree::named("beam.smp", "rabbit")),
            redis: used(proc_tree::named("redis-server", &format!(":{port}"))),
            machine: proc_tree::machine(),
        }
    }

    /// Per message over `n` messages since `self`.
    fn since(self, n: usize) -> Beside {
        let now = Servers::now();
        let per = |a: Duration, b: Duration| a.saturating_sub(b).as_secs_f64() * 1e6 / n as f64;
        let busy = now.machine.0.saturating_sub(self.machine.0).as_secs_f64();
        let all = now.machine.1.saturating_sub(self.machine.1).as_secs_f64();
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as f64;
        Beside {
            broker_us: per(now.broker, self.broker),
            redis_us: per(now.redis, self.redis),
            busy_cores: if all > 0.0 { busy / all * cores } else { 0.0 },
        }
    }
}

async fn fill(rabbit: &RabbitQueue, queue: &str, n: usize, body: &str) {
    for start in (0..n).step_by(500) {
        let batch: Vec<Outgoing> = (start..(start + 500).min(n))
            .map(|_| Outgoing::new(queue, body))
            .collect();
        rabbit.send(&batch).await.expect("fill");
    }
}

/// A consumer of its own that acks each batch at once.
async fn bare(queue: &str, n: usize) -> Row {
    let rabbit = client();
    let (cpu, started, servers) = (CpuTime::now(), Instant::now(), Servers::now());
    let mut done = 0;
    while done < n {
        let got = (rabbit.receive(queue, IN_FLIGHT, Duration::ZERO, Duration::from_secs(5)))
            .await
            .expect("receive");
        let handles: Vec<String> = got.iter().map(|m| m.handle.clone()).collect();
        rabbit.settle(queue, &handles).await.expect("ack");
        done += handles.len();
    }
    row(n, started, cpu.elapsed(), servers.since(n))
}

fn row(n: usize, started: Instant, cpu: CpuTime, beside: Beside) -> Row {
    Row {
        rate: n as f64 / started.elapsed().as_secs_f64(),
        cpu_us: cpu.micros_per(n),
        kernel: cpu.kernel_share(),
        beside,
    }
}

/// qhost consuming `n` messages of `queue` until it is idle, its data path on `lanes` lanes
/// (1: on the host's runtime, a worker per core).
async fn qhost_row(queue: &str, n: usize, lanes: usize) -> Row {
    let source = settings(IN_FLIGHT as u16);
    let (measured, c) = run_host_with(queue, n, source, TRIVIAL, lanes).await;
    let handled = (c.invoked, c.acked);
    assert_eq!(handled, (n as u64, n as u64), "every message handled once");
    measured
}

/// Messages that each fail their first run and ack their second, retried after a second: the
/// delay through delay queues, or held unacked by the consumer.
async fn retry_row(queue: &str, n: usize, delay_by: DelayBy) -> Row {
    let source = RabbitSettings {
        delay_by,
        ..settings(IN_FLIGHT as u16)
    };
    let (measured, c) = run_host(queue, n, source).await;
    let handled = (c.invoked, c.acked);
    assert_eq!(
        handled,
        (2 * n as u64, n as u64),
        "each ran twice, acked once"
    );
    measured
}

/// qhost on a source of `source` consuming `queue` (`n` messages) until it is idle, with the
/// trivial plugin and retries after a second: the row, and the host's counts.
async fn run_host(queue: &str, n: usize, source: RabbitSettings) -> (Row, Counts) {
    run_host_with(queue, n, source, TRIVIAL, 1).await
}

/// The routing of a queue to the trivial plugin.
const TRIVIAL: &str = "plugin = \"trivial\"";

/// As [`run_host`], the queue routed by `routing` (a plugin, or a format and its tasks). The
/// row ends at the `acks`-th ack, not when the host has seen the queue stay empty long enough
/// to stop (`run --until-idle`'s checks would add their wait to every row).
async fn run_host_with(
    queue: &str,
    n: usize,
    source: RabbitSettings,
    routing: &str,
    lanes: usize,
) -> (Row, Counts) {
    let mut config = Config::parse(&format!(
        "max-in-flight = {IN_FLIGHT}\nlanes = {lanes}\n[retry]\nbase-secs = 1\nmax-secs = 1\n\
         [[queue]]\nname = \"{queue}\"\n{routing}\nwait-time-secs = 1\n"
    ))
    .expect("config");
    config.data_dir = None;
    let plugin = qhost_e2e::fixture_plugin("trivial", &config);
    let source = Arc::new(RabbitQueue::new(source));
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(&shared_url()).await.expect("Redis"));
    let host = Arc::new(Host::new(config, source, store, Registry::new([plugin])));
    let (cpu, started, servers) = (CpuTime::now(), Instant::now(), Servers::now());
    let running = tokio::spawn({
        let host = Arc::clone(&host);
        async move { host.run_until_idle(CancellationToken::new()).await }
    });
    while host.stats().total().acked < n as u64 && !running.is_finished() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let measured = row(n, started, cpu.elapsed(), servers.since(n));
    (running.await.expect("the host's task")).expect("run");
    (measured, host.stats().total())
}

/// A Celery worker on `queue` (`n` tasks sent by Celery's producer), from its first task's
/// effect to its last: tasks per second, and the CPU of its process and children.
async fn celery_row(queue: &str, n: usize) -> Row {
    let dir = tempfile::tempdir().expect("a directory");
    let effects = dir.path().join("effects");
    let mut worker = celery_worker(queue, &effects, false);
    let pid = worker.id();
    let wait = |done: usize| {
        let effects = effects.clone();
        async move {
            while lines_of(&effects).len() < done {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    wait(1).await;
    let (cpu, started, servers) = (proc_tree::cpu(pid), Instant::now(), Servers::now());
    wait(n).await;
    let used = proc_tree::cpu(pid).saturating_sub(cpu);
    let beside = servers.since(n - 1);
    let elapsed = started.elapsed().as_secs_f64();
    let _ = worker.kill();
    let _ = worker.wait();
    Row {
        rate: (n - 1) as f64 / elapsed,
        cpu_us: used.as_secs_f64() * 1e6 / (n - 1) as f64,
        kernel: f64::NAN,
        beside,
    }
}

/// qhost on the same Celery tasks: the `celery` format routes them to the trivial plugin.
async fn qhost_celery_row(queue: &str, n: usize) -> Row {
    let routing = "format = \"celery\"\ntasks = { \"proj.tasks.work\" = \"trivial\" }";
    let source = RabbitSettings {
        declare: None,
        ..settings(IN_FLIGHT as u16)
    };
    let (measured, c) = run_host_with(queue, n, source, routing, 1).await;
    let handled = (c.invoked, c.acked);
    assert_eq!(handled, (n as u64, n as u64), "every task handled once");
    measured
}

/// The Python worker on `queue`, from its own report (the servers' CPU over its whole run,
/// its start-up too).
fn python_row(queue: &str, n: usize) -> Row {
    let root = qhost_e2e::workspace();
    let servers = Servers::now();
    let out = std::process::Command::new(root.join("target/tools/moto/bin/python"))
        .arg(root.join("tests/support/rabbit_python_worker.py"))
        .args([url().as_str(), queue, &shared_url(), &n.to_string()])
        .arg(format!("bench-peer-{}", uuid::Uuid::new_v4().simple()))
        .arg(IN_FLIGHT.to_string())
        .output()
        .expect("the Python worker runs (scripts/install-test-tools installs kombu and redis-py)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("its report");
    let secs = |k: &str| report[k].as_f64().expect("seconds");
    assert_eq!(report["handled"].as_u64(), Some(n as u64), "{report}");
    let cpu = secs("user") + secs("system");
    Row {
        rate: n as f64 / secs("wall"),
        cpu_us: cpu * 1e6 / n as f64,
        kernel: if cpu > 0.0 { secs("system") / cpu } else { 0.0 },
        beside: servers.since(n),
    }
}

fn line(label: &str, r: &Row, note: String) {
    let kernel = match r.kernel {
        k if k.is_nan() => "              ".to_string(),
        k => format!("({:>2.0}% kernel)", k * 100.0),
    };
    let b = r.beside;
    println!(
        "{label:<52}{:>9.0} msg/s {:>8.1} µs CPU {kernel}  broker {:>6.1} µs  Redis {:>5.1} µs  \
         machine {:.2} cores busy  {note}",
        r.rate, r.cpu_us, b.broker_us, b.redis_us, b.busy_cores
    );
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(20_000);
    let retries = n.min(1_000);
    let names = [
        "bench-bare",
        "bench-qhost",
        "bench-python",
        "bench-delay",
        "bench-hold",
        "bench-qhost-lanes",
    ];
    let queues = TestQueues::new(&names);
    let rabbit = client();
    let fills = [
        (n, "ack"),
        (n, "ack"),
        (n, "ack"),
        (retries, RETRY_ONCE),
        (retries, RETRY_ONCE),
        (n, "ack"),
    ];
    for (i, (count, body)) in fills.into_iter().enumerate() {
        let q = queues.name(i);
        rabbit
            .prepare(q, &format!("{q}-dlq"))
            .await
            .expect("declare");
        fill(&rabbit, q, count, body).await;
    }
    let bare = bare(queues.name(0), n).await;
    let qhost = qhost_row(queues.name(1), n, 1).await;
    let lanes = qhost_row(queues.name(5), n, 2).await;
    let python = python_row(queues.name(2), n);
    let delayed = retry_row(queues.name(3), retries, DelayBy::DelayQueue).await;
    let held = retry_row(queues.name(4), retries, DelayBy::Hold).await;
    let tasks = n.min(5_000);
    let celery_queues = TestQueues::new(&["bench-celery", "bench-celery-qhost"]);
    for i in 0..2 {
        let q = celery_queues.name(i);
        celery_send(q, tasks, if i == 0 { "echo:effects" } else { "ack" });
        rabbit
            .prepare(&format!("{q}-dlq"), &format!("{q}-dlq-dlq"))
            .await
            .expect("declare");
    }
    let celery = celery_row(celery_queues.name(0), tasks).await;
    let qhost_celery = qhost_celery_row(celery_queues.name(1), tasks).await;
    // Each dead-letter queue's own (declared with it above): the rest goes with the names.
    for i in 0..2 {
        let beyond = format!("{}-dlq-dlq", celery_queues.name(i));
        rabbit.delete(&beyond).await.expect("clean up");
    }

    let broker = url().split('@').next_back().unwrap_or_default().to_string();
    println!(
        "RabbitMQ source on {broker}, {n} messages per row, {IN_FLIGHT} in flight, Redis store"
    );
    line(
        "broker ceiling (consume + ack, no host, no store)",
        &bare,
        String::new(),
    );
    let of_ceiling = format!("rate {:.2} of the ceiling", qhost.rate / bare.rate);
    line(
        "qhost, trivial wasm plugin, fresh sandbox",
        &qhost,
        of_ceiling,
    );
    line("qhost, the same, `lanes = 2`", &lanes, String::new());
    let ratio = format!(
        "{:.1}× qhost's CPU per message, {:.1}× with lanes",
        python.cpu_us / qhost.cpu_us,
        python.cpu_us / lanes.cpu_us
    );
    line("Python worker: kombu + redis-py SET NX", &python, ratio);
    println!("{retries} messages, each retried once after 1 s (per message, both runs):");
    line(
        "  delay-by = \"delay-queue\" (the default)",
        &delayed,
        String::new(),
    );
    let slower = format!("{:.1}× the delay queue's time", delayed.rate / held.rate);
    line("  delay-by = \"hold\"", &held, slower);
    println!("{tasks} Celery tasks from Celery's producer (Celery's CPU: process and children):");
    line(
        "  Celery 5.7 worker, threads pool of 4",
        &celery,
        String::new(),
    );
    let ratio = format!(
        "{:.1}× less CPU per task than Celery",
        celery.cpu_us / qhost_celery.cpu_us
    );
    line(
        "  qhost, celery format, trivial plugin",
        &qhost_celery,
        ratio,
    );
}
