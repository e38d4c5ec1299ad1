//! Faults of the dependencies, injected on loopback: SQS through a proxy that answers errors,
//! resets, delays and black-holes chosen calls ([`FaultProxy`]); Redis stopped (SIGSTOP) for
//! longer than its response deadline and continued. Whatever a dependency does, nothing is lost,
//! nothing runs twice, nothing is dead-lettered, and consuming goes on.
//!
//! "Ran once" is read where it cannot be double-counted: every handler run sends its lease's
//! fencing token to the sink, and every grant of a lease raises the key's token. One token per
//! key among the effects means one run (an outbox sent again after a lost answer repeats the
//! same token).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use qhost::sources::QueueSource;
use qhost::sources::SqsQueue;
use qhost::{Attribute, Outgoing};
use qhost_e2e::admin::{get, sample, total};
use qhost_e2e::fault_proxy::{Fault, FaultProxy};
use qhost_e2e::harness::{TestEnv, attr, contents, take_all};
use qhost_e2e::processes::HostProcess;
use qhost_e2e::redis_cluster::RedisCluster;
use qhost_e2e::redis_server::{RedisServer, shared_url, unique_namespace};
use qhost_e2e::sqs_server::{Server, drain_at, patient_queue, sdk_config_for, unique};

/// Jobs of the SQS run; every tenth is sent twice by its producer. Enough calls for every
/// fault below to meet every call kind it is injected into (the test asserts each did), in
/// about 40 s of draining; 2,000 took three minutes of a CI run's end-to-end time for no
/// other check.
const SQS_JOBS: usize = 800;

/// A host's configuration: `source` and `store` are TOML tables; it consumes `queues`, with
/// `pollers` receive loops each.
fn config_file(
    env: &TestEnv,
    name: &str,
    source: &str,
    store: &str,
    queues: &[String],
    pollers: u32,
) -> PathBuf {
    let mut text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\nmax-in-flight = 8\nshutdown-grace-secs = 5\n\
         {source}\n{store}\n[retry]\nbase-secs = 0.05\nmax-secs = 1\n",
        env.plugins_dir(),
        env.data_dir().join(name),
    );
    for queue in queues {
        text.push_str(&format!(
            "[[queue]]\nname = \"{queue}\"\nplugin = \"fixture\"\nwait-time-secs = 1\n\
             visibility-timeout-secs = 6\npollers = {pollers}\n"
        ));
    }
    let path = (env.plugins_dir().parent())
        .expect("the test directory")
        .join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("config file");
    path
}

/// The jobs: each job once, every tenth a second time (another message, the same job id).
fn jobs(n: usize, queue: &str, sink: &str) -> Vec<Outgoing> {
    let mut all = Vec::new();
    for i in 0..n {
        let msg = Outgoing::new(queue, format!("send-fence:{sink}"))
            .with_attribute(Attribute::string("job-id", format!("j-{i}")));
        if i % 10 == 0 {
            all.push(msg.clone());
        }
        all.push(msg);
    }
    all
}

/// Effects on the sink by derived key: the fencing tokens of the runs that made them.
type Effects = BTreeMap<String, Vec<u64>>;

fn add_effects(effects: &mut Effects, msgs: Vec<qhost::Received>) {
    for m in msgs {
        let key = attr(&m, "qhost-idempotency-key")
            .expect("derived key")
            .to_string();
        let token = String::from_utf8_lossy(&m.body).parse().expect("a token");
        effects.entry(key).or_default().push(token);
    }
}

/// Every job's effect arrived, each made by one run.
fn assert_each_ran_once(effects: &Effects, n: usize) {
    let expected: BTreeSet<String> = (0..n).map(|i| format!("fixture:j-{i}/0")).collect();
    let keys: BTreeSet<String> = effects.keys().cloned().collect();
    assert_eq!(keys, expected, "every job's effect, under its one key");
    let twice: Vec<_> = (effects.iter())
        .filter(|(_, tokens)| tokens.iter().collect::<BTreeSet<_>>().len() > 1)
        .collect();
    assert!(twice.is_empty(), "jobs that ran more than once: {twice:?}");
}

/// Deliveries a host has finished so far (acked, or found done), from its metrics: every
/// queue's series summed (one series alone is one queue's, and which comes first in the
/// exposition changes as queues start finishing).
fn finished(admin: SocketAddr) -> f64 {
    let (_, text) = get(admin, "/metrics");
    ["acked", "duplicate"]
        .iter()
        .map(|outcome| {
            total(
                &text,
                "qhost_messages_handled_total",
                &[("outcome", outcome)],
            )
        })
        .sum()
}

/// Timed-out calls of `operation` a host has counted.
fn timeouts(admin: SocketAddr, operation: &str) -> f64 {
    let (_, text) = get(admin, "/metrics");
    let labels = [("operation", operation), ("kind", "timeout")];
    sample(&text, "qhost_backend_call_failures_total", &labels).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_drain_sqs_through_errors_resets_delays_and_black_holes() {
    // A server of this test's own. moto's calls cost time in proportion to a queue's depth, so
    // the jobs are spread over SHARDS queues, each with its own sink. Every job is queued
    // before the hosts start and the sinks are read only once they have stopped, so no queue is
    // sent to and deleted from at once (moto lost such sends until `moto_server.py`).
    const SHARDS: usize = 8;
    let server = Server::start_own();
    let direct = patient_queue(server.endpoint());
    let env = TestEnv::new();
    env.install(
        "fixture",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n",
    );
    let tag = unique("faults");
    let queues: Vec<String> = (0..SHARDS).map(|i| format!("{tag}-{i}")).collect();
    let sinks: Vec<String> = (0..SHARDS).map(|i| format!("{tag}-sink-{i}")).collect();
    let admin = aws_sdk_sqs::Client::new(&sdk_config_for(server.endpoint()));
    let dlqs: Vec<String> = queues.iter().map(|q| format!("{q}-dlq")).collect();
    for name in queues.iter().chain(&sinks).chain(&dlqs) {
        admin
            .create_queue()
            .queue_name(name)
            .send()
            .await
            .expect("create queue");
    }
    // Each job once, every tenth a second time (another message, the same job id), by shard.
    for (shard, queue) in queues.iter().enumerate() {
        let mut mine = Vec::new();
        for i in (shard..SQS_JOBS).step_by(SHARDS) {
            let msg = Outgoing::new(queue, format!("send-fence:{}", sinks[shard]))
                .with_attribute(Attribute::string("job-id", format!("j-{i}")));
            if i % 10 == 0 {
                mine.push(msg.clone());
            }
            mine.push(msg);
        }
        for chunk in mine.chunks(10) {
            direct.send(chunk).await.expect("send");
        }
    }

    let proxy = FaultProxy::start(server.endpoint());
    // The first answers of each kind of call are lost (black holes); after them, every call
    // kind meets each fault in turn, all through the run.
    for (operation, lost) in [
        ("ReceiveMessage", 4),
        ("SendMessageBatch", 32),
        ("DeleteMessageBatch", 8),
    ] {
        proxy.inject(operation, 2, Fault::BlackHole, lost);
    }
    for operation in [
        "ReceiveMessage",
        "SendMessageBatch",
        "DeleteMessageBatch",
        "ChangeMessageVisibility",
    ] {
        proxy.inject(operation, 23, Fault::Status(500), 1_000);
        proxy.inject(operation, 29, Fault::Status(503), 1_000);
        proxy.inject(operation, 31, Fault::ResetBefore, 1_000);
        proxy.inject(operation, 37, Fault::ResetAfter, 1_000);
        proxy.inject(
            operation,
            41,
            Fault::Delay(Duration::from_millis(300)),
            1_000,
        );
    }
    let ns = unique_namespace("faults-sqs");
    // A call's deadline well above what the test's own server takes on a loaded machine, so
    // the calls that time out are the black holes above, not a slow answer: with 1 s, a
    // loaded CI run's moto missed it on visibility changes and deletes (faults never injected
    // as black holes), each lost delete came back after its visibility timeout, and 411 of
    // 880 messages were still queued after 300 s.
    let source = format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\nregion = \"us-east-1\"\n\
         [timeouts]\nconnect-ms = 1000\nsqs-call-ms = 3000\nsqs-receive-margin-ms = 1000\n",
        proxy.endpoint()
    );
    let store = format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{ns}\"\n",
        shared_url()
    );
    let hosts: Vec<HostProcess> = ["a", "b"]
        .iter()
        .map(|name| {
            HostProcess::start_consuming(&config_file(&env, name, &source, &store, &queues, 1))
        })
        .collect();
    let admins: Vec<SocketAddr> = hosts.iter().map(HostProcess::admin_addr).collect();

    let started = Instant::now();
    // Finished deliveries of each host at the start of each 5 s window, while work remains.
    let mut windows: Vec<Vec<f64>> = vec![admins.iter().map(|&a| finished(a)).collect()];
    let mut window_start = Instant::now();
    loop {
        let mut left = 0;
        for queue in &queues {
            left += direct.depth(queue).await.expect("depth").total();
        }
        if left == 0 {
            break;
        }
        if window_start.elapsed() >= Duration::from_secs(5) && left > (SQS_JOBS / 10) as u64 {
            windows.push(admins.iter().map(|&a| finished(a)).collect());
            window_start = Instant::now();
        }
        if started.elapsed() > Duration::from_secs(300) {
            let logs: Vec<String> = hosts.iter().map(HostProcess::log).collect();
            panic!(
                "not drained: {left} messages left on the queues; logs:\n{}",
                logs.join("\n----\n")
            );
        }
        if std::env::var_os("QHOST_TEST_VERBOSE").is_some() {
            println!("{:.1}s: {left} left", started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = started.elapsed();
    let lost_answers: Vec<f64> = admins
        .iter()
        .map(|&a| {
            ["ReceiveMessage", "SendMessageBatch", "DeleteMessageBatch"]
                .iter()
                .map(|op| timeouts(a, op))
                .sum()
        })
        .collect();
    for host in hosts {
        host.stop();
    }
    let mut effects = Effects::new();
    for sink in &sinks {
        add_effects(&mut effects, take_all(&direct, sink, Duration::ZERO).await);
    }

    assert_each_ran_once(&effects, SQS_JOBS);
    for dlq in &dlqs {
        let dead = drain_at(server.endpoint(), dlq).await;
        assert!(dead.is_empty(), "nothing dead-lettered: {dead:?}");
    }
    for pair in windows.windows(2) {
        for (host, (before, after)) in pair[0].iter().zip(&pair[1]).enumerate() {
            assert!(
                after > before,
                "host {host} finished nothing in a 5 s window while faults lasted: {windows:?}"
            );
        }
    }
    for operation in ["ReceiveMessage", "SendMessageBatch", "DeleteMessageBatch"] {
        assert!(
            proxy.applied(operation, Fault::BlackHole) > 0,
            "{operation} answers were lost"
        );
        for fault in [
            Fault::Status(500),
            Fault::Status(503),
            Fault::ResetBefore,
            Fault::ResetAfter,
        ] {
            assert!(
                proxy.applied(operation, fault) > 0,
                "{operation} met {fault:?}"
            );
        }
    }
    assert!(
        lost_answers.iter().sum::<f64>() > 0.0,
        "the lost answers were counted as timeouts"
    );
    let repeats: usize = effects.values().map(|t| t.len() - 1).sum();
    println!(
        "faults: {SQS_JOBS} jobs (+{} producer duplicates) through two hosts in {:.1}s, {} \
         receives, {} sends, {} deletes black-holed; {repeats} outbox messages sent again after \
         a lost answer; timeouts counted per host {lost_answers:?}; finished per 5 s window \
         {windows:?}",
        SQS_JOBS / 10,
        took.as_secs_f64(),
        proxy.applied("ReceiveMessage", Fault::BlackHole),
        proxy.applied("SendMessageBatch", Fault::BlackHole),
        proxy.applied("DeleteMessageBatch", Fault::BlackHole),
    );
}

/// How long [`redis_stops_mid_run`] keeps the store stopped.
enum Stop {
    /// A fixed time.
    For(Duration),
    /// Until this many effects have arrived after the grace (runs that began while stopped),
    /// or `within` has passed: a count to wait for, not a window a loaded machine can miss.
    UntilEffects { effects: usize, within: Duration },
}

/// Two hosts on the embedded queue (one database file) and `store`; Redis is stopped by
/// `pause` once a third of the jobs are done, as `stop` says, then continued by `resume`.
/// Returns the effects that arrived while stopped (after a grace for runs answered before).
async fn redis_stops_mid_run(
    store: &str,
    pause: impl FnOnce(),
    resume: impl FnOnce(),
    stop: Stop,
) -> (usize, Vec<String>) {
    const JOBS: usize = 400;
    let env = TestEnv::new();
    env.install(
        "fixture",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n",
    );
    let store = format!("{store}\n[timeouts]\nredis-response-ms = 300\nconnect-ms = 500\n");
    let shared = format!("data-dir = {:?}\n", env.data_dir());
    let config = |name: &str| {
        // The effects' queue, read by the test alone: declared, so it exists.
        let source = "[source]\nqueues = [\"sink\"]";
        let path = config_file(&env, name, source, &store, &["jobs".to_string()], 2);
        let text = std::fs::read_to_string(&path).expect("config");
        // Both hosts share one embedded queue: one data directory.
        let text = text
            .lines()
            .filter(|l| !l.starts_with("data-dir"))
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&path, format!("{shared}{text}\n")).expect("config");
        path
    };
    let q = env.queue();
    q.send(&jobs(JOBS, "jobs", "sink")).await.expect("send");
    let hosts = [
        HostProcess::start_consuming(&config("a")),
        HostProcess::start_consuming(&config("b")),
    ];
    let admins: Vec<SocketAddr> = hosts.iter().map(HostProcess::admin_addr).collect();
    let mut effects = Effects::new();
    let started = Instant::now();
    while effects.len() < JOBS / 3 {
        add_effects(&mut effects, take_all(&q, "sink", Duration::ZERO).await);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "a third not done in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pause();
    let paused = Instant::now();
    // Runs whose completion was answered before the stop may still send their effect.
    tokio::time::sleep(Duration::from_millis(500)).await;
    add_effects(&mut effects, take_all(&q, "sink", Duration::ZERO).await);
    let before = effects.len();
    let (wanted, until) = match stop {
        Stop::For(stopped) => (usize::MAX, stopped),
        Stop::UntilEffects { effects, within } => (effects, within),
    };
    while paused.elapsed() < until && effects.len() - before < wanted {
        tokio::time::sleep(Duration::from_millis(50)).await;
        add_effects(&mut effects, take_all(&q, "sink", Duration::ZERO).await);
    }
    let while_stopped = effects.len() - before;
    let stopped = paused.elapsed();
    resume();
    loop {
        add_effects(&mut effects, take_all(&q, "sink", Duration::ZERO).await);
        let left = q.depth("jobs").await.expect("depth").total();
        if effects.len() == JOBS && left == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not drained after Redis continued: {} of {JOBS} effects, {left} left",
            effects.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let timed_out: f64 = admins
        .iter()
        .map(|&a| timeouts(a, "acquire") + timeouts(a, "complete"))
        .sum();
    let logs: Vec<String> = hosts
        .into_iter()
        .map(|h| {
            let log = h.log();
            h.stop();
            log
        })
        .collect();
    add_effects(&mut effects, take_all(&q, "sink", Duration::ZERO).await);
    assert_each_ran_once(&effects, JOBS);
    assert!(
        contents(&q, "jobs-dlq").await.is_empty(),
        "nothing dead-lettered"
    );
    assert!(
        timed_out > 0.0,
        "lease calls timed out while Redis was stopped"
    );
    println!(
        "redis stopped for {:.1}s: {JOBS} jobs, {while_stopped} effects while stopped, \
         {timed_out} lease calls timed out, drained {:.1}s after the start",
        stopped.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    (while_stopped, logs)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_redis_fails_leases_closed_and_consuming_resumes_when_it_continues() {
    let redis = RedisServer::start();
    let store = format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{}\"\n",
        redis.url(),
        unique_namespace("faults-stop")
    );
    let (while_stopped, logs) = redis_stops_mid_run(
        &store,
        || redis.pause(),
        || redis.resume(),
        Stop::For(Duration::from_secs(3)),
    )
    .await;
    assert_eq!(
        while_stopped, 0,
        "no run completes while its store is stopped"
    );
    let log = logs.join("\n");
    assert!(
        log.contains("did not answer within the deadline"),
        "a host logged the timeout:\n{log}"
    );
    // Logged once per burst, not once per message: a 3 s stop is one burst per operation.
    let lines = log
        .lines()
        .filter(|l| l.contains("idempotency store unavailable"))
        .count();
    assert!(
        (1..=4).contains(&lines),
        "{lines} lines for one outage:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_cluster_primary_fails_its_keys_closed_and_consuming_resumes() {
    let cluster = RedisCluster::without_replicas(3);
    let seeds: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let store = format!(
        "[idempotency]\nkind = \"redis\"\ncluster = true\nurls = [{}]\nnamespace = \"{}\"\n",
        seeds.join(", "),
        unique_namespace("faults-cluster")
    );
    let victim = cluster.primaries()[0];
    // The primary is slow, not failed: the stop stays well inside the node timeout, past which
    // a cluster with no replica to promote would refuse every key, not only the victim's.
    let within = Duration::from_secs(20);
    cluster.set_node_timeout(within * 3);
    const WANTED: usize = 10;
    let (while_stopped, _) = redis_stops_mid_run(
        &store,
        || cluster.pause_node(victim),
        || cluster.resume_node(victim),
        Stop::UntilEffects {
            effects: WANTED,
            within,
        },
    )
    .await;
    assert!(
        while_stopped >= WANTED,
        "keys on the other primaries went on while one was stopped: {while_stopped} effects \
         in {within:?}"
    );
}

/// A TCP server on loopback that accepts connections, reads what comes, and never answers.
fn silent_server() -> (SocketAddr, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = listener.local_addr().expect("its address");
    let thread = std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    (addr, thread)
}

/// Runs `call`, which must fail within `limit` (the test fails rather than hang past it).
/// The one answer of a batched store call for one key: the call's error, or the key's own.
fn only<T>(
    answers: qhost::stores::StoreResult<Vec<qhost::stores::StoreResult<T>>>,
) -> qhost::stores::StoreResult<T> {
    let mut answers = answers?;
    assert_eq!(answers.len(), 1, "one answer for one request");
    answers.remove(0)
}

async fn fails_in_time<T: std::fmt::Debug, E: std::fmt::Display>(
    what: &str,
    limit: Duration,
    call: impl Future<Output = Result<T, E>>,
) -> String {
    match tokio::time::timeout(limit, call).await {
        Ok(Err(e)) => e.to_string(),
        Ok(Ok(v)) => panic!("{what}: answered {v:?} from a server that never answers"),
        Err(_) => panic!("{what}: still waiting after {limit:?}"),
    }
}

#[tokio::test]
async fn every_sqs_and_s3_call_ends_at_its_deadline_when_no_answer_comes() {
    let (addr, _server) = silent_server();
    let silent = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(format!("http://{addr}"))
        .http_client(qhost::testing::https_client())
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
            aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "qhost-tests"),
        ))
        .build();
    let deadlines = qhost::sources::AwsDeadlines {
        connect: Duration::from_secs(1),
        call: Duration::from_millis(300),
        receive_margin: Duration::from_millis(300),
    };
    let sqs = SqsQueue::with_deadlines(&silent, deadlines);
    let limit = Duration::from_secs(15);
    let e = fails_in_time("GetQueueUrl", limit, sqs.url("jobs")).await;
    assert!(e.contains("no answer within the deadline"), "{e}");
    sqs.set_url("jobs", &format!("http://{addr}/000000000000/jobs"));
    let receipts = ["r".to_string()];
    let msg = [Outgoing::new("jobs", "x")];
    let results = [
        (
            "ReceiveMessage",
            fails_in_time(
                "receive",
                limit,
                sqs.receive("jobs", 10, Duration::from_secs(30), Duration::from_secs(1)),
            )
            .await,
        ),
        (
            "DeleteMessageBatch",
            fails_in_time("delete", limit, sqs.settle("jobs", &receipts)).await,
        ),
        (
            "ChangeMessageVisibility",
            fails_in_time(
                "visibility",
                limit,
                sqs.put_back("jobs", "r", Duration::from_secs(1)),
            )
            .await,
        ),
        (
            "SendMessageBatch",
            fails_in_time("send", limit, sqs.send(&msg)).await,
        ),
        (
            "GetQueueAttributes",
            fails_in_time("depth", limit, sqs.depth("jobs")).await,
        ),
    ];
    for (operation, error) in results {
        assert!(
            error.ends_with("no answer within the deadline"),
            "{operation}: {error}"
        );
    }

    let s3 = qhost::payloads::S3Payloads::with_deadlines(&silent, true, deadlines).bucket("b");
    use qhost::payloads::PayloadStore as _;
    for (operation, error) in [
        (
            "PutObject",
            fails_in_time("put", limit, s3.put("k", b"payload")).await,
        ),
        (
            "GetObject",
            fails_in_time("get", limit, s3.get("k", 1024)).await,
        ),
        (
            "DeleteObject",
            fails_in_time("delete", limit, s3.delete("k")).await,
        ),
    ] {
        assert!(
            error.contains("no answer within the deadline"),
            "{operation}: {error}"
        );
    }
}

#[tokio::test]
async fn every_redis_store_call_ends_at_its_deadline_when_the_server_stops() {
    use qhost::stores::{
        Completion, FleetRate as _, IdempotencyStore as _, LeaseRequest, Released,
    };
    let redis = RedisServer::start();
    let mut target = qhost::stores::RedisTarget::single(redis.url());
    target.deadlines.response = Duration::from_millis(300);
    let store = qhost::stores::RedisStore::connect_to(&target)
        .await
        .expect("connect");
    let request = LeaseRequest {
        key: qhost::testing::scoped_key(&unique_namespace("deadline"), "p", "k"),
        ttl: Duration::from_secs(30),
        window: Duration::from_secs(60),
    };
    let lease = match only(store.acquire(std::slice::from_ref(&request)).await).expect("acquire") {
        qhost::stores::Acquired::Granted(lease) => lease,
        other => panic!("{other:?}"),
    };
    redis.pause();
    let limit = Duration::from_secs(10);
    let completion = Completion {
        lease: lease.clone(),
        outbox: Vec::new(),
        result: None,
        window: request.window,
        digest: None,
        state: Default::default(),
    };
    let rate = qhost::stores::Rate::parse("10/s").expect("a rate");
    let errors = [
        (
            "acquire",
            fails_in_time("acquire", limit, async {
                only(store.acquire(std::slice::from_ref(&request)).await)
            })
            .await,
        ),
        (
            "extend",
            fails_in_time("extend", limit, store.extend(&lease, request.ttl)).await,
        ),
        (
            "complete",
            fails_in_time("complete", limit, async {
                only(store.complete(std::slice::from_ref(&completion)).await)
            })
            .await,
        ),
        (
            "release",
            fails_in_time("release", limit, store.release(&lease, Released::NotRun)).await,
        ),
        (
            "outbox_sent",
            fails_in_time("outbox_sent", limit, store.outbox_sent(&request.key)).await,
        ),
        (
            "admit",
            fails_in_time("admit", limit, store.admit(&request.key, rate)).await,
        ),
        ("ping", fails_in_time("ping", limit, store.ping()).await),
    ];
    for (operation, error) in errors {
        assert!(
            error.contains("did not answer within the deadline"),
            "{operation}: {error}"
        );
    }
    redis.resume();
    store
        .ping()
        .await
        .expect("answers again once the server continues");

    let (addr, _server) = silent_server();
    let mut silent = qhost::stores::RedisTarget::single(format!("redis://{addr}/"));
    silent.deadlines.connect = Duration::from_millis(300);
    silent.deadlines.response = Duration::from_millis(300);
    let connecting = qhost::stores::RedisStore::connect_to(&silent);
    let e = fails_in_time("connect", limit, connecting).await;
    assert!(e.contains("cannot connect"), "{e}");
}

#[tokio::test]
async fn a_long_poll_waits_its_whole_wait_though_other_calls_have_a_shorter_deadline() {
    let name = unique("long-poll");
    qhost_e2e::sqs_server::create_queue(&name, &[]).await;
    let deadlines = qhost::sources::AwsDeadlines {
        connect: Duration::from_secs(2),
        call: Duration::from_millis(500),
        receive_margin: Duration::from_secs(2),
    };
    let sqs = SqsQueue::with_deadlines(&qhost_e2e::sqs_server::sdk_config(), deadlines);
    let started = Instant::now();
    let got = sqs
        .receive(&name, 10, Duration::from_secs(30), Duration::from_secs(2))
        .await
        .expect("an empty queue answers a long poll with nothing, not a timeout");
    assert!(got.is_empty());
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the server held the poll for its wait, past the 0.5 s call deadline: {:?}",
        started.elapsed()
    );
}
