//! NATS JetStream as the source: `qhost run` processes consuming a stream through a durable
//! pull consumer, jobs published by NATS's own Python client (with copies), hosts SIGKILLed
//! mid-run. Every job's effect reaches the sink stream once (the host's lease runs a job once;
//! the stream drops a re-sent outbox message by its `Nats-Msg-Id`), nothing is dead-lettered,
//! nothing is left pending on the consumer, and every state counter is exact.

use std::path::{Path, PathBuf};
use std::time::Duration;

use qhost_e2e::harness::{TestEnv, counters_exact};
use qhost_e2e::nats::{Streams, source_table, unique, url};
use qhost_e2e::processes::HostProcess;
use qhost_e2e::redis_server::{shared_url, unique_namespace};
use qhost_e2e::storm::Storm;

const JOBS: usize = 3_000;
const KILLS: usize = 5;

/// Host `name` consuming stream `jobs` with the Redis store in namespace `ns`.
fn host_config(env: &TestEnv, name: &str, jobs: &str, ns: &str) -> PathBuf {
    let text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\nmax-in-flight = 8\nshutdown-grace-secs = 5\n\
         {}[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{ns}\"\n\
         [retry]\nbase-secs = 0.05\nmax-secs = 1\n\
         [[queue]]\nname = \"{jobs}\"\nplugin = \"counter\"\nwait-time-secs = 1\n\
         visibility-timeout-secs = 3\n",
        env.plugins_dir(),
        env.data_dir().join(name),
        source_table(),
        shared_url(),
    );
    let path = (env.plugins_dir().parent())
        .expect("the test directory")
        .join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("config file");
    path
}

/// Publishes jobs `range` to `subject` with nats-py: how many messages went.
fn produce(subject: &str, sink: &str, range: std::ops::Range<usize>) -> usize {
    let (start, end) = (range.start.to_string(), range.end.to_string());
    let args = [
        "tests/support/nats_producer.py",
        &url(),
        subject,
        sink,
        &start,
        &end,
    ];
    let out = qhost_e2e::python(&args);
    String::from_utf8_lossy(&out)
        .trim()
        .parse()
        .expect("the count sent")
}

/// The jobs whose effect reached the sink.
async fn done(sink: &str) -> usize {
    Streams::messages(sink).await as usize
}

fn start(config: &Path) -> HostProcess {
    HostProcess::start_consuming(config)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_storm_on_jetstream_runs_each_job_once() {
    let (jobs, sink) = (unique("jobs"), unique("sink"));
    let dlq = format!("{jobs}-dlq");
    let _streams = Streams::new(&[&jobs, &dlq, &sink]);
    let env = TestEnv::new();
    env.install(
        "counter",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n[capabilities]\nkeyvalue = [\"counts\"]\n",
    );
    let ns = unique_namespace("nats-storm");
    let configs: Vec<PathBuf> = (0..2)
        .map(|i| host_config(&env, &format!("host-{i}"), &jobs, &ns))
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
        let (waiting, held) = Streams::pending(&jobs, "qhost").await;
        let all = done(&sink).await >= JOBS && waiting == 0 && held == 0;
        (!all).then(|| format!("{waiting} waiting and {held} held"))
    };
    let took = storm
        .run(&mut hosts, async || done(&sink).await, left, |k| {
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
    assert_eq!(done(&sink).await, JOBS, "one effect per job");
    assert_eq!(Streams::messages(&dlq).await, 0, "no dead letter");
    assert_eq!(Streams::messages(&jobs).await, 0, "the work queue is empty");
    counters_exact(&configs[0], JOBS, 4).await;
    println!(
        "nats: {JOBS} jobs ({sent} messages) on two hosts, {KILLS} kills, {:.1}s",
        took.as_secs_f64()
    );
}
