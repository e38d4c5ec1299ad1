//! Handler state under the crash storm: two `qhost` processes on one queue of the
//! SQS-compatible server, producer duplicates, one host SIGKILLed and restarted twice mid-run;
//! on the tests' Redis, on the tests' PostgreSQL, and on a local Redis Cluster (three primaries, one replica each) whose
//! primary holding the counters' bucket is killed mid-run as well. Every job increments two
//! counters; each counter must end equal to the number of distinct jobs that incremented it,
//! exactly, whatever ran twice. Each job sleeps 300 ms first, so the kills find runs in
//! flight.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use qhost::sources::{QueueSource, SqsQueue};
use qhost::{Attribute, Outgoing};
use qhost_e2e::harness::{TestEnv, attr, counters_exact, take_all};
use qhost_e2e::postgres;
use qhost_e2e::processes::HostProcess;
use qhost_e2e::redis_cluster::RedisCluster;
use qhost_e2e::redis_server::{shared_url, unique_namespace};
use qhost_e2e::sqs_server::{
    create_queue, drain, endpoint, fleet_host_config, jobs_done, patient_queue, sdk_config, unique,
};

const JOBS: usize = 120;
/// The counters each job increments besides `total`: `d0` to `d3`, by job number.
const SPREAD: usize = 4;

/// Sends the jobs of `range` once, and every fifth job a second time (another message, the
/// same key).
async fn produce(sqs: &SqsQueue, jobs: &str, sink: &str, range: std::ops::Range<usize>) {
    let mut batch = Vec::new();
    for i in range {
        let body = format!(
            "sleep:300;kv-incr:counts:total;kv-incr:counts:d{};send-fence:{sink}",
            i % SPREAD
        );
        let msg =
            Outgoing::new(jobs, body).with_attribute(Attribute::string("job-id", format!("j-{i}")));
        if i % 5 == 0 {
            batch.push(msg.clone());
        }
        batch.push(msg);
    }
    for chunk in batch.chunks(10) {
        sqs.send(chunk).await.expect("send");
    }
}

/// The jobs whose effect reached the sink so far: what is there now, taken without waiting
/// for more.
async fn collect(sink: &str, done: &mut BTreeSet<String>) {
    let sqs = patient_queue(endpoint());
    for m in take_all(&sqs, sink, Duration::ZERO).await {
        done.insert(
            attr(&m, "qhost-idempotency-key")
                .expect("derived key")
                .to_string(),
        );
    }
}

/// What the storm may do besides killing hosts: on a cluster, kill a primary.
type Storm<'a> = Box<dyn FnMut() + 'a>;

/// Runs the jobs on two hosts with the store `idempotency`, killing host 0 twice mid-run and
/// calling `mid_run` at half; then checks every counter.
///
/// The jobs go out in three thirds: the first at the start, the second with the first kill
/// (once half the first third is done) and the last with the second kill (once half the second
/// is). So both kills happen before the run can end, however long the observer takes to see
/// progress on a loaded server, and each finds the jobs it was sent with still to run.
async fn storm(test: &str, idempotency: &str, mut mid_run: Storm<'_>) {
    let env = TestEnv::new();
    env.install(
        "counter",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n[capabilities]\nkeyvalue = [\"counts\"]\n",
    );
    let (jobs, sink) = (unique(test), unique(&format!("{test}-sink")));
    for q in [&jobs, &format!("{jobs}-dlq"), &sink] {
        create_queue(q, &[]).await;
    }
    let configs: Vec<PathBuf> = (0..2)
        .map(|i| {
            let name = format!("host-{i}");
            fleet_host_config(&env, &name, 4, idempotency, (&jobs, "counter"))
        })
        .collect();
    let mut hosts: Vec<HostProcess> = configs
        .iter()
        .map(|c| HostProcess::start_consuming(c))
        .collect();
    let sqs = SqsQueue::from_sdk_config(&sdk_config());
    let third = JOBS / 3;
    produce(&sqs, &jobs, &sink, 0..third).await;
    let mut done = BTreeSet::new();
    let (mut kills, mut stormed) = (0, false);
    let started = Instant::now();
    loop {
        collect(&sink, &mut done).await;
        if kills < 2 && done.len() >= third * kills + third / 2 {
            // Restarted without waiting for it: the other host goes on meanwhile.
            hosts.remove(0).kill();
            hosts.insert(0, HostProcess::start(&configs[0]));
            kills += 1;
            let next = third * kills..if kills == 2 {
                JOBS
            } else {
                third * (kills + 1)
            };
            produce(&sqs, &jobs, &sink, next).await;
        }
        if !stormed && done.len() >= JOBS / 2 {
            tokio::task::block_in_place(&mut mid_run);
            stormed = true;
        }
        if jobs_done(&sqs, &jobs, done.len(), JOBS, started).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for host in hosts {
        host.stop();
    }
    assert!(
        kills == 2 && stormed,
        "the storm happened mid-run: {kills} kills, stormed {stormed}"
    );
    assert!(
        drain(&format!("{jobs}-dlq")).await.is_empty(),
        "no dead letter"
    );
    counters_exact(&configs[0], JOBS, SPREAD).await;
    println!(
        "{test}: {JOBS} jobs on two hosts, host 0 killed twice, {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn counters_are_exact_through_killed_hosts_on_redis() {
    let redis = format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{}\"",
        shared_url(),
        unique_namespace("state-storm")
    );
    storm("state-storm", &redis, Box::new(|| {})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn counters_are_exact_through_killed_hosts_on_postgres() {
    let schema = postgres::unique_schema("state_storm");
    storm(
        "state-storm-pg",
        &postgres::store_table(&schema),
        Box::new(|| {}),
    )
    .await;
    postgres::drop_schemas(&[&schema]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn counters_are_exact_through_killed_hosts_and_a_killed_primary_on_a_cluster() {
    let mut cluster = RedisCluster::start(3);
    let ns = unique_namespace("state-fleet");
    let seeds: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let redis = format!(
        "[idempotency]\nkind = \"redis\"\ncluster = true\nurls = [{}]\nnamespace = \"{ns}\"",
        seeds.join(", ")
    );
    // The primary that holds the counters' bucket: its failover is the harder case.
    let bucket_slot = cluster.slot_of(&format!("{ns}:kv:{{counter/counts}}"));
    let victim = (cluster.primaries().into_iter())
        .find(|&p| (cluster.slots_of(p).iter()).any(|&(a, b)| (a..=b).contains(&bucket_slot)))
        .expect("a primary serves the bucket's slot");
    let kill = Box::new(|| cluster.kill_node(victim));
    storm("state-fleet", &redis, kill).await;
}
