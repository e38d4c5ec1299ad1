//! NATS JetStream as the source: `qhost run` processes consuming a stream through a durable
//! pull consumer, jobs published by NATS's own Python client (with copies), hosts SIGKILLed
//! mid-run. Every job's effect reaches the sink stream once (the host's lease runs a job once;
//! the stream drops a re-sent outbox message by its `Nats-Msg-Id`), nothing is dead-lettered,
//! nothing is left pending on the consumer, and every state counter is exact.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qhost_e2e::harness::{TestEnv, counters_exact};
use qhost_e2e::nats::{NatsServer, Streams, unique, url};
use qhost_e2e::processes::HostProcess;
use qhost_e2e::redis_server::{shared_url, unique_namespace};
use qhost_e2e::storm::Storm;

const JOBS: usize = 3_000;
const KILLS: usize = 5;

/// Host `name` consuming stream `jobs` on the server at `url` with the Redis store in
/// namespace `ns`.
fn host_config(env: &TestEnv, name: &str, url: &str, jobs: &str, ns: &str) -> PathBuf {
    let text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\nmax-in-flight = 8\nshutdown-grace-secs = 5\n\
         [source]\nkind = \"nats\"\nurl = \"{url}\"\n[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{ns}\"\n\
         [retry]\nbase-secs = 0.05\nmax-secs = 1\n\
         [[queue]]\nname = \"{jobs}\"\nplugin = \"counter\"\nwait-time-secs = 1\n\
         visibility-timeout-secs = 3\n",
        env.plugins_dir(),
        env.data_dir().join(name),
        shared_url(),
    );
    let path = (env.plugins_dir().parent())
        .expect("the test directory")
        .join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("config file");
    path
}

/// Publishes jobs `range` to `subject` on the machine's server with nats-py: how many
/// messages went.
fn produce(subject: &str, sink: &str, range: std::ops::Range<usize>) -> usize {
    produce_to(&url(), subject, sink, range, None)
}

/// As [`produce`], to the server at `url`, each job running `extra` first.
fn produce_to(
    url: &str,
    subject: &str,
    sink: &str,
    range: std::ops::Range<usize>,
    extra: Option<&str>,
) -> usize {
    let (start, end) = (range.start.to_string(), range.end.to_string());
    let mut args = vec![
        "tests/support/nats_producer.py",
        url,
        subject,
        sink,
        &start,
        &end,
    ];
    args.extend(extra);
    let out = qhost_e2e::python(&args);
    String::from_utf8_lossy(&out)
        .trim()
        .parse()
        .expect("the count sent")
}

fn start(config: &Path) -> HostProcess {
    HostProcess::start_consuming(config)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_storm_on_jetstream_runs_each_job_once() {
    let (jobs, sink) = (unique("jobs"), unique("sink"));
    let dlq = format!("{jobs}-dlq");
    let streams = Streams::new(&[&jobs, &dlq, &sink]);
    let done = async || streams.messages(&sink).await as usize;
    let env = TestEnv::new();
    env.install(
        "counter",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n[capabilities]\nkeyvalue = [\"counts\"]\n",
    );
    let ns = unique_namespace("nats-storm");
    let configs: Vec<PathBuf> = (0..2)
        .map(|i| host_config(&env, &format!("host-{i}"), &url(), &jobs, &ns))
        .collect();
    let mut hosts: Vec<HostProcess> = configs.iter().map(|c| start(c)).collect();
    let third = JOBS / 3;
    let mut sent = produce(&jobs, &sink, 0..third);
    let storm = Storm {
        configs: &configs,
        jobs: JOBS,
        kills: KILLS,
        limit: Duration::from_secs(300),
    };
    let left = async || {
        let (waiting, held) = streams.pending(&jobs, "qhost").await;
        let all = done().await >= JOBS && waiting == 0 && held == 0;
        (!all).then(|| format!("{waiting} waiting and {held} held"))
    };
    let took = storm
        .run(&mut hosts, done, left, |k| {
            if k < 2 {
                let next = third * (k + 1)..if k == 1 { JOBS } else { third * 2 };
                sent += produce(&jobs, &sink, next);
            }
        })
        .await;
    for host in hosts {
        host.stop();
    }
    assert_eq!(sent, JOBS + JOBS / 10, "with a copy of every tenth job");
    assert_eq!(
        streams.messages(&sink).await as usize,
        JOBS,
        "one effect per job"
    );
    assert_eq!(streams.messages(&dlq).await, 0, "no dead letter");
    assert_eq!(streams.messages(&jobs).await, 0, "the work queue is empty");
    counters_exact(&configs[0], JOBS, 4).await;
    println!(
        "nats: {JOBS} jobs ({sent} messages) on two hosts, {KILLS} kills, {:.1}s",
        took.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_frozen_then_killed_and_restarted_mid_run_loses_nothing_and_runs_nothing_twice() {
    const JOBS: usize = 1_000;
    let mut server = NatsServer::start();
    let (jobs, sink) = (unique("jobs"), unique("sink"));
    let streams = Streams::on(&server.url(), &[]);
    let env = TestEnv::new();
    env.install(
        "counter",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n[capabilities]\nkeyvalue = [\"counts\"]\n",
    );
    let ns = unique_namespace("nats-loss");
    let config = host_config(&env, "host", &server.url(), &jobs, &ns);
    let host = start(&config);
    let sent = produce_to(&server.url(), &jobs, &sink, 0..JOBS, Some("sleep:40"));
    let done = async || streams.messages(&sink).await as usize;
    let started = Instant::now();
    let until = async |n: usize| {
        while done().await < n {
            assert!(
                started.elapsed() < Duration::from_secs(240),
                "{} of {n} done",
                done().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    // Frozen for 10 s: its connections open and silent, as a partitioned server's.
    until(JOBS / 3).await;
    server.pause();
    tokio::time::sleep(Duration::from_secs(10)).await;
    server.resume();
    // Killed and started again on its store: the host reconnects.
    until(2 * JOBS / 3).await;
    server.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart();
    loop {
        let (waiting, held) = streams.pending(&jobs, "qhost").await;
        if done().await >= JOBS && waiting == 0 && held == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "{} of {JOBS} done, {waiting} waiting, {held} held",
            done().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, log) = host.stop_with_log();
    assert_eq!(sent, JOBS + JOBS / 10);
    assert_eq!(done().await, JOBS, "one effect per job:\n{log}");
    assert_eq!(
        streams.messages(&format!("{jobs}-dlq")).await,
        0,
        "no dead letter"
    );
    counters_exact(&config, JOBS, 4).await;
    println!(
        "nats, server frozen 10 s then killed: {JOBS} jobs once in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_waits_its_delay_a_reject_is_dead_lettered_with_why_and_a_long_run_is_kept() {
    let (jobs, sink) = (unique("basics"), unique("basics_sink"));
    let (dlq, sink_dlq) = (format!("{jobs}-dlq"), format!("{sink}-dlq"));
    let streams = Streams::new(&[&jobs, &dlq, &sink, &sink_dlq]);
    let env = TestEnv::new();
    env.install(
        "counter",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n",
    );
    let ns = unique_namespace("nats-basics");
    // Held for 2 s (the consumer's ack_wait): a run of 5 s outlives it twice over. Retries
    // wait 2 s.
    let config = host_config(&env, "host", &url(), &jobs, &ns);
    let text = std::fs::read_to_string(&config).expect("config");
    let text = (text.replace("visibility-timeout-secs = 3", "visibility-timeout-secs = 2"))
        .replace(
            "base-secs = 0.05\nmax-secs = 1",
            "base-secs = 2\nmax-secs = 2",
        );
    std::fs::write(&config, text).expect("config");
    let host = start(&config);
    let sender = qhost::sources::NatsQueue::connect(qhost::sources::NatsSettings::new(&url()))
        .await
        .expect("NATS");
    sender.prepare(&sink, &sink_dlq).await.expect("the sink");
    let job = |id: &str, command: String| {
        qhost::Outgoing::new(&jobs, id)
            .with_attribute(qhost::Attribute::string("job-id", id))
            .with_attribute(qhost::Attribute::string("command", command))
    };
    let sent = std::time::Instant::now();
    use qhost::sources::QueueSource as _;
    sender
        .send(&[
            job("retried", format!("flaky:2;send-fence:{sink}")),
            job("rejected", "reject:no such customer".into()),
            job("long", format!("sleep:5000;send-fence:{sink}")),
        ])
        .await
        .expect("send");
    let started = Instant::now();
    while streams.messages(&sink).await < 2 || streams.messages(&dlq).await < 1 {
        assert!(started.elapsed() < Duration::from_secs(60), "not done");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = sent.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, queues) = qhost_e2e::admin::get(host.admin_addr(), "/api/queues");
    let queues: serde_json::Value = serde_json::from_str(&queues).expect("JSON");
    let received = queues[0]["totals"]["received"].as_u64();
    let (_, log) = host.stop_with_log();
    // Each ran to its end once: the long run under its first lease (token 1), the retried one
    // under its second (token 2).
    let mut tokens: Vec<Vec<u8>> = (streams.read(&sink).await.into_iter())
        .map(|(body, _)| body)
        .collect();
    tokens.sort();
    assert_eq!(tokens, [b"1".to_vec(), b"2".to_vec()], "{log}");
    let dead = streams.read(&dlq).await;
    assert_eq!(dead.len(), 1);
    let (body, headers) = &dead[0];
    assert_eq!(body, b"rejected");
    let reason = headers
        .iter()
        .find(|(k, _)| k == "qhost-dead-letter-reason");
    assert_eq!(
        reason.map(|(_, v)| v.as_str()),
        Some("no such customer"),
        "{headers:?}"
    );
    // The retry came after its 2 s delay, and the long run was kept, not delivered again:
    // four deliveries, the retried message's two and one each of the others.
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert_eq!(received, Some(4), "{log}");
}
