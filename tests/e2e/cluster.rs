//! The Redis idempotency and payload stores on a real Redis Cluster (three primaries, one
//! replica each, started by the test): batches that span slots and shards, a host whose
//! duplicates meet on different shards, and payloads spread over every shard.

use std::time::Duration;

use qhost::payloads::RedisPayloads;
use qhost::payloads::{PayloadError, PayloadStore};
use qhost::stores::RedisStore;
use qhost::stores::{Acquired, Completion, IdempotencyStore, Lease, LeaseRequest};
use qhost_e2e::harness::{TestEnv, contents, queue_toml, run_until_idle, send_all};
use qhost_e2e::redis_cluster::RedisCluster;
use qhost_e2e::redis_server::unique_namespace;
use qhost_e2e::redis_tls::PASSWORD;

fn requests(ns: &str, n: usize) -> Vec<LeaseRequest> {
    (0..n)
        .map(|i| LeaseRequest {
            key: qhost::testing::scoped_key(ns, "p", &format!("job-{i}")),
            ttl: Duration::from_secs(30),
            window: Duration::from_secs(60),
        })
        .collect()
}

/// Leases every key of `batch` in one acquire, each of which must be granted.
async fn grant_all(store: &RedisStore, batch: &[LeaseRequest]) -> Vec<Lease> {
    (store.acquire(batch).await.expect("acquire"))
        .into_iter()
        .map(|a| match a {
            Ok(Acquired::Granted(lease)) => lease,
            other => panic!("expected a grant, got {other:?}"),
        })
        .collect()
}

/// Completes every lease in one call (no outbox, a minute's window), each of which must succeed.
async fn complete_all(store: &RedisStore, leases: Vec<Lease>) {
    let completions: Vec<Completion> = leases
        .into_iter()
        .map(|lease| Completion {
            lease,
            outbox: vec![],
            result: None,
            window: Duration::from_secs(60),
            digest: None,
            state: Default::default(),
        })
        .collect();
    let done = store.complete(&completions).await.expect("complete");
    assert!(done.iter().all(Result::is_ok), "{done:?}");
}

/// One acquire and one complete for 60 keys, which land on every shard: each key is granted,
/// completed and then seen as completed, and the keys are spread over all three primaries.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_across_slots_and_shards_is_acquired_and_completed() {
    let cluster = RedisCluster::start(3);
    let target = cluster.target();
    let store = RedisStore::connect_to(&target)
        .await
        .expect("cluster store");
    let ns = unique_namespace("cluster-batch");
    let batch = requests(&ns, 60);

    let leases = grant_all(&store, &batch).await;
    assert!(leases.iter().all(|l| l.fencing_token == 1));
    assert_eq!(
        store.round_trips(),
        3,
        "one pipeline per primary, whatever the slots"
    );

    complete_all(&store, leases).await;
    assert_eq!(store.round_trips(), 6);

    let again = store.acquire(&batch).await.expect("acquire again");
    assert_eq!(store.round_trips(), 9);
    assert!(
        again
            .iter()
            .all(|a| matches!(a, Ok(Acquired::Completed { .. }))),
        "{again:?}"
    );
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    for port in primaries {
        assert!(
            cluster.keys_on(port) > 0,
            "no key landed on the primary at {port}"
        );
    }
}

/// A slot that moves to another primary between a lease and its completion: the store's node
/// map is stale, the old primary answers `MOVED` for that slot's keys without running their
/// scripts, and those are sent again alone to the new one. Every key completes once, keeping
/// its token, and the next batch goes by the map read again.
#[tokio::test(flavor = "multi_thread")]
async fn a_slot_moved_between_lease_and_completion_still_completes() {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::connect_to(&cluster.target())
        .await
        .expect("cluster store");
    let ns = unique_namespace("cluster-moved");
    let batch = requests(&ns, 30);
    let leases = grant_all(&store, &batch).await;
    let moved_key = &batch[0].key;
    let slot = cluster.slot_of(moved_key);
    let sharing: usize = batch
        .iter()
        .filter(|r| cluster.slot_of(&r.key) == slot)
        .count();
    let owner = cluster
        .primaries()
        .into_iter()
        .find(|&p| {
            cluster
                .slots_of(p)
                .iter()
                .any(|&(a, b)| (a..=b).contains(&slot))
        })
        .expect("the slot's primary");
    let to = cluster
        .primaries()
        .into_iter()
        .find(|&p| p != owner)
        .expect("another primary");
    cluster.move_slot(slot, to);

    let before = store.round_trips();
    complete_all(&store, leases).await;
    assert_eq!(
        store.round_trips() - before,
        3 + sharing as u64,
        "one pipeline per primary, then each moved key alone"
    );
    let again = store.acquire(&batch).await.expect("acquire again");
    assert!(
        again
            .iter()
            .all(|a| matches!(a, Ok(Acquired::Completed { .. }))),
        "{again:?}"
    );
    assert!(
        cluster.memory_usage(moved_key).is_some(),
        "the moved key's record is kept"
    );
    assert!(
        cluster
            .slots_of(to)
            .iter()
            .any(|&(a, b)| (a..=b).contains(&slot))
    );
}

/// A host configured with `cluster = true` and seed URLs: 40 jobs each sent twice run once each,
/// and each job's effect arrives once; and the same with its data path on two lanes, each with
/// its own connection to the cluster.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_on_a_cluster_runs_each_job_once() {
    let cluster = RedisCluster::start(3);
    runs_each_job_once(&cluster, 1).await;
    runs_each_job_once(&cluster, 2).await;
}

/// The same over TLS with a password, as managed clusters require: every node (and the bus
/// between them) speaks only TLS with a certificate from the test's own CA. Without that CA,
/// or with a wrong password, the host refuses to start with an error that shows no password.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_on_a_tls_cluster_with_a_password_runs_each_job_once() {
    let cluster = RedisCluster::start_tls(3);
    let target = cluster.target();
    let ca = target.ca_file.clone().expect("the test CA");
    let seeds = |urls: &[String]| -> String {
        let quoted: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
        quoted.join(", ")
    };
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let wrong: Vec<String> = (cluster.urls().iter())
        .map(|u| u.replace(PASSWORD, "not-the-password"))
        .collect();
    for (urls, ca_line) in [
        (seeds(&cluster.urls()), String::new()),
        (seeds(&wrong), format!("ca-file = {ca:?}\n")),
    ] {
        let config = env.config(&format!(
            "[idempotency]\nkind = \"redis\"\ncluster = true\nurls = [{urls}]\n{ca_line}{}",
            queue_toml("jobs", "fixture")
        ));
        let err = format!("{:#}", qhost::Host::from_config(config).await.unwrap_err());
        assert!(
            err.contains("cannot connect to the Redis Cluster at rediss://127.0.0.1:"),
            "{err}"
        );
        assert!(
            !err.contains(PASSWORD) && !err.contains("not-the-password"),
            "{err}"
        );
    }
    runs_each_job_once(&cluster, 1).await;
}

/// A host configured with `cluster = true`, every node a seed (and the CA to trust, if any),
/// on `lanes` lanes: 40 jobs each sent twice run once each, and each job's effect arrives once.
async fn runs_each_job_once(cluster: &RedisCluster, lanes: usize) {
    let env = TestEnv::new();
    env.install(
        "fixture",
        "fixture",
        "[idempotency]\nkey = \"body-sha256\"\n",
    );
    let seeds: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let ca = (cluster.target().ca_file)
        .map(|ca| format!("ca-file = {ca:?}\n"))
        .unwrap_or_default();
    let mut config = env.config(&format!(
        "[idempotency]\nkind = \"redis\"\ncluster = true\nurls = [{}]\nnamespace = \"{}\"\n{ca}{}",
        seeds.join(", "),
        unique_namespace("cluster-host"),
        queue_toml("jobs", "fixture")
    ));
    config.lanes = lanes;
    let host = env.host(config).await;
    let bodies: Vec<String> = (0..40).map(|i| format!("send:out:job-{i}")).collect();
    let twice: Vec<&str> = bodies.iter().chain(&bodies).map(String::as_str).collect();
    send_all(&env.queue(), "jobs", &twice, &[]).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked, c.duplicates), (40, 40, 40), "{c:?}");
    let mut out: Vec<String> = contents(&env.queue(), "out")
        .await
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    out.sort();
    let mut expected: Vec<String> = (0..40).map(|i| format!("job-{i}")).collect();
    expected.sort();
    assert_eq!(out, expected, "each job's effect exactly once");
}

/// The Redis payload store on the cluster: payloads under keys that land on every shard are
/// stored, read back within their bound, refused past it, and deleted.
#[tokio::test(flavor = "multi_thread")]
async fn payloads_are_stored_and_bounded_across_shards() {
    let cluster = RedisCluster::start(3);
    let target = cluster.target();
    let ns = unique_namespace("cluster-payloads");
    let store = RedisPayloads::connect(&target, &ns, Duration::from_secs(60))
        .await
        .expect("cluster payload store");
    for i in 0..30 {
        let body = vec![b'x'; 1000 + i];
        store.put(&format!("p-{i}"), &body).await.expect("put");
        assert_eq!(store.get(&format!("p-{i}"), 4096).await.expect("get"), body);
    }
    assert!(matches!(
        store.get("p-0", 999).await,
        Err(PayloadError::Larger(..))
    ));
    store.delete("p-0").await.expect("delete");
    assert!(matches!(
        store.get("p-0", 4096).await,
        Err(PayloadError::Missing(_))
    ));
    for port in cluster.primaries() {
        assert!(
            cluster.keys_on(port) > 0,
            "no payload on the primary at {port}"
        );
    }
}

/// The store contract's conformance suite (the one the embedded store runs in its unit tests)
/// on a three-primary cluster: every case's keys in slots of their own, spread over the shards.
#[tokio::test(flavor = "multi_thread")]
async fn a_redis_cluster_store_conforms_to_the_store_contract() {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::connect_to(&cluster.target())
        .await
        .expect("cluster store");
    let ns = unique_namespace("cluster-conformance");
    qhost::testing::assert_store_conforms(std::sync::Arc::new(store), &ns).await;
}
