//! A fleet: four `qhost` processes on one queue of the SQS-compatible server, their leases and
//! records on a real Redis Cluster (three primaries, one replica each). Producer duplicates
//! and redeliveries, one host SIGKILLed and restarted mid-run, one primary killed mid-run.
//!
//! Redis replicates asynchronously, so a lease or completion written to the killed primary
//! just before it died may be lost with it, and that job may run again. What the fleet must
//! still show: every job's effect reaches the sink under its one derived key, nothing is lost,
//! nothing is left on the queue, and every job's record on the cluster is completed, except
//! records in the killed primary's slots that it had not yet replicated (those are counted).
//! Each effect carries the fencing token of the run that made it, and each kept record's token
//! is consistent with the runs seen: it is the token of a run whose effect arrived, and no
//! effect carries a higher one.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use qhost::sources::QueueSource;
use qhost::sources::SqsQueue;
use qhost::{Attribute, Outgoing};
use qhost_e2e::harness::{TestEnv, attr};
use qhost_e2e::processes::HostProcess;
use qhost_e2e::redis_cluster::RedisCluster;
use qhost_e2e::redis_server::{record_cmd, state_word, unique_namespace};
use qhost_e2e::sqs_server::{
    create_queue, drain, fleet_host_config, jobs_done, sdk_config, unique,
};

const JOBS: usize = 120;

/// Sends every job once, and every fifth job a second time (a producer retry: another message,
/// the same job id).
async fn produce(sqs: &SqsQueue, jobs: &str, sink: &str) {
    let mut batch = Vec::new();
    for i in 0..JOBS {
        let msg = Outgoing::new(jobs, format!("send-fence:{sink}"))
            .with_attribute(Attribute::string("job-id", format!("j-{i}")));
        if i % 5 == 0 {
            batch.push(msg.clone());
        }
        batch.push(msg);
    }
    for chunk in batch.chunks(10) {
        sqs.send(chunk).await.expect("send");
    }
}

/// Effects on the sink so far, as (derived key, the fencing token of the run that made it); the
/// sink is drained as it goes.
async fn collect(sink: &str, seen: &mut Vec<(String, u64)>) {
    for m in drain(sink).await {
        let key = attr(&m, "qhost-idempotency-key").expect("derived key");
        let token = String::from_utf8_lossy(&m.body)
            .parse()
            .expect("a fencing token");
        seen.push((key.to_string(), token));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_on_a_cluster_survives_a_killed_host_and_a_killed_primary() {
    let mut cluster = RedisCluster::start(3);
    let env = TestEnv::new();
    env.install(
        "fixture",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n",
    );
    let (jobs, sink) = (unique("fleet"), unique("fleet-sink"));
    create_queue(&jobs, &[]).await;
    create_queue(&format!("{jobs}-dlq"), &[]).await;
    create_queue(&sink, &[]).await;
    let ns = unique_namespace("fleet");
    let seeds = cluster.urls();
    let urls: Vec<String> = seeds.iter().map(|u| format!("{u:?}")).collect();
    let redis = format!(
        "[idempotency]\nkind = \"redis\"\ncluster = true\nurls = [{}]\nnamespace = \"{ns}\"",
        urls.join(", ")
    );
    let configs: Vec<PathBuf> = (0..4)
        .map(|i| {
            let name = format!("host-{i}");
            fleet_host_config(&env, &name, 8, &redis, (&jobs, "fixture"))
        })
        .collect();
    let sqs = SqsQueue::from_sdk_config(&sdk_config());
    produce(&sqs, &jobs, &sink).await;

    let mut hosts: Vec<Option<HostProcess>> = configs
        .iter()
        .map(|c| Some(HostProcess::start_consuming(c)))
        .collect();
    let mut seen = Vec::new();
    let (mut host_killed, mut primary_killed) = (false, false);
    let mut victim_slots = Vec::new();
    let started = Instant::now();
    loop {
        collect(&sink, &mut seen).await;
        let distinct: BTreeSet<&String> = seen.iter().map(|(key, _)| key).collect();
        if !host_killed && distinct.len() >= JOBS / 4 {
            hosts[0].take().expect("host 0").kill();
            hosts[0] = Some(HostProcess::start_consuming(&configs[0]));
            host_killed = true;
        }
        if !primary_killed && distinct.len() >= JOBS / 2 {
            let victim = cluster.primaries()[0];
            victim_slots = cluster.slots_of(victim);
            assert!(!victim_slots.is_empty(), "a primary serves slots");
            tokio::task::block_in_place(|| cluster.kill_node(victim));
            primary_killed = true;
        }
        if jobs_done(&sqs, &jobs, distinct.len(), JOBS, started).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for host in hosts.iter_mut().filter_map(Option::take) {
        host.stop();
    }
    collect(&sink, &mut seen).await;

    assert!(
        host_killed && primary_killed,
        "both failures happened mid-run"
    );
    let distinct: BTreeSet<String> = seen.iter().map(|(key, _)| key.clone()).collect();
    let expected: BTreeSet<String> = (0..JOBS).map(|i| format!("fixture:j-{i}/0")).collect();
    assert_eq!(distinct, expected, "every job's effect, under its one key");
    assert!(
        drain(&format!("{jobs}-dlq")).await.is_empty(),
        "no dead letter"
    );
    assert_eq!(sqs.depth(&jobs).await.expect("depth").total(), 0);
    println!(
        "fleet: {JOBS} jobs, {} effects delivered ({} repeats of a key), {:.1}s",
        seen.len(),
        seen.len() - JOBS,
        started.elapsed().as_secs_f64()
    );

    let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("cluster client");
    let mut conn = client
        .get_async_connection()
        .await
        .expect("cluster connection");
    let mut lost_with_the_primary = 0;
    for i in 0..JOBS {
        let key = qhost::testing::scoped_key(&ns, "fixture", &format!("j-{i}"));
        let (state, fence): (Option<String>, Option<u64>) = record_cmd(&key)
            .query_async(&mut conn)
            .await
            .expect("a record");
        if state.is_none() {
            let slot = cluster.slot_of(&key);
            assert!(
                victim_slots.iter().any(|&(a, b)| (a..=b).contains(&slot)),
                "{key} (slot {slot}) has no record, and its slot was not the killed primary's \
                 ({victim_slots:?})"
            );
            lost_with_the_primary += 1;
            continue;
        }
        assert_eq!(
            state.as_deref().map(state_word).as_deref(),
            Some("completed"),
            "{key}"
        );
        let fence = fence.expect("a completed record keeps its token");
        let derived = format!("fixture:j-{i}/0");
        let tokens: BTreeSet<u64> = (seen.iter())
            .filter(|(k, _)| *k == derived)
            .map(|(_, t)| *t)
            .collect();
        assert!(
            tokens.contains(&fence) && tokens.iter().all(|&t| (1..=fence).contains(&t)),
            "{key}: record token {fence}, effects carried {tokens:?}"
        );
    }
    println!(
        "fleet: {lost_with_the_primary} completed records lost with the killed primary \
         (not yet replicated)"
    );
}
