//! The SQS path's client cost, with the server out of the picture: a loopback responder in
//! this process (`qhost_e2e::sqs_responder`: canned answers over HTTP/1.1 keep-alive, on a
//! thread whose CPU is left out) serves the consumers of the same deliveries, one after the
//! other, in one run. Every tenth delivery is a duplicate of a message delivered 200 messages
//! earlier (SQS's at-least-once delivery), which a consumer must not run again:
//!
//! - a bare aws-sdk-sqs loop: receive 10, delete the batch, no lease (the floor any consumer
//!   using the SDK pays per message at that batch size; it runs the duplicates), and the same
//!   with everything configuration can turn off in the SDK turned off;
//! - the same loop on the SQS client qhost uses: its own JSON client for the hot calls
//!   (`crates/source-sqs/src/json`: hyper, requests signed with `aws-sigv4`, serde), each
//!   message read into qhost's own type;
//! - qhost with a trivial wasm plugin (`plugins/ack`: acks, imports only what the guest SDK and
//!   the standard library need) and the embedded store;
//! - the same with the Redis store (the tests' Redis on 127.0.0.1:6379);
//! - the same with the host's data path on lanes (`lanes = 2`: two threads, each a runtime
//!   with its own pollers and connections, so a message stays on one core), beside a runtime
//!   of one worker thread for the rest of the host;
//! - the Python worker a team writes today (`tests/support/sqs_python_worker.py`: boto3 and
//!   redis-py, a `SET NX` lease per message, the seed's shape), its CPU as it reports it for its
//!   consuming loop (interpreter start-up left out);
//! - the Node.js worker a team writes today (`tests/support/sqs_node_worker/worker.mjs`: bbc's
//!   sqs-consumer on @aws-sdk/client-sqs with a node-redis `SET NX` lease per message), measured
//!   the same way;
//! - qhost with Redis again, every tenth delivery now a copy of the message three before it
//!   (a producer's retried send): copies meet their first one while it runs and are put back,
//!   which shows what put-backs cost in requests;
//! - qhost with Redis and the plugin's instance reused for 1,000 messages (`reuse-instance`):
//!   what the path costs without a fresh sandbox per message;
//! - qhost with Redis and the test fixture as the plugin, on one worker thread: the same
//!   handling (the fixture acks) from a component importing 136 functions to the trivial
//!   plugin's 19, which a fresh instance wires up one by one.
//!
//! The bare and client loops and qhost on Redis run on a runtime of one worker thread and of two;
//! the other in-process rows on two (the peers are single-threaded processes). Each row prints CPU per
//! delivery (user and system), CPU per SQS request, SQS requests and Redis round trips per
//! delivery, by operation, and its ratio to the bare loop (one thread) and to the Python and
//! Node.js workers.
//!
//! `cargo bench -p qhost-e2e --bench sqs_client` (QHOST_BENCH_MESSAGES overrides the 20,000
//! deliveries; run `scripts/install-test-tools` first, for Redis and the Python and Node.js
//! peers). To profile one row alone, `QHOST_BENCH_ONLY=redis` (or `lanes`, `embedded`, `reused`,
//! `bare`, `trimmed`, `client`, `fixture`, `python` or `node`) runs just that row, on
//! `QHOST_BENCH_THREADS` worker threads (2), for `perf record`. `--no-default-features` runs it
//! on the system allocator in place of the qhost command's mimalloc.

use std::sync::Arc;
use std::time::Duration;

use qhost::plugins::Registry;
use qhost::sources::SqsQueue;
use qhost::stores::{LocalStore, RedisStore, Store};
use qhost::{Config, Host};
use qhost_e2e::cpu::CpuTime;
use qhost_e2e::sqs_responder::{OPERATIONS, Responder};
use qhost_e2e::sqs_server::sdk_config_for;
use tokio_util::sync::CancellationToken;

const QUEUE: &str = "bench";

/// Every n-th delivery is a duplicate.
const DUPLICATE_EVERY: usize = 10;
/// How far back a duplicate reaches, in messages: its first copy has finished, as a
/// redelivery minutes later finds it.
const FAR: u64 = 200;
/// How far back a close copy reaches: in the same batch, or while the first copy runs.
const CLOSE: u64 = 3;

/// The plugin's manifest in the last row: an instance serves many messages, which takes the
/// price of a fresh sandbox per message out of the path.
const REUSED: &str = "[limits]\nreuse-instance = 1000\n";

/// The plugin qhost's rows run: the smallest handler (`plugins/ack`, 19 imported functions).
const ACK: &str = "ack";
/// The test fixture (`plugins/fixtures`), which imports 136 functions (sockets, HTTP, state)
/// for its test behaviours: its row shows what a fresh instance's imports cost.
const FIXTURE: &str = "fixture";

/// What one row used.
struct Row {
    name: &'static str,
    /// The runtime's worker threads, for rows run in this process (a host of lanes: its lanes).
    threads: Option<usize>,
    /// Whether the host ran its data path on lanes of its own (`threads` is their number).
    lanes: bool,
    cpu: CpuTime,
    requests: [u64; OPERATIONS.len()],
    /// Redis round trips, where the row uses Redis.
    round_trips: Option<u64>,
    /// Copies put back because their key was leased (qhost's rows).
    busy: Option<u64>,
    /// Deliveries per second of wall time (qhost's rows; the responder shares the machine).
    rate: Option<f64>,
}

/// CPU this process used since `before`, less what the responder's thread used since
/// `responder_before` (its user time from user time, its system time from system time).
fn consumer_cpu(before: CpuTime, responder: &Responder, responder_before: CpuTime) -> CpuTime {
    let mut used = before.elapsed();
    let served = responder.cpu();
    used.user = (used.user).saturating_sub(served.user.saturating_sub(responder_before.user));
    used.system =
        (used.system).saturating_sub(served.system.saturating_sub(responder_before.system));
    used
}

/// The bench queue's URL, through the SDK.
async fn queue_url(client: &aws_sdk_sqs::Client) -> String {
    (client.get_queue_url().queue_name(QUEUE).send().await)
        .expect("a queue URL")
        .queue_url()
        .expect("a URL")
        .to_string()
}

/// The bare loop on the SDK as qhost configures it, or `trimmed`: with the SDK's retries,
/// stalled-stream protection, timeouts and identity cache turned off, what configuration alone
/// can take out of its per-request machinery.
async fn bare_loop(responder: &Responder, n: usize, trimmed: bool) -> Row {
    use aws_sdk_sqs::config::{
        IdentityCache, StalledStreamProtectionConfig, retry::RetryConfig, timeout::TimeoutConfig,
    };
    let mut config = aws_sdk_sqs::config::Builder::from(&sdk_config_for(&responder.endpoint()));
    if trimmed {
        config = config
            .retry_config(RetryConfig::disabled())
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            .timeout_config(TimeoutConfig::disabled())
            .identity_cache(IdentityCache::no_cache());
    }
    let client = aws_sdk_sqs::Client::from_conf(config.build());
    let url = queue_url(&client).await;
    responder.offer(n);
    let (start, served, calls) = (CpuTime::now(), responder.cpu(), responder.requests());
    let mut done = 0;
    while done < n {
        let got = (client.receive_message().queue_url(&url))
            .max_number_of_messages(10)
            .send()
            .await
            .expect("receive");
        let entries: Vec<_> = (got.messages().iter().enumerate())
            .map(|(i, m)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .expect("an entry")
            })
            .collect();
        done += entries.len();
        if !entries.is_empty() {
            (client.delete_message_batch().queue_url(&url))
                .set_entries(Some(entries))
                .send()
                .await
                .expect("delete");
        }
    }
    Row {
        name: if trimmed {
            "bare aws-sdk-sqs loop, trimmed (no retries, stalled-stream protection, timeouts or identity cache)"
        } else {
            "bare aws-sdk-sqs loop (receive 10 + delete batch)"
        },
        threads: None,
        lanes: false,
        cpu: consumer_cpu(start, responder, served),
        requests: minus(responder.requests(), calls),
        round_trips: None,
        busy: None,
        rate: None,
    }
}

/// The same loop on the SQS client qhost uses (`SqsQueue`: its JSON client for the hot calls,
/// `qhost-source-sqs`), each message read into qhost's own type as the pipeline reads it.
async fn client_loop(responder: &Responder, n: usize) -> Row {
    use qhost::sources::QueueSource as _;
    let sqs = SqsQueue::from_sdk_config(&sdk_config_for(&responder.endpoint()));
    sqs.url(QUEUE).await.expect("a queue URL");
    responder.offer(n);
    let (start, served, calls) = (CpuTime::now(), responder.cpu(), responder.requests());
    let (mut done, mut read) = (0, 0);
    while done < n {
        let got = (sqs.receive(QUEUE, 10, Duration::from_secs(30), Duration::ZERO))
            .await
            .expect("receive");
        // What a consumer reads of each message: its id and body.
        read += got.iter().map(|m| m.id.len() + m.body.len()).sum::<usize>();
        let receipts: Vec<String> = got.into_iter().map(|m| m.handle).collect();
        done += receipts.len();
        if !receipts.is_empty() {
            let answers = sqs.settle(QUEUE, &receipts).await.expect("delete");
            assert!(answers.iter().all(Result::is_ok), "every delete succeeded");
        }
    }
    assert!(read > 0, "the messages were read");
    Row {
        name: "qhost's SQS client loop: its JSON client (receive 10 + delete batch)",
        threads: None,
        lanes: false,
        cpu: consumer_cpu(start, responder, served),
        requests: minus(responder.requests(), calls),
        round_trips: None,
        busy: None,
        rate: None,
    }
}

/// qhost on `store`, the plugin built from crate `plugin` under `manifest` (a manifest's TOML,
/// "" for none).
async fn qhost_row(
    name: &'static str,
    responder: &Responder,
    store: (Arc<dyn Store>, Option<&RedisStore>),
    n: usize,
    plugin: (&str, &str),
) -> Row {
    qhost_lanes_row(name, responder, store, n, plugin, 1).await
}

/// As [`qhost_row`], the host's data path on `lanes` threads of its own (`lanes = N`).
async fn qhost_lanes_row(
    name: &'static str,
    responder: &Responder,
    (store, redis): (Arc<dyn Store>, Option<&RedisStore>),
    n: usize,
    (plugin, manifest): (&str, &str),
    lanes: usize,
) -> Row {
    let mut config = Config::parse(&format!(
        "max-in-flight = 64\nlanes = {lanes}\n[[queue]]\nname = \"{QUEUE}\"\nplugin = \"trivial\"\n"
    ))
    .expect("config");
    config.data_dir = None;
    let plugin = qhost_e2e::built_plugin_as(plugin, "trivial", &config, manifest);
    let sqs = Arc::new(SqsQueue::from_sdk_config(&sdk_config_for(
        &responder.endpoint(),
    )));
    let host = Host::new(config, sqs, store, Registry::new([plugin]));
    let (duplicates, trips) = (responder.duplicates(), redis.map(RedisStore::round_trips));
    responder.offer(n);
    let (start, served, calls) = (CpuTime::now(), responder.cpu(), responder.requests());
    let started = std::time::Instant::now();
    host.run_until_idle(CancellationToken::new())
        .await
        .expect("run");
    // The run ends after the idle check's last look, within its interval of the last ack.
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let cpu = consumer_cpu(start, responder, served);
    let c = host.stats().total();
    let duplicates = responder.duplicates() - duplicates;
    let distinct = n as u64 - duplicates;
    assert_eq!(
        (c.invoked, c.acked, c.duplicates),
        (distinct, distinct, duplicates),
        "every message ran once and every duplicate was suppressed: {c:?}"
    );
    Row {
        name,
        threads: None,
        lanes: false,
        cpu,
        requests: minus(responder.requests(), calls),
        round_trips: redis.zip(trips).map(|(r, before)| r.round_trips() - before),
        busy: Some(c.busy),
        rate: Some(rate),
    }
}

/// qhost on Redis with every tenth delivery a copy of a message three before it, as a
/// producer's retried sends arrive: copies meet their first one in a batch or while it runs,
/// and go back (busy) until it is done. Shows what the put-backs cost in requests.
async fn close_copies(responder: &Responder, redis: &RedisStore, n: usize) -> Row {
    responder.duplicate_every(DUPLICATE_EVERY, CLOSE);
    let row = qhost_row(
        "qhost, Redis store, copies close together (put back while the first runs)",
        responder,
        (Arc::new(redis.clone()), Some(redis)),
        n,
        (ACK, ""),
    )
    .await;
    responder.duplicate_every(DUPLICATE_EVERY, FAR);
    row
}

/// A peer worker another language's team writes instead, run as its own process: it consumes
/// `n` deliveries and prints one JSON line with the CPU of its consuming loop (start-up left
/// out), its handled and duplicate counts and its Redis round trips.
struct Peer {
    name: &'static str,
    /// The program and its script, under the workspace.
    program: &'static str,
    script: &'static str,
    /// What installs it.
    install: &'static str,
}

const PYTHON: Peer = Peer {
    name: "Python worker: boto3 + redis-py SET NX (the seed's shape)",
    program: "target/tools/moto/bin/python",
    script: "tests/support/sqs_python_worker.py",
    install: "scripts/install-test-tools installs boto3 and redis-py",
};

const NODE: Peer = Peer {
    name: "Node.js worker: sqs-consumer + node-redis SET NX",
    program: "node",
    script: "target/tools/node-worker/worker.mjs",
    install: "scripts/install-test-tools installs sqs-consumer and node-redis",
};

fn peer_row(peer: &Peer, responder: &Responder, n: usize) -> Row {
    let root = qhost_e2e::workspace();
    let program = match root.join(peer.program) {
        local if local.exists() => local,
        _ => peer.program.into(),
    };
    let duplicates = responder.duplicates();
    responder.offer(n);
    let calls = responder.requests();
    let out = std::process::Command::new(program)
        .arg(root.join(peer.script))
        .arg(responder.endpoint())
        .arg(QUEUE)
        .arg(qhost_e2e::redis_server::shared_url())
        .arg(n.to_string())
        .arg(format!("bench-peer-{}", uuid::Uuid::new_v4().simple()))
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} ({})", peer.name, peer.install));
    assert!(
        out.status.success(),
        "{}: {}",
        peer.name,
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{}'s report: {e}", peer.name));
    let duplicates = responder.duplicates() - duplicates;
    assert_eq!(
        (report["handled"].as_u64(), report["duplicates"].as_u64()),
        (Some(n as u64 - duplicates), Some(duplicates)),
        "{} ran each message once: {report}",
        peer.name
    );
    let seconds = |field: &str| Duration::from_secs_f64(report[field].as_f64().unwrap_or(0.0));
    Row {
        name: peer.name,
        threads: None,
        lanes: false,
        cpu: CpuTime {
            user: seconds("user"),
            system: seconds("system"),
        },
        requests: minus(responder.requests(), calls),
        round_trips: report["round_trips"].as_u64(),
        busy: None,
        rate: None,
    }
}

fn minus(a: [u64; OPERATIONS.len()], b: [u64; OPERATIONS.len()]) -> [u64; OPERATIONS.len()] {
    std::array::from_fn(|i| a[i] - b[i])
}

/// The rows, in the order they run and print.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Bare,
    Trimmed,
    Client,
    Embedded,
    Redis,
    Python,
    Node,
    CloseCopies,
    Reused,
    Fixture,
    Lanes,
}

/// Runs one row; qhost's and the bare loop on a runtime of `threads` worker threads of their
/// own (a host's pipeline runs on the runtime it starts on), with a Redis connection of that
/// runtime's.
fn run(kind: Kind, threads: usize, responder: &'static Responder, n: usize) -> Row {
    match kind {
        Kind::Python => return peer_row(&PYTHON, responder, n),
        Kind::Node => return peer_row(&NODE, responder, n),
        _ => {}
    }
    // A host of lanes runs its data path on threads of its own; its runtime keeps the rest.
    let workers = if kind == Kind::Lanes { 1 } else { threads };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a runtime");
    // The row runs as a task on the runtime's workers, as a consumer's loop (and qhost's
    // pipeline) does, not on the thread that blocks on the runtime: from there every request
    // would wake a worker for hyper's connection task and be woken back.
    let row = runtime.spawn(async move {
        let redis = RedisStore::connect(&qhost_e2e::redis_server::shared_url())
            .await
            .expect("the tests' Redis on 127.0.0.1:6379 (scripts/install-test-tools starts it)");
        let on_redis = || (Arc::new(redis.clone()) as Arc<dyn Store>, Some(&redis));
        match kind {
            Kind::Bare => bare_loop(responder, n, false).await,
            Kind::Trimmed => bare_loop(responder, n, true).await,
            Kind::Client => client_loop(responder, n).await,
            Kind::Embedded => {
                let store = Arc::new(LocalStore::open(None).expect("store"));
                let name = "qhost, trivial wasm plugin, embedded store";
                qhost_row(name, responder, (store, None), n, (ACK, "")).await
            }
            Kind::Redis => {
                let name = "qhost, trivial wasm plugin, Redis store";
                qhost_row(name, responder, on_redis(), n, (ACK, "")).await
            }
            Kind::Lanes => {
                let name = "qhost, trivial wasm plugin, Redis store, a lane per thread";
                let plugin = (ACK, "");
                qhost_lanes_row(name, responder, on_redis(), n, plugin, threads).await
            }
            Kind::CloseCopies => close_copies(responder, &redis, n).await,
            Kind::Reused => {
                let name =
                    "qhost, Redis store, one instance for 1,000 messages (reuse-instance = 1000)";
                qhost_row(name, responder, on_redis(), n, (ACK, REUSED)).await
            }
            Kind::Fixture => {
                let name = "qhost, Redis store, the test fixture as the plugin (136 imports)";
                qhost_row(name, responder, on_redis(), n, (FIXTURE, "")).await
            }
            Kind::Python | Kind::Node => unreachable!("peers run as processes"),
        }
    });
    let mut row = runtime.block_on(row).expect("the row's task");
    row.threads = Some(threads);
    row.lanes = kind == Kind::Lanes;
    row
}

/// Every row, in order: the bare SDK loop, qhost's client loop and qhost on Redis on one worker thread
/// and on two; the trimmed SDK loop on one; qhost's other rows on two (the peers are processes).
const ROWS: [(Kind, usize); 14] = [
    (Kind::Bare, 1),
    (Kind::Bare, 2),
    (Kind::Trimmed, 1),
    (Kind::Client, 1),
    (Kind::Client, 2),
    (Kind::Embedded, 2),
    (Kind::Redis, 1),
    (Kind::Redis, 2),
    (Kind::Lanes, 2),
    (Kind::Python, 1),
    (Kind::Node, 1),
    (Kind::CloseCopies, 2),
    (Kind::Reused, 2),
    (Kind::Fixture, 1),
];

fn main() {
    let n = qhost_e2e::bench_messages(20_000);
    // Shared with each row's task for the whole run.
    let responder: &'static Responder = Box::leak(Box::new(Responder::start()));
    responder.duplicate_every(DUPLICATE_EVERY, FAR);
    let threads = std::env::var("QHOST_BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    if let Ok(only) = std::env::var("QHOST_BENCH_ONLY") {
        let kind = match only.as_str() {
            "bare" => Kind::Bare,
            "trimmed" => Kind::Trimmed,
            "client" => Kind::Client,
            "reused" => Kind::Reused,
            "redis" => Kind::Redis,
            "fixture" => Kind::Fixture,
            "node" => Kind::Node,
            "python" => Kind::Python,
            "lanes" => Kind::Lanes,
            _ => Kind::Embedded,
        };
        let row = run(kind, threads, responder, n);
        let cpu = row.cpu.micros_per(n);
        print_row(
            &row,
            n,
            Baselines {
                bare: cpu,
                python: cpu,
                node: cpu,
            },
        );
        return;
    }
    let rows: Vec<Row> = (ROWS.iter())
        .map(|&(kind, threads)| run(kind, threads, responder, n))
        .collect();
    println!(
        "SQS client cost, {n} deliveries per row (every {DUPLICATE_EVERY}th a duplicate), a \
         loopback responder in this process (its CPU left out)\n"
    );
    let per = |kind: Kind, threads: usize| {
        (ROWS.iter().position(|&r| r == (kind, threads)))
            .map_or(f64::NAN, |i| rows[i].cpu.micros_per(n))
    };
    let baselines = Baselines {
        bare: per(Kind::Bare, 1),
        python: per(Kind::Python, 1),
        node: per(Kind::Node, 1),
    };
    for r in &rows {
        print_row(r, n, baselines);
    }
}

/// CPU per delivery of the rows every row is compared with, in µs.
#[derive(Clone, Copy)]
struct Baselines {
    /// The bare SDK loop on one worker thread.
    bare: f64,
    python: f64,
    node: f64,
}

fn print_row(r: &Row, n: usize, baselines: Baselines) {
    let requests: u64 = r.requests.iter().sum();
    let per_request = (r.cpu.user + r.cpu.system).as_secs_f64() * 1e6 / requests.max(1) as f64;
    let cpu = r.cpu.micros_per(n);
    match r.threads {
        Some(threads) => println!(
            "{} ({threads} {}{})",
            r.name,
            if r.lanes {
                "lanes, a thread each, beside a runtime of one worker thread"
            } else {
                "worker thread"
            },
            if threads == 1 || r.lanes { "" } else { "s" }
        ),
        None => println!("{}", r.name),
    }
    println!(
        "  CPU per delivery  {cpu:>7.1} µs  (user {:.1}, system {:.1}; {:.2}× the bare loop, \
         {:.1}× less than the Python worker, {:.1}× less than the Node.js worker)",
        r.cpu.user.as_secs_f64() * 1e6 / n as f64,
        r.cpu.system.as_secs_f64() * 1e6 / n as f64,
        cpu / baselines.bare,
        baselines.python / cpu,
        baselines.node / cpu,
    );
    println!("  CPU per request   {per_request:>7.1} µs  ({requests} requests)");
    let by_op: Vec<String> = (OPERATIONS.iter().zip(r.requests))
        .filter(|(_, c)| *c > 0)
        .map(|(op, c)| format!("{op} {:.3}", c as f64 / n as f64))
        .collect();
    println!(
        "  requests/delivery {:>7.3}     ({}; {:.0} per 1,000 deliveries)",
        requests as f64 / n as f64,
        by_op.join(", "),
        requests as f64 * 1000.0 / n as f64
    );
    if let Some(trips) = r.round_trips {
        println!(
            "  Redis round trips {:>7.3}     per delivery",
            trips as f64 / n as f64
        );
    }
    if let Some(rate) = r.rate {
        println!(
            "  deliveries/s  {rate:>11.0}     (wall time, with the responder on this machine)"
        );
    }
    if let Some(busy) = r.busy.filter(|b| *b > 0) {
        println!("  put back busy     {busy:>7}     (copies whose key was leased while they came)");
    }
    println!();
}
