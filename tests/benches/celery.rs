//! The same Celery tasks through the seed's stack and through qhost, side by side in one run:
//! a Celery worker on kombu's SQS transport (prefork pool, then threads pool) with the best
//! duplicate suppression Celery has on SQS (`worker_deduplicate_successful_tasks`, with late
//! acks and the Redis result backend it reads), and qhost with a Python plugin and with a Rust
//! plugin, writing the same result records to the same Redis. One moto, one Redis.
//!
//! The tasks are Celery's own messages: its producer sends them once (`send_task`, as `delay()`
//! does) to a staging queue, and the bench takes their bodies from there, so every row consumes
//! the same bytes. A fifth of the tasks arrive twice, as SQS's duplicate deliveries do: half of
//! those copies right behind the original (two workers receive them at once), half in the next
//! chunk (a redelivery minutes later). The trivial task acks; on Celery it appends its id to a
//! file, which counts its runs; on qhost the host's `invoked` count does.
//!
//! Each row consumes the tasks a chunk at a time (see [`CHUNK`]; moto's receive and delete scan
//! the whole queue, so one long backlog would measure moto): the chunk is sent, then the bench
//! waits until the queue holds nothing, visible or in flight. Per row it prints tasks/s over
//! those stretches (the sending included: it is the same for every row), the consumer's CPU per
//! task over the same stretches (process and children, from `/proc`), the peak RSS (the sum of
//! each process's), and how many tasks ran more than once.
//!
//! `cargo bench -p qhost-e2e --bench celery` (QHOST_BENCH_MESSAGES overrides the 5,000 tasks;
//! run `scripts/install-test-tools` and `scripts/build-guest-plugins target/wasm/guests` first:
//! the Celery venv, moto and componentize-py come from there).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use qhost_e2e::proc_tree;
use qhost_e2e::processes::{HostProcess, summary_column};
use qhost_e2e::redis_server::{shared_url, unique_namespace};
use qhost_e2e::sqs_server::{TEST_ENV, client, create_queue, endpoint, unique};

/// Tasks sent before the consumer is timed, at a time.
const CHUNK: usize = 500;
/// The task every row runs.
const TASK: &str = "proj.tasks.noop";
/// Celery's result backend, and qhost's: the tests' Redis.
const RESULTS: &str = "redis://127.0.0.1:6379/0";

/// What one row measured.
struct Row {
    name: &'static str,
    secs: f64,
    cpu: Duration,
    peak_rss: u64,
    /// Handler runs in all, and tasks that ran more than once.
    runs: u64,
    twice: u64,
}

/// The test venv's Python, with tests/support on its path.
fn python() -> Command {
    let root = qhost_e2e::workspace();
    let mut python = Command::new(root.join("target/tools/moto/bin/python"));
    python
        .envs(TEST_ENV)
        .env("PYTHONPATH", root.join("tests/support"));
    python
}

/// Celery's producer sends `n` tasks; their bodies, as SQS holds them. A staging queue holds a
/// chunk at a time: moto's work per call grows with its queue.
async fn celery_tasks(n: usize) -> Vec<String> {
    let mut bodies = Vec::with_capacity(n);
    for start in (0..n).step_by(CHUNK) {
        bodies.extend(staged(CHUNK.min(n - start)).await);
    }
    bodies
}

/// `n` tasks from Celery's producer, through a staging queue of their own.
async fn staged(n: usize) -> Vec<String> {
    let staging = unique("celery-bench-tasks");
    let url = create_queue(&staging, &[]).await;
    let script = qhost_e2e::workspace().join("tests/support/celery_bench.py");
    let status = python()
        .arg(script)
        .args([endpoint(), &staging, &n.to_string()])
        .status()
        .expect("running Celery's producer");
    assert!(status.success(), "Celery's producer failed");
    let sqs = client();
    let mut bodies = Vec::with_capacity(n);
    while bodies.len() < n {
        let got = (sqs.receive_message().queue_url(&url))
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        for m in got.messages() {
            bodies.push(m.body().expect("a body").to_string());
            let receipt = m.receipt_handle().expect("a receipt");
            (sqs.delete_message().queue_url(&url).receipt_handle(receipt))
                .send()
                .await
                .expect("delete");
        }
    }
    bodies
}

/// The chunks each row is sent: every task once, a fifth twice (see the module docs).
fn plan(bodies: &[String]) -> Vec<Vec<String>> {
    let mut chunks: Vec<Vec<String>> = bodies
        .chunks(CHUNK)
        .map(|c| Vec::with_capacity(c.len() * 6 / 5))
        .collect();
    let last = chunks.len() - 1;
    for (i, body) in bodies.iter().enumerate() {
        let c = i / CHUNK;
        chunks[c].push(body.clone());
        match i % 10 {
            0 => chunks[c].push(body.clone()),
            5 => chunks[(c + 1).min(last)].push(body.clone()),
            _ => {}
        }
    }
    chunks
}

async fn send(url: &str, bodies: &[String]) {
    let sqs = client();
    for batch in bodies.chunks(10) {
        let entries = (batch.iter().enumerate())
            .map(|(i, b)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(b)
                    .build()
                    .expect("an entry")
            })
            .collect::<Vec<_>>();
        let sent = (sqs.send_message_batch().queue_url(url))
            .set_entries(Some(entries))
            .send()
            .await
            .expect("send");
        assert!(sent.failed().is_empty(), "{:?}", sent.failed());
    }
}

/// Messages in `url`, visible or in flight.
async fn left(url: &str) -> u64 {
    let names = [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        QueueAttributeName::ApproximateNumberOfMessagesDelayed,
    ];
    let out = (client().get_queue_attributes().queue_url(url))
        .set_attribute_names(Some(names.to_vec()))
        .send()
        .await
        .expect("queue attributes");
    let attributes = out.attributes().cloned().unwrap_or_default();
    names
        .iter()
        .filter_map(|n| attributes.get(n)?.parse::<u64>().ok())
        .sum()
}

/// Sends each chunk and waits until the consumer `pid` has emptied the queue; the time and the
/// consumer's CPU over those stretches.
async fn consume(url: &str, chunks: &[Vec<String>], pid: u32) -> (f64, Duration) {
    let (mut secs, mut cpu) = (0.0, Duration::ZERO);
    for chunk in chunks {
        let (started, before) = (Instant::now(), proc_tree::cpu(pid));
        send(url, chunk).await;
        let deadline = Instant::now() + Duration::from_secs(600);
        while left(url).await > 0 {
            assert!(Instant::now() < deadline, "the consumer stalled");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        secs += started.elapsed().as_secs_f64();
        cpu += proc_tree::cpu(pid).saturating_sub(before);
    }
    (secs, cpu)
}

/// Waits until `ready` holds, or panics after a minute saying `what`.
async fn until(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Celery worker on its own queue, with `pool` (`--pool=...`, `--concurrency=...`).
async fn celery_row(
    name: &'static str,
    pool: &[&str],
    chunks: &[Vec<String>],
    warm_up: &str,
) -> Row {
    let queue = unique("celery-bench");
    let url = create_queue(&queue, &[]).await;
    let dir = tempfile::tempdir().expect("a directory");
    let runs = dir.path().join("runs");
    let mut worker: Child = python()
        .args(["-m", "celery", "-A", "celery_bench", "worker", "-Q", &queue])
        .args(pool)
        .args([
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ])
        .args(["-l", "WARNING"])
        .env("QHOST_BENCH_SQS", endpoint())
        .env("QHOST_BENCH_QUEUE", &queue)
        .env("QHOST_BENCH_REDIS", RESULTS)
        .env("QHOST_BENCH_RUNS", &runs)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("worker.log")).expect("a log"))
        .spawn()
        .expect("starting a Celery worker");
    // One task not counted: the worker is up and polling once it has run.
    send(&url, &[warm_up.to_string()]).await;
    until("the Celery worker did not start", || runs_of(&runs) == 1).await;
    std::fs::write(&runs, "").expect("a fresh runs file");
    let pid = worker.id();
    let (secs, cpu) = consume(&url, chunks, pid).await;
    let peak_rss = proc_tree::peak_rss(pid);
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = worker.wait();
    let counts = run_counts(&runs);
    assert_eq!(counts.len(), tasks(chunks), "every task ran on Celery");
    Row {
        name,
        secs,
        cpu,
        peak_rss,
        runs: counts.values().sum(),
        twice: counts.values().filter(|n| **n > 1).count() as u64,
    }
}

/// The distinct tasks in `chunks`.
fn tasks(chunks: &[Vec<String>]) -> usize {
    (chunks.iter().flatten())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

fn runs_of(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

/// How often each task id ran, from the runs file.
fn run_counts(path: &Path) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for id in std::fs::read_to_string(path).unwrap_or_default().lines() {
        *counts.entry(id.to_string()).or_insert(0) += 1;
    }
    counts
}

/// qhost (the release build of this run) consuming its own queue with `plugin`, on Redis.
async fn qhost_row(
    name: &'static str,
    plugin: &Path,
    chunks: &[Vec<String>],
    warm_up: &str,
) -> Row {
    let queue = unique("qhost-bench");
    let url = create_queue(&queue, &[]).await;
    create_queue(&format!("{queue}-dlq"), &[]).await;
    let dir = tempfile::tempdir().expect("a directory");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("a plugins directory");
    std::fs::copy(plugin, plugins.join("noop.wasm")).expect("the plugin");
    std::fs::write(plugins.join("noop.toml"), "").expect("its manifest");
    let config = dir.path().join("qhost.toml");
    let namespace = unique_namespace("celery-bench");
    std::fs::write(
        &config,
        format!(
            "plugins-dir = \"{}\"\ndata-dir = \"{}\"\n\
             [source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n\
             [idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{namespace}\"\n\
             [celery]\nresult-backend = \"{RESULTS}\"\n\
             [[queue]]\nname = \"{queue}\"\nformat = \"celery\"\n\
             tasks = {{ \"{TASK}\" = \"noop\" }}\nwait-time-secs = 1\n",
            plugins.display(),
            dir.path().join("data").display(),
            endpoint(),
            shared_url(),
        ),
    )
    .expect("the configuration");
    let host = HostProcess::start_consuming(&config);
    send(&url, &[warm_up.to_string()]).await;
    let settled = Instant::now() + Duration::from_secs(60);
    while left(&url).await > 0 {
        assert!(Instant::now() < settled, "qhost did not run its first task");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = host.pid();
    let (secs, cpu) = consume(&url, chunks, pid).await;
    let peak_rss = proc_tree::peak_rss(pid);
    let summary = host.stop();
    let total: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    // Less the warm-up task.
    let invoked = summary_column(&summary, &queue, "ran").saturating_sub(1);
    let acked = summary_column(&summary, &queue, "acked").saturating_sub(1);
    let duplicates = summary_column(&summary, &queue, "duplicate");
    assert_eq!(
        acked + duplicates,
        total,
        "every copy acked or dropped: {summary}"
    );
    let tasks = tasks(chunks) as u64;
    Row {
        name,
        secs,
        cpu,
        peak_rss,
        runs: invoked,
        // Each task arrives at most twice: every run beyond one per task is a second run.
        twice: invoked.saturating_sub(tasks),
    }
}

/// A trivial Python handler, built with the pinned componentize-py.
fn python_noop(dir: &Path) -> PathBuf {
    let root = qhost_e2e::workspace();
    std::fs::write(
        dir.join("app.py"),
        "import wit_world\nfrom wit_world.imports.types import Message, Outcome_Ack\n\n\n\
         class WitWorld(wit_world.WitWorld):\n    def handle(self, msg: Message):\n        \
         return Outcome_Ack()\n",
    )
    .expect("app.py");
    let out = dir.join("noop.wasm");
    let status = Command::new(root.join("target/tools/componentize-py/bin/componentize-py"))
        .arg("-d")
        .arg(root.join("wit"))
        .args(["-w", "handler", "componentize", "-p"])
        .arg(dir)
        .arg("app")
        .arg("-o")
        .arg(&out)
        .status()
        .expect("running componentize-py (scripts/build-guest-plugins installs it)");
    assert!(status.success(), "building the Python plugin failed");
    out
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(5_000);
    let mut bodies = celery_tasks(n + 4).await;
    let warm_ups: Vec<String> = bodies.split_off(n);
    let chunks = plan(&bodies);
    let sent: usize = chunks.iter().map(Vec::len).sum();
    println!(
        "{n} Celery tasks ({TASK}, sent by Celery {}), {sent} deliveries ({} duplicates), chunks of {CHUNK}",
        celery_version(),
        sent - n
    );

    let build = tempfile::tempdir().expect("a directory");
    let python_plugin = python_noop(build.path());
    let rust_plugin = qhost_e2e::built_plugins().join("fixture.wasm");
    let rows = [
        celery_row(
            "Celery, prefork pool (2 processes)",
            &["--pool=prefork", "--concurrency=2"],
            &chunks,
            &warm_ups[0],
        )
        .await,
        celery_row(
            "Celery, threads pool (8 threads)",
            &["--pool=threads", "--concurrency=8"],
            &chunks,
            &warm_ups[1],
        )
        .await,
        qhost_row(
            "qhost, Python plugin",
            &python_plugin,
            &chunks,
            &warm_ups[2],
        )
        .await,
        qhost_row("qhost, Rust plugin", &rust_plugin, &chunks, &warm_ups[3]).await,
    ];

    let base = &rows[0];
    let base_cpu = base.cpu.as_secs_f64() * 1e6 / n as f64;
    println!(
        "\n| {:<36} | {:>8} | {:>13} | {:>9} | {:>12} | {:>8} | {:>21} |",
        "consumer",
        "tasks/s",
        "CPU µs/task",
        "vs prefork",
        "peak RSS MB",
        "runs",
        "ran more than once"
    );
    println!(
        "|{:-<38}|{:->10}|{:->15}|{:->11}|{:->14}|{:->10}|{:->23}|",
        "", "", "", "", "", "", ""
    );
    for r in &rows {
        let cpu = r.cpu.as_secs_f64() * 1e6 / n as f64;
        println!(
            "| {:<36} | {:>8.0} | {:>13.0} | {:>8.2}x | {:>12.1} | {:>8} | {:>21} |",
            r.name,
            n as f64 / r.secs,
            cpu,
            base_cpu / cpu,
            r.peak_rss as f64 / (1024.0 * 1024.0),
            r.runs,
            r.twice,
        );
    }
    println!("\n(vs prefork: how many times less CPU per task than the prefork row)");
}

/// The Celery version the venv holds.
fn celery_version() -> String {
    let out = python()
        .args(["-c", "import celery; print(celery.__version__)"])
        .output()
        .expect("running Python");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
