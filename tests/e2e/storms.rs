//! Duplicate and crash storms: two `qhost` processes with 8 workers each on one queue, one
//! Redis, and a second stage fed by the first stage's outbox.
//!
//! Invocations are counted where they cannot be double-counted: each grant of a lease bumps
//! the key's fencing counter in Redis, and a handler runs only under a grant, so a counter of 1
//! means the handler ran exactly once for that key.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qhost::sources::LocalQueue;
use qhost::sources::QueueSource;
use qhost::{Attribute, Outgoing};
use qhost_e2e::harness::{TestEnv, attr, contents};
use qhost_e2e::processes::{HostProcess, kill_repeatedly, summary_column};
use qhost_e2e::redis_server::{records, shared_url, unique_namespace};

const JOBS: usize = 2000;

fn queue(name: &str, plugin: &str) -> String {
    format!(
        "[[queue]]\nname = \"{name}\"\nplugin = \"{plugin}\"\nwait-time-secs = 1\nvisibility-timeout-secs = 2\npollers = 2\n"
    )
}

/// Writes a configuration file for one host process consuming `queues`.
fn config_file(env: &TestEnv, ns: &str, file: &str, queues: &[(&str, &str)]) -> PathBuf {
    let mut text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\nmax-in-flight = 8\nshutdown-grace-secs = 10\n\
         [idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{ns}\"\n\
         [retry]\nbase-secs = 0.01\nmax-secs = 1\n\
         [source]\nqueues = [\"stage2\", \"sink\"]   # another host's queue; the effects\n",
        env.plugins_dir(),
        env.data_dir(),
        shared_url()
    );
    for (name, plugin) in queues {
        text.push_str(&queue(name, plugin));
    }
    let path = env.plugins_dir().parent().expect("temp dir").join(file);
    std::fs::write(&path, text).expect("config file");
    path
}

/// Stage 1 keyed by the job id attribute, stage 2 by the derived key on outbox messages.
fn install_stages(env: &TestEnv) {
    env.install(
        "stage1",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n",
    );
    env.install("stage2", "fixture", "");
}

/// Sends the jobs: 30% as two copies under one message id (SQS redelivery), 10% twice with the
/// same job id (a producer retry), the rest once. Returns the number of deliveries queued.
async fn produce(q: &LocalQueue, stage1_body: &str) -> usize {
    let mut deliveries = 0;
    for i in 0..JOBS {
        let msg = Outgoing::new("jobs", stage1_body)
            .with_attribute(Attribute::string("job-id", format!("j-{i}")));
        let (copies, sends) = match i % 10 {
            0..=2 => (2, 1),
            3 => (1, 2),
            _ => (1, 1),
        };
        for _ in 0..sends {
            q.send_copies(std::slice::from_ref(&msg), copies)
                .await
                .expect("send");
            deliveries += copies;
        }
    }
    deliveries
}

async fn wait_until_drained(q: &LocalQueue, limit: Duration) {
    let started = Instant::now();
    loop {
        let jobs = q.depth("jobs").await.expect("depth").total();
        let stage2 = q.depth("stage2").await.expect("depth").total();
        if jobs + stage2 == 0 {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "not drained in {limit:?}: {jobs} jobs, {stage2} stage2 left"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn job_keys() -> Vec<String> {
    (0..JOBS).map(|i| format!("j-{i}")).collect()
}

fn stage2_keys() -> Vec<String> {
    (0..JOBS).map(|i| format!("stage1:j-{i}/0")).collect()
}

/// Distinct derived keys on the sink, and the number of messages there.
async fn sink(q: &LocalQueue) -> (usize, usize) {
    let all = contents(q, "sink").await;
    let mut keys: Vec<_> = all
        .iter()
        .filter_map(|m| attr(m, "qhost-idempotency-key"))
        .collect();
    keys.sort();
    keys.dedup();
    (keys.len(), all.len())
}

async fn dead_letters_are_empty(q: &LocalQueue) {
    assert!(contents(q, "jobs-dlq").await.is_empty());
    assert!(contents(q, "stage2-dlq").await.is_empty());
}

fn count(
    records: &[(Option<String>, Option<u64>)],
    pred: impl Fn(&(Option<String>, Option<u64>)) -> bool,
) -> usize {
    records.iter().filter(|r| pred(r)).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn duplicate_storm_runs_each_key_once_across_two_hosts() {
    let env = TestEnv::new();
    install_stages(&env);
    let ns = unique_namespace("dupstorm");
    let both = [("jobs", "stage1"), ("stage2", "stage2")];
    let (a_cfg, b_cfg) = (
        config_file(&env, &ns, "a.toml", &both),
        config_file(&env, &ns, "b.toml", &both),
    );
    let q = env.queue();
    let deliveries = produce(&q, "send:stage2:send:sink:done").await;

    let started = Instant::now();
    let (a, b) = (HostProcess::start(&a_cfg), HostProcess::start(&b_cfg));
    wait_until_drained(&q, Duration::from_secs(240)).await;
    let elapsed = started.elapsed();
    let summaries = [a.stop(), b.stop()];

    let stage1 = records(&ns, "stage1", &job_keys()).await;
    let stage2 = records(&ns, "stage2", &stage2_keys()).await;
    let column = |queue: &str, c: &str| {
        summaries
            .iter()
            .map(|s| summary_column(s, queue, c))
            .sum::<u64>()
    };
    println!(
        "duplicate storm: {JOBS} jobs, {deliveries} deliveries, {:.1}s; stage 1: received {}, ran {}, duplicates {}, busy {}; \
         stage 2: received {}, ran {}, duplicates {}",
        elapsed.as_secs_f64(),
        column("jobs", "received"),
        column("jobs", "ran"),
        column("jobs", "duplicate"),
        column("jobs", "busy"),
        column("stage2", "received"),
        column("stage2", "ran"),
        column("stage2", "duplicate"),
    );
    assert_eq!(
        count(&stage1, |r| *r == (Some("completed".into()), Some(1))),
        JOBS,
        "stage 1 ran once per job"
    );
    assert_eq!(
        count(&stage2, |r| *r == (Some("completed".into()), Some(1))),
        JOBS,
        "stage 2 ran once per job"
    );
    assert_eq!(column("jobs", "ran"), JOBS as u64);
    assert_eq!(
        column("jobs", "duplicate"),
        (deliveries - JOBS) as u64,
        "every extra delivery was suppressed"
    );
    assert_eq!(column("stage2", "ran"), JOBS as u64);
    assert_eq!(sink(&q).await, (JOBS, JOBS), "one final effect per job");
    dead_letters_are_empty(&q).await;
}

/// SIGKILLs the host `kills` times (see [`kill_repeatedly`]), then leaves one running for
/// `busy` and stops it cleanly.
fn restart_loop(config: &Path, kills: usize, busy: Duration) -> usize {
    let killed = kill_repeatedly(config, kills, busy);
    let host = HostProcess::start_consuming(config);
    std::thread::sleep(busy);
    host.stop();
    killed
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_storm_loses_no_key_and_the_second_stage_runs_once_per_key() {
    let env = TestEnv::new();
    install_stages(&env);
    let ns = unique_namespace("crashstorm");
    // A handles stage 1 only and is killed again and again; B handles both stages throughout.
    let a_cfg = config_file(&env, &ns, "a.toml", &[("jobs", "stage1")]);
    let b_cfg = config_file(
        &env,
        &ns,
        "b.toml",
        &[("jobs", "stage1"), ("stage2", "stage2")],
    );
    let q = env.queue();
    // 20 ms per job keeps both hosts busy for several seconds, so every kill lands mid-stream.
    let deliveries = produce(&q, "sleep:20;send:stage2:send:sink:done").await;

    let b = HostProcess::start(&b_cfg);
    let killer = std::thread::spawn(move || restart_loop(&a_cfg, 5, Duration::from_millis(300)));
    let killed = tokio::task::spawn_blocking(move || killer.join().expect("killer thread"))
        .await
        .expect("join");
    wait_until_drained(&q, Duration::from_secs(240)).await;
    let b_summary = b.stop();

    let stage1 = records(&ns, "stage1", &job_keys()).await;
    let stage2 = records(&ns, "stage2", &stage2_keys()).await;
    let rerun = count(&stage1, |r| r.1.unwrap_or(0) > 1);
    println!(
        "crash storm: {JOBS} jobs, {deliveries} deliveries, host A SIGKILLed {killed} times; \
         stage-1 keys re-leased after a kill: {rerun}; stage-2 copies dropped as duplicates: {}",
        summary_column(&b_summary, "stage2", "duplicate")
    );
    assert_eq!(killed, 5);
    assert!(
        rerun > 0,
        "the kills interrupted handlers mid-run (else this test proves nothing)"
    );
    assert_eq!(
        count(&stage1, |r| r.0.as_deref() == Some("completed")),
        JOBS,
        "every job has its completed record"
    );
    assert_eq!(
        count(&stage2, |r| *r == (Some("completed".into()), Some(1))),
        JOBS,
        "stage 2 ran exactly once per job"
    );
    assert_eq!(sink(&q).await, (JOBS, JOBS), "one final effect per job");
    dead_letters_are_empty(&q).await;
}
