//! Batch handlers end to end: the `order-tally` example (Rust, `handle-batch`) built from
//! source, on the SQS-compatible server and Redis. Many orders per call, each leased, decided
//! and committed on its own: its tally in state, its outbox message, its fate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qhost::sources::{QueueSource, SqsQueue};
use qhost::{Host, Outgoing};
use qhost_e2e::harness::{Running, TestEnv, attr, eventually, run_until_idle, take_all};
use qhost_e2e::processes::HostProcess;
use qhost_e2e::redis_server::{shared_url, unique_namespace};
use qhost_e2e::sqs_server::{
    create_queue, drain, endpoint, fleet_host_config, jobs_done, patient_queue, sdk_config, unique,
};

fn sqs() -> SqsQueue {
    SqsQueue::from_sdk_config(&sdk_config())
}

/// The `[idempotency]` section of a Redis store with its own namespace.
fn redis(test: &str) -> String {
    format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{}\"\n",
        shared_url(),
        unique_namespace(test)
    )
}

/// Installs order-tally, keyed by `order-id`, sending to `sink`, gathering up to `max` per
/// call, giving up after `attempts`.
fn install(env: &TestEnv, sink: &str, max: u32, attempts: u32) {
    env.install(
        "order-tally",
        "order-tally",
        &format!(
            "[idempotency]\nkey = \"json:/order-id\"\n[limits]\nmax-attempts = {attempts}\n\
             [batch]\nmax-messages = {max}\nmax-wait-ms = 50\n\
             [capabilities]\nkeyvalue = [\"tally\"]\n[outbox]\nqueues = [\"{sink}\"]\n\
             [config]\ntallied-queue = \"{sink}\"\n"
        ),
    );
}

/// Creates `jobs`, its dead-letter queue and `sink` (FIFO names get FIFO queues).
async fn queues(test: &str) -> (String, String, String) {
    let jobs = unique(test);
    let dlq = format!("{jobs}-dlq");
    let sink = unique(&format!("{test}-tallied"));
    for q in [&jobs, &dlq, &sink] {
        create_queue(q, &[]).await;
    }
    (jobs, dlq, sink)
}

/// A host on the SQS-compatible server and `idempotency`, consuming `jobs` with order-tally
/// (`pollers` receives at once).
async fn host(
    env: &TestEnv,
    idempotency: &str,
    (jobs, plugin, pollers): (&str, &str, u32),
    in_flight: usize,
) -> Host {
    let mut config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n{idempotency}\
         [[queue]]\nname = \"{jobs}\"\nplugin = \"{plugin}\"\nwait-time-secs = 1\nvisibility-timeout-secs = 10\npollers = {pollers}\n",
        endpoint()
    ));
    config.max_in_flight = in_flight;
    Host::with_source(config, Arc::new(sqs()))
        .await
        .expect("host starts")
}

fn order(id: &str, extra: &str) -> String {
    format!(
        r#"{{"order-id":"{id}","customer":"c-{}","cents":100{extra}}}"#,
        id.len() % 3
    )
}

async fn send(jobs: &str, bodies: &[String]) {
    let msgs: Vec<Outgoing> = bodies
        .iter()
        .map(|b| Outgoing::new(jobs, b.as_str()))
        .collect();
    for chunk in msgs.chunks(10) {
        sqs().send(chunk).await.expect("send");
    }
}

/// The committed `orders` counter of order-tally's `tally` bucket.
async fn tallied(config: &qhost::Config, key: &str) -> Option<String> {
    let value = qhost::kv_get(config, "order-tally", "tally", key)
        .await
        .expect("the store");
    value.map(|v| String::from_utf8_lossy(&v).into_owned())
}

/// The calls' sizes from the `qhost_batch_messages` histogram: (bucket bound, calls up to it),
/// the number of calls and the messages they held.
fn batch_histogram(metrics: &str) -> (Vec<(String, u64)>, u64, u64) {
    let value = |line: &str| line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
    let mut buckets = Vec::new();
    let (mut count, mut sum) = (0, 0);
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("qhost_batch_messages"))
    {
        let v = value(line).unwrap_or(0.0) as u64;
        if let Some(le) = line.split("le=\"").nth(1).and_then(|r| r.split('"').next()) {
            buckets.push((le.to_string(), v));
        } else if line.starts_with("qhost_batch_messages_count") {
            count = v;
        } else if line.starts_with("qhost_batch_messages_sum") {
            sum = v;
        }
    }
    (buckets, count, sum)
}

/// Each key of the sink's messages and how many carried it.
fn sink_keys(msgs: &[qhost::Received]) -> BTreeMap<String, usize> {
    let mut keys = BTreeMap::new();
    for m in msgs {
        let key = attr(m, "qhost-idempotency-key")
            .expect("a derived key")
            .to_string();
        *keys.entry(key).or_insert(0) += 1;
    }
    keys
}

/// Where the orders queue is: the SQS-compatible server, or the embedded queue.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Queues {
    Sqs,
    Embedded,
}

/// `orders` orders, every tenth sent twice, through order-tally gathering up to 50 per call
/// on Redis: each order tallied and announced once, and more than one message per call.
async fn orders_with_duplicates(test: &str, orders: usize, queues_at: Queues) {
    let env = TestEnv::new();
    let store = redis(test);
    let (host, source, (jobs, dlq, sink)): (Host, Arc<dyn QueueSource>, _) = match queues_at {
        Queues::Sqs => {
            let names = queues(test).await;
            install(&env, &names.2, 50, 3);
            let host = host(&env, &store, (&names.0, "order-tally", 4), 100).await;
            (host, Arc::new(sqs()), names)
        }
        Queues::Embedded => {
            let jobs = unique(test);
            let names = (
                jobs.clone(),
                format!("{jobs}-dlq"),
                format!("{jobs}-tallied"),
            );
            install(&env, &names.2, 50, 3);
            let mut config = env.config(&format!(
                "{store}[[queue]]\nname = \"{jobs}\"\nplugin = \"order-tally\"\nwait-time-secs = 1\n"
            ));
            config.max_in_flight = 100;
            (env.host(config).await, Arc::new(env.queue()), names)
        }
    };
    let mut bodies: Vec<String> = (0..orders).map(|i| order(&format!("o-{i}"), "")).collect();
    // Every tenth order is sent twice: another message, the same key.
    let copies: Vec<String> = bodies.iter().step_by(10).cloned().collect();
    bodies.extend(copies);
    let started = Instant::now();
    // Sent while the host runs, as producers do: the SQS-compatible server's receive slows
    // with the depth of the queue, so a queue filled first would measure the server.
    let running = Running::start(host);
    let msgs: Vec<Outgoing> = bodies
        .iter()
        .map(|b| Outgoing::new(&jobs, b.as_str()))
        .collect();
    for chunk in msgs.chunks(10) {
        source.send(chunk).await.expect("send");
    }
    let all_done = async || {
        let c = running.host().stats().total();
        let left = source.depth(&jobs).await.expect("depth").total();
        c.acked == orders as u64 && left == 0
    };
    eventually(
        Duration::from_secs(240),
        "every order tallied, every copy finished",
        all_done,
    )
    .await;
    let host = running.stop().await;

    let c = host.stats().total();
    let n = orders as u64;
    assert_eq!((c.acked, c.dead_lettered, c.invoked), (n, 0, n), "{c:?}");
    assert_eq!(c.received, c.acked + c.duplicates + c.busy, "{c:?}");
    let config = env.config(&store);
    assert_eq!(
        tallied(&config, "orders").await,
        Some(orders.to_string()),
        "each key once"
    );
    let sent = sink_keys(&take_all(&*source, &sink, Duration::ZERO).await);
    assert_eq!(sent.len(), orders, "one tallied message per order");
    assert!(sent.values().all(|&n| n == 1), "each sent once");
    assert!(take_all(&*source, &dlq, Duration::ZERO).await.is_empty());
    let (buckets, calls, messages) = batch_histogram(&host.metrics().encode());
    println!(
        "{test}: {} messages ({orders} orders) in {calls} calls, {:.1} per call, {:.1}s; calls of at most N messages: {buckets:?}",
        bodies.len(),
        messages as f64 / calls as f64,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(messages, n, "every run was in a batch call");
    assert!(
        messages > calls,
        "more than one message per call on average: {calls} calls"
    );
}

/// On the SQS-compatible server (2,000 orders: about 15 s here, now that
/// `tests/support/moto_server.py` keeps moto's receive and send from counting the whole queue
/// per message) and on the embedded queue.
#[tokio::test(flavor = "multi_thread")]
async fn orders_with_duplicates_on_sqs_are_tallied_once_each_many_per_call() {
    orders_with_duplicates("batch-orders-sqs", 2000, Queues::Sqs).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_thousand_orders_with_duplicates_are_tallied_once_each_many_per_call() {
    orders_with_duplicates("batch-orders", 2000, Queues::Embedded).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_one_call_a_retry_and_a_reject_leave_the_others_acked_and_committed() {
    let env = TestEnv::new();
    let (jobs, dlq, sink) = queues("batch-mixed").await;
    install(&env, &sink, 10, 3);
    let store = redis("batch-mixed");
    let host = host(&env, &store, (&jobs, "order-tally", 1), 20).await;
    let bodies: Vec<String> = (0..10)
        .map(|i| match i {
            3 => order("o-3", r#","fail":"retry""#),
            7 => order("o-7", r#","fail":"reject""#),
            _ => order(&format!("o-{i}"), ""),
        })
        .collect();
    send(&jobs, &bodies).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!((c.acked, c.retried, c.dead_lettered), (9, 1, 1), "{c:?}");
    assert_eq!(c.received, 11, "only the retried one came back: {c:?}");
    let config = env.config(&store);
    assert_eq!(tallied(&config, "orders").await, Some("9".into()));
    let sent = sink_keys(&take_all(&sqs(), &sink, Duration::ZERO).await);
    let expected: BTreeSet<String> = (0..10)
        .filter(|&i| i != 7)
        .map(|i| format!("order-tally:o-{i}/0"))
        .collect();
    assert_eq!(sent.keys().cloned().collect::<BTreeSet<_>>(), expected);
    let dead = drain(&dlq).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        attr(&dead[0], "qhost-dead-letter-reason"),
        Some("order o-7 refused")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_order_reaches_the_dead_letter_queue_alone() {
    let env = TestEnv::new();
    let (jobs, dlq, sink) = queues("batch-poison").await;
    install(&env, &sink, 10, 3);
    let store = redis("batch-poison");
    let host = host(&env, &store, (&jobs, "order-tally", 1), 20).await;
    let bodies: Vec<String> = (0..10)
        .map(|i| match i {
            5 => order("o-5", r#","fail":"panic""#),
            _ => order(&format!("o-{i}"), ""),
        })
        .collect();
    send(&jobs, &bodies).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!((c.acked, c.dead_lettered), (9, 1), "{c:?}");
    // The nine ran at most twice each (with the poison, then alone); the poison three times.
    assert!(c.received <= 9 * 2 + 3, "{c:?}");
    let dead = drain(&dlq).await;
    assert_eq!(dead.len(), 1);
    assert!(String::from_utf8_lossy(&dead[0].body).contains("o-5"));
    let reason = attr(&dead[0], "qhost-dead-letter-reason").unwrap_or_default();
    assert!(reason.contains("order o-5 cannot be tallied"), "{reason}");
    let config = env.config(&store);
    assert_eq!(tallied(&config, "orders").await, Some("9".into()));
    let (buckets, calls, messages) = batch_histogram(&host.metrics().encode());
    println!("batch-poison: {messages} messages in {calls} calls: {buckets:?}");
}

/// Six FIFO groups of 30 orders, one order per group asking for a retry on its first
/// delivery: every group's orders committed in turn (order-tally checks each against the
/// group's next number in state), each once, no attempt used but the retries.
async fn fifo_groups(test: &str, queues_at: Queues) {
    const GROUPS: usize = 6;
    const PER_GROUP: usize = 30;
    let env = TestEnv::new();
    let jobs = unique(test) + ".fifo";
    let dlq = jobs.replace(".fifo", "-dlq.fifo");
    let sink = unique(&format!("{test}-tallied"));
    install(&env, &sink, 10, 3);
    let store = redis(test);
    let (host, source): (Host, Arc<dyn QueueSource>) = match queues_at {
        Queues::Sqs => {
            for q in [&jobs, &dlq, &sink] {
                create_queue(q, &[]).await;
            }
            let host = host(&env, &store, (&jobs, "order-tally", 1), 30).await;
            (host, Arc::new(sqs()))
        }
        Queues::Embedded => {
            let mut config = env.config(&format!(
                "{store}[[queue]]\nname = \"{jobs}\"\nplugin = \"order-tally\"\nwait-time-secs = 1\n"
            ));
            config.max_in_flight = 30;
            (env.host(config).await, Arc::new(env.queue()))
        }
    };
    let mut msgs = Vec::new();
    for seq in 0..PER_GROUP {
        for g in 0..GROUPS {
            let fail = if seq == 5 + g {
                r#","fail":"retry""#
            } else {
                ""
            };
            let extra = format!(r#","group":"g{g}","seq":{seq}{fail}"#);
            let mut m = Outgoing::new(&jobs, order(&format!("g{g}-{seq}"), &extra));
            m.group_id = Some(format!("g{g}"));
            m.dedup_id = Some(format!("g{g}-{seq}"));
            msgs.push(m);
        }
    }
    for chunk in msgs.chunks(10) {
        source.send(chunk).await.expect("send");
    }

    run_until_idle(&host).await;

    let c = host.stats().total();
    let all = (GROUPS * PER_GROUP) as u64;
    let dead: Vec<String> = (take_all(&*source, &dlq, Duration::ZERO).await.iter())
        .map(|m| {
            format!(
                "{}: {:?}",
                String::from_utf8_lossy(&m.body),
                attr(m, "qhost-dead-letter-reason")
            )
        })
        .collect();
    assert_eq!((c.acked, c.dead_lettered), (all, 0), "{c:?} {dead:#?}");
    assert_eq!(
        c.retried, GROUPS as u64,
        "one retry per group, no attempt for the rest: {c:?}"
    );
    let config = env.config(&store);
    for g in 0..GROUPS {
        let next = tallied(&config, &format!("next/g{g}")).await;
        assert_eq!(
            next,
            Some(PER_GROUP.to_string()),
            "group g{g} ran each order once, in turn"
        );
    }
    assert_eq!(tallied(&config, "orders").await, Some(all.to_string()));
    let (buckets, calls, messages) = batch_histogram(&host.metrics().encode());
    println!("{test}: {messages} runs in {calls} calls: {buckets:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fifo_groups_run_in_order_once_each_through_retries() {
    fifo_groups("batch-fifo", Queues::Embedded).await;
}

/// The same on the SQS-compatible server. It needs the tests' moto launcher
/// (`tests/support/moto_server.py`): moto's own receive decides a FIFO queue's group locks once
/// per long poll, and handed out a group's later messages while an earlier one waited.
#[tokio::test(flavor = "multi_thread")]
async fn fifo_groups_on_sqs_run_in_order_once_each_through_retries() {
    fifo_groups("batch-fifo-sqs", Queues::Sqs).await;
}

/// Two `qhost` processes, host 0 SIGKILLed and restarted twice mid-run, orders sent twice in
/// part: the tally equals the distinct orders, and nothing is dead-lettered.
#[tokio::test(flavor = "multi_thread")]
async fn the_tally_is_exact_through_killed_hosts() {
    const ORDERS: usize = 300;
    let env = TestEnv::new();
    let (jobs, dlq, sink) = queues("batch-storm").await;
    install(&env, &sink, 20, 5);
    let store = redis("batch-storm");
    let configs: Vec<PathBuf> = (0..2)
        .map(|i| {
            fleet_host_config(
                &env,
                &format!("host-{i}"),
                40,
                &store,
                (&jobs, "order-tally"),
            )
        })
        .collect();
    let mut hosts: Vec<HostProcess> = configs
        .iter()
        .map(|c| HostProcess::start_consuming(c))
        .collect();
    let sqs = sqs();
    let third = ORDERS / 3;
    let produce = async |range: std::ops::Range<usize>| {
        let mut bodies = Vec::new();
        for i in range {
            let body = order(&format!("o-{i}"), r#","sleep-ms":200"#);
            if i % 5 == 0 {
                bodies.push(body.clone());
            }
            bodies.push(body);
        }
        send(&jobs, &bodies).await;
    };
    produce(0..third).await;
    let mut done = BTreeSet::new();
    let mut kills = 0;
    let started = Instant::now();
    loop {
        for m in take_all(&patient_queue(endpoint()), &sink, Duration::ZERO).await {
            done.insert(
                attr(&m, "qhost-idempotency-key")
                    .expect("a key")
                    .to_string(),
            );
        }
        if kills < 2 && done.len() >= third * kills + third / 2 {
            hosts.remove(0).kill();
            hosts.insert(0, HostProcess::start(&configs[0]));
            kills += 1;
            let end = if kills == 2 {
                ORDERS
            } else {
                third * (kills + 1)
            };
            produce(third * kills..end).await;
        }
        if jobs_done(&sqs, &jobs, done.len(), ORDERS, started).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for host in hosts {
        host.stop();
    }
    assert_eq!(kills, 2, "both kills happened mid-run");
    assert!(drain(&dlq).await.is_empty(), "no dead letter");
    let config =
        qhost::Config::load(Some(&configs[0]), qhost::Overrides::default()).expect("config");
    assert_eq!(
        tallied(&config, "orders").await,
        Some(ORDERS.to_string()),
        "each order counted once"
    );
    println!(
        "batch-storm: {ORDERS} orders on two hosts, host 0 killed twice, {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// A Python or JavaScript batch plugin (order-tally-py, order-tally-js, built from source) on
/// the SQS-compatible server and Redis: orders many per call, one rejected, one raising in a
/// call of its own; each of the others tallied and announced once.
async fn guest_orders(plugin: &str, raise: &str) {
    let env = TestEnv::with_shared_cache();
    let (jobs, dlq, sink) = queues(&format!("batch-{plugin}")).await;
    let manifest = qhost_e2e::guest_manifest(plugin).replace("\"tallied\"", &format!("{sink:?}"));
    env.install_bytes(plugin, &qhost_e2e::guest_bytes(plugin), &manifest);
    let store = redis(plugin);
    let host = host(&env, &store, (&jobs, plugin, 1), 20).await;
    let bodies: Vec<String> = (0..12)
        .map(|i| match i {
            4 => order("o-4", r#","fail":"reject""#),
            9 => order("o-9", &format!(r#","fail":"{raise}""#)),
            _ => order(&format!("o-{i}"), ""),
        })
        .collect();
    send(&jobs, &bodies).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!((c.acked, c.dead_lettered), (10, 2), "{c:?}");
    let config = env.config(&store);
    let value = qhost::kv_get(&config, plugin, "tally", "orders")
        .await
        .expect("the store");
    assert_eq!(value.as_deref(), Some(&b"10"[..]));
    let sent = sink_keys(&take_all(&sqs(), &sink, Duration::ZERO).await);
    assert_eq!(sent.len(), 10);
    assert!(sent.values().all(|&n| n == 1), "each sent once");
    let mut reasons: Vec<String> = (drain(&dlq).await.iter())
        .filter_map(|m| attr(m, "qhost-dead-letter-reason").map(str::to_string))
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].contains("o-9 cannot be tallied"), "{reasons:?}");
    assert_eq!(reasons[1], "order o-4 refused");
    let (buckets, calls, messages) = batch_histogram(&host.metrics().encode());
    println!("batch-{plugin}: {messages} runs in {calls} calls: {buckets:?}");
    assert!(
        messages > calls,
        "more than one message per call on average"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_batch_plugin_tallies_orders_once_each() {
    guest_orders("order-tally-py", "raise").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_batch_plugin_tallies_orders_once_each() {
    guest_orders("order-tally-js", "throw").await;
}
