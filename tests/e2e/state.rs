//! Handler state (`wasi:keyvalue`), committed with the run that wrote it: on the embedded store,
//! the tests' Redis and a local Redis Cluster, with the fixture plugin built from source.
//! Counters equal the number of distinct keys that incremented them, whatever ran twice; a run
//! that traps, retries, rejects or loses its lease commits nothing; a bucket not granted is
//! refused, buckets of two plugins are disjoint, bounds are refused with the guest's error; and
//! "read, decide, write" on one key by two messages at once decides once.

use std::sync::Arc;

use qhost::plugins::Registry;
use qhost::stores::RedisStore;
use qhost::{Attribute, Config, Host};
use qhost_e2e::harness::{
    TestEnv, attr, body_texts, contents, lapsing_queue_toml, queue_toml, run_until_idle, send_all,
};
use qhost_e2e::redis_cluster::RedisCluster;
use qhost_e2e::redis_server::{shared_url, unique_namespace};
use qhost_e2e::{guest_bytes, guest_manifest};

/// The counter plugin: the fixture, keyed by the `job-id` attribute, granted `counts`.
const COUNTER: &str = "[idempotency]\nkey = \"attribute:job-id\"\n\
    [limits]\nmax-attempts = 2\n[capabilities]\nkeyvalue = [\"counts\"]\n";

const JOBS: usize = 30;

/// The `[idempotency]` section for the tests' Redis, in a namespace of this test's own.
fn on_redis(test: &str) -> String {
    format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{}\"",
        shared_url(),
        unique_namespace(test)
    )
}

async fn value(config: &Config, plugin: &str, bucket: &str, key: &str) -> Option<String> {
    (qhost::kv_get(config, plugin, bucket, key).await)
        .expect("the store answers")
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

/// Sends each job with its `job-id`; every third counting job twice (a producer retry:
/// another message, the same key).
async fn send_jobs(env: &TestEnv, jobs: &[(String, String)]) {
    for (i, (id, body)) in jobs.iter().enumerate() {
        let copies = if i < JOBS && i % 3 == 0 { 2 } else { 1 };
        for _ in 0..copies {
            let job = [Attribute::string("job-id", id.clone())];
            send_all(&env.queue(), "jobs", &[body.as_str()], &job).await;
        }
    }
}

/// Runs the counter's jobs on the store `idempotency` (an `[idempotency]` section) and checks
/// what each kind of run left in the bucket.
async fn counts_once_per_key(idempotency: &str) {
    let env = TestEnv::new();
    env.install("counter", "fixture", COUNTER);
    let config = env.config(&format!("{idempotency}\n{}", queue_toml("jobs", "counter")));
    let mut jobs: Vec<(String, String)> = (0..JOBS)
        .map(|i| {
            let body = format!("kv-incr:counts:total;kv-incr:counts:j{}", i % 3);
            (format!("j-{i}"), body)
        })
        .collect();
    jobs.push(("trap".into(), "kv-incr:counts:trapped;trap".into()));
    jobs.push(("flaky".into(), "kv-incr:counts:flaky;flaky:2".into()));
    jobs.push(("reject".into(), "kv-incr:counts:rejected;reject:no".into()));
    jobs.push((
        "big".into(),
        "kv-set:counts:big:x;kv-big:counts:70000".into(),
    ));
    send_jobs(&env, &jobs).await;
    let host = env.host(config.clone()).await;
    run_until_idle(&host).await;

    let get = async |key: &str| value(&config, "counter", "counts", key).await;
    assert_eq!(get("total").await.as_deref(), Some("30"), "one per job");
    for k in ["j0", "j1", "j2"] {
        assert_eq!(get(k).await.as_deref(), Some("10"), "{k}");
    }
    assert_eq!(
        get("trapped").await,
        None,
        "a run that trapped commits nothing"
    );
    assert_eq!(
        get("rejected").await,
        None,
        "a rejected run commits nothing"
    );
    assert_eq!(
        get("flaky").await.as_deref(),
        Some("1"),
        "a run that asked for a retry committed nothing; the one that acked, once"
    );
    assert_eq!(get("big").await, None, "a run refused a write commits none");
    let keys = (qhost::kv_list(&config, "counter", "counts").await).expect("the keys");
    assert_eq!(keys, ["flaky", "j0", "j1", "j2", "total"]);

    let dead = contents(&env.queue(), "jobs-dlq").await;
    let reasons: Vec<&str> = (dead.iter())
        .filter_map(|m| attr(m, "qhost-dead-letter-reason"))
        .collect();
    assert_eq!(dead.len(), 3, "trap, reject and big: {reasons:?}");
    assert!(
        (reasons.iter()).any(|r| r.contains("over this plugin's limits.kv-value-bytes (65536)")),
        "{reasons:?}"
    );
    let metrics = host.metrics().encode();
    for line in [
        "qhost_kv_writes_committed_total{plugin=\"counter\"",
        "qhost_kv_writes_dropped_total{plugin=\"counter\"",
        "reason=\"failed\"",
        "reason=\"retry\"",
        "reason=\"reject\"",
        "qhost_kv_refused_total{plugin=\"counter\"",
        "reason=\"value-bytes\"",
        "qhost_kv_reads_total{plugin=\"counter\"",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
    // 30 jobs of two increments and the flaky job's one.
    let committed = (metrics.lines())
        .find(|l| l.starts_with("qhost_kv_writes_committed_total{plugin=\"counter\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok());
    assert_eq!(committed, Some(61), "{metrics}");
}

#[tokio::test(flavor = "multi_thread")]
async fn state_counts_once_per_key_on_the_embedded_store() {
    counts_once_per_key("").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn state_counts_once_per_key_on_redis() {
    counts_once_per_key(&on_redis("state")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn state_counts_once_per_key_on_a_redis_cluster() {
    let cluster = RedisCluster::without_replicas(3);
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let redis = format!(
        "[idempotency]\nkind = \"redis\"\ncluster = true\nurls = [{}]\nnamespace = \"{}\"",
        urls.join(", "),
        unique_namespace("state-cluster")
    );
    counts_once_per_key(&redis).await;
}

/// A run that outlives its lease (no heartbeat, a one-second visibility) is redelivered and
/// run again under a new lease; the first one's completion, and its increment, are dropped.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_lease_was_taken_over_commits_no_state() {
    let env = TestEnv::new();
    env.install(
        "counter",
        "fixture",
        "[capabilities]\nkeyvalue = [\"counts\"]\n",
    );
    let ns = unique_namespace("state-lapse");
    let queue = lapsing_queue_toml("jobs", "counter");
    let config = env.config(&format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{ns}\"\n{queue}",
        shared_url()
    ));
    // Assembled from parts: the host refuses a plugin that may outlive its visibility with no
    // heartbeat, and the lapse is what is under test.
    let loaded = qhost::load_plugins(&config).await.unwrap();
    let registry = Registry::new(loaded.get("counter").map(|p| (*p).clone()));
    let store = RedisStore::connect(&shared_url()).await.unwrap();
    let host = Host::new(
        config.clone(),
        Arc::new(env.queue()),
        Arc::new(store),
        registry,
    );
    send_all(
        &env.queue(),
        "jobs",
        &["kv-incr:counts:runs;slow-first:2500"],
        &[],
    )
    .await;
    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked, c.lost_leases), (2, 1, 1), "{c:?}");
    assert_eq!(
        value(&config, "counter", "counts", "runs").await.as_deref(),
        Some("1"),
        "two runs, one completion, one increment"
    );
    let fenced = body_texts(&contents(&env.queue(), "fenced").await);
    assert_eq!(fenced, ["2"], "the second lease's run completed");
    let metrics = host.metrics().encode();
    assert!(
        metrics.contains("reason=\"lease-lost\""),
        "the dropped increment is counted:\n{metrics}"
    );
}

/// Grants and bounds, on the embedded store: `a` is granted `counts` with small bounds, `b`
/// is granted its own `counts`; each refusal is the error the guest saw (the fixture rejects
/// with it), and a refused run commits none of its writes.
#[tokio::test(flavor = "multi_thread")]
async fn buckets_are_granted_scoped_and_bounded() {
    let env = TestEnv::new();
    env.install(
        "a",
        "fixture",
        "[limits]\nkv-value-bytes = 16\nkv-keys-per-run = 3\nkv-key-bytes = 8\n\
         [capabilities]\nkeyvalue = [\"counts\"]\n",
    );
    env.install("b", "fixture", "[capabilities]\nkeyvalue = [\"counts\"]\n");
    env.install("none", "fixture", "");
    let config = env.config(&format!(
        "{}{}{}",
        queue_toml("qa", "a"),
        queue_toml("qb", "b"),
        queue_toml("qn", "none")
    ));
    let host = env.host(config.clone()).await;
    let q = env.queue();
    send_all(
        &q,
        "qa",
        &["kv-incr:counts:x", "kv-set:counts:ok:0123456789abcdef"],
        &[],
    )
    .await;
    run_until_idle(&host).await;
    let refused = [
        (
            "kv-incr:other:x",
            "bucket `other` is not granted (the manifest's [capabilities] keyvalue must name it)",
        ),
        (
            "kv-big:counts:17",
            "a value of 17 bytes is over this plugin's limits.kv-value-bytes (16)",
        ),
        (
            "kv-many:counts:4",
            "this run has written 3 keys, this plugin's limits.kv-keys-per-run",
        ),
        (
            "kv-set:counts:123456789:v",
            "a key of 9 bytes is over this plugin's limits.kv-key-bytes (8)",
        ),
    ];
    for (body, _) in &refused {
        send_all(&q, "qa", &[body], &[]).await;
    }
    send_all(&q, "qn", &["kv-incr:counts:x"], &[]).await;
    send_all(
        &q,
        "qb",
        &["kv-send:counts:x:seen-by-b;kv-incr:counts:y"],
        &[],
    )
    .await;
    run_until_idle(&host).await;

    let reasons: Vec<String> = (contents(&q, "qa-dlq").await.iter())
        .filter_map(|m| attr(m, "qhost-dead-letter-reason").map(str::to_string))
        .collect();
    for (body, error) in &refused {
        assert!(
            reasons.iter().any(|r| r == &format!("kv: {error}")),
            "{body}: no `kv: {error}` among {reasons:?}"
        );
    }
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    let denied = contents(&q, "qn-dlq").await;
    assert_eq!(
        denied
            .first()
            .and_then(|m| attr(m, "qhost-dead-letter-reason")),
        Some(
            "kv: bucket `counts` is not granted (the manifest's [capabilities] keyvalue must name it)"
        ),
        "a plugin granted nothing gets nothing"
    );
    let get = async |plugin: &str, key: &str| value(&config, plugin, "counts", key).await;
    assert_eq!(get("a", "x").await.as_deref(), Some("1"));
    assert_eq!(get("a", "ok").await.as_deref(), Some("0123456789abcdef"));
    assert_eq!(
        get("a", "k0").await,
        None,
        "the refused run's first writes were dropped"
    );
    assert_eq!(get("b", "x").await, None, "b's counts is not a's");
    assert_eq!(get("b", "y").await.as_deref(), Some("1"));
    assert_eq!(get("a", "y").await, None);
    assert_eq!(
        body_texts(&contents(&q, "seen-by-b").await),
        ["-"],
        "b reads its own bucket"
    );
    let metrics = host.metrics().encode();
    for reason in ["not-granted", "value-bytes", "keys-per-run", "key-bytes"] {
        let counted = (metrics.lines()).any(|l| {
            l.starts_with("qhost_kv_refused_total{plugin=\"a\"")
                && l.contains(&format!("reason=\"{reason}\"}} 1"))
        });
        assert!(counted, "{reason} refused once:\n{metrics}");
    }
}

/// Two messages with different keys read the same state key, both find it absent, both write
/// it and send: the first to commit wins, the second's commit meets the changed key, runs
/// again, finds it set and sends nothing. Every customer is sent one message.
async fn decides_once(idempotency: &str) {
    let env = TestEnv::new();
    env.install("once", "fixture", "[capabilities]\nkeyvalue = [\"seen\"]\n");
    let config = env.config(&format!("{idempotency}\n{}", queue_toml("jobs", "once")));
    let host = env.host(config.clone()).await;
    let bodies: Vec<String> = (0..8)
        .flat_map(|c| {
            let body = format!("kv-once:seen:cust-{c}/2026-12:out:reminder {c}");
            [body.clone(), body.clone(), body]
        })
        .collect();
    let bodies: Vec<&str> = bodies.iter().map(String::as_str).collect();
    send_all(&env.queue(), "jobs", &bodies, &[]).await;
    run_until_idle(&host).await;

    let mut sent = body_texts(&contents(&env.queue(), "out").await);
    sent.sort();
    let expected: Vec<String> = (0..8).map(|c| format!("reminder {c}")).collect();
    assert_eq!(sent, expected, "one per customer-month");
    let c = host.stats().total();
    assert_eq!(c.acked, 24, "{c:?}");
    assert!(
        c.busy > 0,
        "copies ran at once, and the later commits met the change: {c:?}"
    );
    assert!(contents(&env.queue(), "jobs-dlq").await.is_empty());
    println!("decides once: {c:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn read_decide_write_decides_once_on_the_embedded_store() {
    decides_once("").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn read_decide_write_decides_once_on_redis() {
    decides_once(&on_redis("state-once")).await;
}

/// An email-reminder example, as `bytes` under its own `manifest`: two reminders for one
/// address and month under two reminder ids (the producer bug the key cannot catch), delivered
/// at once, send one email; another address gets its own.
async fn one_email_per_address_and_month(bytes: &[u8], manifest: &str) {
    let env = TestEnv::with_shared_cache();
    assert!(manifest.contains("keyvalue = [{ bucket = \"reminded\""));
    env.install_bytes("email-reminder", bytes, manifest);
    let config = env.config(&format!(
        "{}\n{}",
        on_redis("state-reminder"),
        queue_toml("reminders", "email-reminder")
    ));
    let reminder = |id: &str, email: &str| {
        format!(r#"{{"reminder-id":"{id}","email":"{email}","customer":"C","month":"2026-12"}}"#)
    };
    let bodies = [
        reminder("dec-ann-1", "ann@example.com"),
        reminder("dec-ann-2", "ann@example.com"),
        reminder("dec-ann-3", "Ann@example.com"),
        reminder("dec-bob", "bob@example.com"),
    ];
    let bodies: Vec<&str> = bodies.iter().map(String::as_str).collect();
    send_all(&env.queue(), "reminders", &bodies, &[]).await;
    let host = env.host(config.clone()).await;
    run_until_idle(&host).await;

    let sent = contents(&env.queue(), "sent-emails").await;
    let mut to: Vec<String> = (sent.iter())
        .filter_map(|m| attr(m, "to").map(str::to_lowercase))
        .collect();
    to.sort();
    assert_eq!(to, ["ann@example.com", "bob@example.com"], "one email each");
    let by = value(
        &config,
        "email-reminder",
        "reminded",
        "ann@example.com/2026-12",
    )
    .await;
    assert!(
        by.as_deref().is_some_and(|id| id.starts_with("dec-ann-")),
        "the reminder that sent it is recorded: {by:?}"
    );
    assert_eq!(host.stats().total().acked, 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rust_reminder_sends_one_email_per_address_and_month() {
    let manifest =
        std::fs::read_to_string(qhost_e2e::workspace().join("plugins/email-reminder/qhost.toml"))
            .expect("the example's manifest");
    one_email_per_address_and_month(&qhost_e2e::plugin_bytes("email-reminder"), &manifest).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_reminder_sends_one_email_per_address_and_month() {
    let lang = "email-reminder-py";
    one_email_per_address_and_month(&guest_bytes(lang), &guest_manifest(lang)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_javascript_reminder_sends_one_email_per_address_and_month() {
    let lang = "email-reminder-js";
    one_email_per_address_and_month(&guest_bytes(lang), &guest_manifest(lang)).await;
}

/// A bucket granted with `ttl-secs` forgets a key that long after its last write: on the
/// embedded store and on Redis, read as `qhost kv` reads it.
async fn forgets_after_its_ttl(idempotency: &str) {
    let env = TestEnv::new();
    env.install(
        "short",
        "fixture",
        "[capabilities]\nkeyvalue = [{ bucket = \"recent\", ttl-secs = 1 }, \"kept\"]\n",
    );
    let config = env.config(&format!("{idempotency}\n{}", queue_toml("jobs", "short")));
    let host = env.host(config.clone()).await;
    let body = "kv-set:recent:a:1;kv-set:kept:a:1";
    send_all(&env.queue(), "jobs", &[body], &[]).await;
    run_until_idle(&host).await;
    let get = async |bucket: &str| value(&config, "short", bucket, "a").await;
    assert_eq!(get("recent").await.as_deref(), Some("1"));
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    assert_eq!(
        get("recent").await,
        None,
        "forgotten a second after its write"
    );
    assert_eq!(
        get("kept").await.as_deref(),
        Some("1"),
        "a bucket without a ttl keeps it"
    );
    let listed = (qhost::kv_list(&config, "short", "recent").await).expect("the keys");
    assert!(listed.is_empty(), "{listed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bucket_with_a_ttl_forgets_keys_on_the_embedded_store() {
    forgets_after_its_ttl("").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bucket_with_a_ttl_forgets_keys_on_redis() {
    forgets_after_its_ttl(&on_redis("state-ttl")).await;
}
