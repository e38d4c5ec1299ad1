//! Canary rollout on a real host process, the embedded queue and the tests' Redis: a version
//! that traps on a third of bodies is rolled back by the failure-share rule with nothing lost,
//! dead-lettered or retried; an operator's `plugins promote` from another process moves the
//! host. "v1" is the fixture; "v2" the same build with a custom section, under a manifest
//! whose `trap-some` setting makes `if-config:trap-some:trap` bodies trap on it alone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qhost_e2e::admin::wait_for;
use qhost_e2e::deploy;
use qhost_e2e::processes::{HostProcess, run_in, summary_column};
use qhost_e2e::redis_server::{shared_url, unique_namespace};

/// A directory with v1 serving as `worker` on queue `jobs`, Redis for leases and rollouts,
/// and canaries at 20% under `rules`; the configuration's path.
fn setup(dir: &Path, test: &str, rules: &str) -> PathBuf {
    let redis = format!("url = \"{}\"", shared_url());
    setup_on(dir, test, rules, &redis)
}

/// `dir` with v1 installed as `worker` and `config` as its `qhost.toml`; the file's path.
fn with_v1(dir: &Path, config: &str) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins/");
    std::fs::write(
        plugins.join("worker.wasm"),
        qhost_e2e::plugin_bytes("fixture"),
    )
    .expect("v1");
    let file = dir.join("qhost.toml");
    std::fs::write(&file, config).expect("qhost.toml");
    file
}

/// As [`setup`], on the Redis that `redis` (lines of `[idempotency]`) names.
fn setup_on(dir: &Path, test: &str, rules: &str, redis: &str) -> PathBuf {
    with_v1(
        dir,
        &format!(
            "[idempotency]\nkind = \"redis\"\n{redis}\nnamespace = \"{}\"\n\
             [retry]\nbase-secs = 0.01\nmax-secs = 0.05\n\
             [source]\nqueues = [\"sink\"]   # the effects, read by the test alone\n\
             [rollout]\nmode = \"canary\"\npercent = 20\n{rules}\n\
             [[queue]]\nname = \"jobs\"\nplugin = \"worker\"\nwait-time-secs = 1\n",
            unique_namespace(test)
        ),
    )
}

/// Drops v2 with `manifest` as a deploy does: manifest first, then the file by rename.
fn drop_v2(dir: &Path, manifest: &str) {
    let plugins = dir.join("plugins");
    let v2 = deploy::build_variant(&qhost_e2e::plugin_bytes("fixture"), "v2");
    std::fs::write(plugins.join("worker.toml"), manifest).expect("v2's manifest");
    std::fs::write(plugins.join(".worker.tmp"), v2).expect("v2");
    std::fs::rename(plugins.join(".worker.tmp"), plugins.join("worker.wasm")).expect("rename");
}

/// A host on `config`, once its plugin watcher's start-up sync has read the directory: v2 is
/// dropped only then, because a sync that ran between v2's manifest and its file would
/// reload v1 under v2's manifest.
fn start_settled(config: &Path) -> HostProcess {
    let watch = [("QHOST_LOG", "info,qhost::plugin::watch=debug")];
    let host = HostProcess::start_consuming_in(config, &[], &watch);
    wait_for_log(&host, Duration::from_secs(20), "plugins directory synced");
    host
}

fn wait_for_log(host: &HostProcess, limit: Duration, what: &str) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let log = host.log();
        if log.contains(what) {
            return log;
        }
        assert!(Instant::now() < deadline, "no `{what}` in the log:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `n` messages (each its own id) with `body` to `jobs`, through the configuration at
/// `config`, as another process would.
fn send(config: &Path, body: &str, n: usize) {
    let config = qhost::Config::load(Some(config), qhost::Overrides::default()).expect("config");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let queues = qhost::Queues::open(&config, &["jobs"])
            .await
            .expect("the queue");
        for _ in 0..n {
            (queues.send(qhost::Outgoing::new("jobs", body), 1).await).expect("sent");
        }
    });
}

/// The acked count in the host's metrics.
fn acked(body: &str) -> u64 {
    (body.lines())
        .filter(|l| {
            l.starts_with("qhost_messages_handled_total{") && l.contains("outcome=\"acked\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The rollback rules of the trapping canary's tests.
const ROLLBACK_RULES: &str =
    "promote-after-messages = 100000\nrollback-min-messages = 10\nrollback-margin-percent = 5";

#[test]
fn a_canary_that_traps_on_a_third_of_bodies_is_rolled_back_and_every_message_acks_once() {
    let dir = tempfile::tempdir().unwrap();
    rolled_back_with_nothing_lost(dir.path(), &setup(dir.path(), "rollback", ROLLBACK_RULES));
}

#[test]
fn on_a_redis_cluster_the_rollout_record_rolls_the_canary_back_the_same_way() {
    let cluster = qhost_e2e::redis_cluster::RedisCluster::without_replicas(3);
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let redis = format!("cluster = true\nurls = [{}]", urls.join(", "));
    let dir = tempfile::tempdir().unwrap();
    let config = setup_on(dir.path(), "rollback-cluster", ROLLBACK_RULES, &redis);
    rolled_back_with_nothing_lost(dir.path(), &config);
}

/// Drops the trapping v2 under a host on `config`, sends 300 messages (90 of which trap on
/// it), and checks the rollback and that each message acked once, none dead or retried.
fn rolled_back_with_nothing_lost(dir: &Path, config: &Path) {
    let config = config.to_path_buf();
    let host = start_settled(&config);
    drop_v2(dir, "[config]\ntrap-some = \"on\"\n");
    wait_for_log(&host, Duration::from_secs(20), "canary started");
    send(&config, "if-config:trap-some:trap", 90);
    send(&config, "ack", 210);
    let log = wait_for_log(&host, Duration::from_secs(60), "canary rolled back");
    let line = (log.lines())
        .find(|l| l.contains("canary rolled back"))
        .unwrap_or_default();
    assert!(
        line.contains("failure share")
            && line.contains("on the canary against 0.0% on the serving version"),
        "the reason names the failure share: {line}"
    );
    let admin = host.admin_addr();
    wait_for(admin, "/metrics", Duration::from_secs(60), |_, body| {
        acked(body) == 300
    });
    let (_, metrics) = qhost_e2e::admin::get(admin, "/metrics");
    assert!(
        metrics.contains(
            "qhost_rollout_rollbacks_total{plugin=\"worker\",reason=\"failure-share\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("state=\"rolled-back\""),
        "the state gauge: {metrics}"
    );
    let fallbacks = log.matches("running it on the serving version").count();
    assert!(fallbacks >= 1, "the canary trapped, and serving ran those");
    let summary = host.stop();
    for (column, expected) in [("acked", 300), ("dead", 0), ("retried", 0)] {
        assert_eq!(
            summary_column(&summary, "jobs", column),
            expected,
            "{column}: {summary}"
        );
    }
    assert_eq!(
        summary_column(&summary, "jobs", "ran"),
        300 + fallbacks as u64,
        "each message ran once to an ack, plus the canary's failed runs: {summary}"
    );
}

#[test]
fn an_operators_promote_from_another_process_moves_the_host_even_one_restarted_mid_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), "promote", "promote-after-messages = 100000");
    let host = HostProcess::start_consuming(&config);
    let (code, _, err) = run_in(dir.path(), &["plugins", "promote", "worker"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("worker has no canary running"), "{err}");

    drop_v2(dir.path(), "");
    wait_for_log(&host, Duration::from_secs(20), "canary started");
    send(&config, "ack", 50);
    let admin = host.admin_addr();
    wait_for(admin, "/metrics", Duration::from_secs(60), |_, body| {
        acked(body) == 50 && body.contains("state=\"canary\"")
    });
    let (code, out, err) = run_in(dir.path(), &["plugins", "list"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("rollout: canary ")
            && out.contains("on 20% of keys")
            && out.contains("; canary"),
        "{out}"
    );

    // Restarted mid-rollout with only v2 in its plugins directory, the host takes v1 from the
    // versions it kept and joins the rollout.
    host.stop();
    let host = HostProcess::start_consuming(&config);
    wait_for_log(&host, Duration::from_secs(20), "canary started");
    let v1 = qhost::plugins::plugin_version(&qhost_e2e::plugin_bytes("fixture"));
    let (_, out, _) = run_in(dir.path(), &["plugins", "list"]);
    let row = out
        .lines()
        .find(|l| l.starts_with("worker"))
        .unwrap_or_default();
    assert!(row.contains(&v1), "v1 serves again: {out}");
    assert!(out.contains("rollout: canary "), "{out}");

    let (code, out, err) = run_in(dir.path(), &["plugins", "promote", "worker"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("promoted: promoted by hand"), "{out}");
    let log = wait_for_log(&host, Duration::from_secs(10), "canary promoted");
    assert!(log.contains("promoted by hand"), "{log}");
    let v2 = qhost::plugins::plugin_version(&deploy::build_variant(
        &qhost_e2e::plugin_bytes("fixture"),
        "v2",
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, out, _) = run_in(dir.path(), &["plugins", "list"]);
        let row = out
            .lines()
            .find(|l| l.starts_with("worker"))
            .unwrap_or_default();
        if row.contains(&v2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "v2 serves after the promotion: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _, err) = run_in(dir.path(), &["plugins", "rollback", "worker"]);
    assert_eq!(code, Some(1), "nothing left to roll back");
    assert!(err.contains("no canary running"), "{err}");
    host.stop();
}

/// A host's configuration in `dir` (its own plugins and data): queue `jobs` on the
/// SQS-compatible server, leases and rollouts in Redis namespace `ns`.
fn fleet_host(dir: &Path, ns: &str, jobs: &str) -> PathBuf {
    with_v1(
        dir,
        &format!(
            "max-in-flight = 8\n\
             [source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\nregion = \"us-east-1\"\n\
             [idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{ns}\"\n\
             [retry]\nbase-secs = 0.05\nmax-secs = 1\n\
             [rollout]\nmode = \"canary\"\npercent = 30\npromote-after-messages = 100000\n\
             rollback-min-messages = 10\nrollback-margin-percent = 5\n\
             [[queue]]\nname = \"{jobs}\"\nplugin = \"worker\"\nwait-time-secs = 1\n",
            qhost_e2e::sqs_server::endpoint(),
            shared_url(),
        ),
    )
}

/// The reason a host's log gives for `event` (`canary rolled back`, `canary promoted`).
fn reason(log: &str, event: &str) -> String {
    let line = (log.lines())
        .find(|l| l.contains(event))
        .unwrap_or_default();
    let at = line
        .find("reason=")
        .map_or(line.len(), |i| i + "reason=".len());
    line[at..].to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_on_one_redis_follow_one_rollout_and_one_decision() {
    use qhost::sources::QueueSource as _;
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let jobs = qhost_e2e::sqs_server::unique("canary");
    qhost_e2e::sqs_server::create_queue(&jobs, &[]).await;
    qhost_e2e::sqs_server::create_queue(&format!("{jobs}-dlq"), &[]).await;
    let ns = unique_namespace("fleet-rollout");
    let a = start_settled(&fleet_host(a_dir.path(), &ns, &jobs));
    drop_v2(a_dir.path(), "[config]\ntrap-some = \"on\"\n");
    wait_for_log(&a, Duration::from_secs(20), "canary started");
    // B starts while A's canary runs, then gets the same file: it joins the rollout.
    let b = start_settled(&fleet_host(b_dir.path(), &ns, &jobs));
    drop_v2(b_dir.path(), "[config]\ntrap-some = \"on\"\n");
    wait_for_log(&b, Duration::from_secs(20), "canary started");

    let sqs = qhost::sources::SqsQueue::from_sdk_config(&qhost_e2e::sqs_server::sdk_config());
    let bodies = (0..300).map(|i| {
        if i % 10 < 3 {
            "if-config:trap-some:trap"
        } else {
            "ack"
        }
    });
    let batch: Vec<qhost::Outgoing> = bodies.map(|b| qhost::Outgoing::new(&jobs, b)).collect();
    for chunk in batch.chunks(10) {
        sqs.send(chunk).await.expect("send");
    }
    let (a_log, b_log) = tokio::task::block_in_place(|| {
        (
            wait_for_log(&a, Duration::from_secs(90), "canary rolled back"),
            wait_for_log(&b, Duration::from_secs(90), "canary rolled back"),
        )
    });
    let decided = reason(&a_log, "canary rolled back");
    assert!(decided.contains("failure share"), "{decided}");
    assert_eq!(
        decided,
        reason(&b_log, "canary rolled back"),
        "one decision"
    );

    let (a_admin, b_admin) = (a.admin_addr(), b.admin_addr());
    let started = Instant::now();
    loop {
        let (_, a_metrics) = qhost_e2e::admin::get(a_admin, "/metrics");
        let (_, b_metrics) = qhost_e2e::admin::get(b_admin, "/metrics");
        let depth = sqs.depth(&jobs).await.expect("depth");
        if acked(&a_metrics) + acked(&b_metrics) == 300 && depth.total() == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "every message acked once: {} and {}, {depth:?} on the queue",
            acked(&a_metrics),
            acked(&b_metrics)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Then a good version on both, promoted by an operator from a third process.
    let v3 = deploy::build_variant(&qhost_e2e::plugin_bytes("fixture"), "v3");
    for dir in [a_dir.path(), b_dir.path()] {
        let plugins = dir.join("plugins");
        std::fs::write(plugins.join("worker.toml"), "").expect("v3's manifest");
        std::fs::write(plugins.join(".worker.tmp"), &v3).expect("v3");
        std::fs::rename(plugins.join(".worker.tmp"), plugins.join("worker.wasm")).expect("v3");
    }
    tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while a.log().matches("canary started").count() < 2
            || b.log().matches("canary started").count() < 2
        {
            assert!(Instant::now() < deadline, "both hosts start v3's canary");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(2));
        let (code, out, err) = run_in(a_dir.path(), &["plugins", "promote", "worker"]);
        assert_eq!(code, Some(0), "{out}{err}");
        for host in [&a, &b] {
            let log = wait_for_log(host, Duration::from_secs(10), "canary promoted");
            assert!(log.contains("promoted by hand"), "{log}");
        }
    });
    let (a_summary, b_summary) = (a.stop(), b.stop());
    let total = |column| {
        summary_column(&a_summary, &jobs, column) + summary_column(&b_summary, &jobs, column)
    };
    assert_eq!(total("acked"), 300, "{a_summary}{b_summary}");
    assert_eq!(
        (total("dead"), total("retried")),
        (0, 0),
        "{a_summary}{b_summary}"
    );
}

#[test]
fn a_good_canary_is_promoted_by_its_rule_and_every_redelivery_met_the_version_it_first_met() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(
        dir.path(),
        "sticky",
        "promote-after-messages = 40\nrollback-min-messages = 1000",
    );
    let grant = "[outbox]\nqueues = [\"sink\"]\n";
    std::fs::write(dir.path().join("plugins/worker.toml"), grant).expect("v1's manifest");
    let host = HostProcess::start_consuming(&config);
    drop_v2(dir.path(), grant);
    wait_for_log(&host, Duration::from_secs(20), "canary started");
    // Each message asks for a retry on its first delivery (on either version), then acks on
    // its second and sends what it ran on to `sink`.
    send(&config, "flaky:2;send:sink:done", 200);
    let log = wait_for_log(&host, Duration::from_secs(60), "canary promoted");
    assert!(log.contains("no rollback rule tripped"), "{log}");
    wait_for(
        host.admin_addr(),
        "/metrics",
        Duration::from_secs(60),
        |_, body| acked(body) == 200,
    );
    let summary = host.stop();
    assert_eq!(summary_column(&summary, "jobs", "dead"), 0, "{summary}");

    let v2 = qhost::plugins::plugin_version(&deploy::build_variant(
        &qhost_e2e::plugin_bytes("fixture"),
        "v2",
    ));
    let config = qhost::Config::load(Some(&config), qhost::Overrides::default()).expect("config");
    let sunk = tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(async {
            let queues = qhost::Queues::open(&config, &["sink"])
                .await
                .expect("the sink");
            queues.peek("sink", 1000).await.expect("peek")
        });
    assert_eq!(sunk.len(), 200, "one effect per message");
    let mut on_canary = 0;
    for m in &sunk {
        let attr = |name: &str| {
            (m.attributes.iter())
                .find(|a| a.name == name)
                .and_then(|a| a.text())
                .unwrap_or_default()
                .to_string()
        };
        let parent = attr("qhost-idempotency-key");
        let key = parent
            .strip_prefix("worker:")
            .and_then(|k| k.strip_suffix("/0"))
            .expect("worker:KEY/0");
        if qhost::testing::rollout_bucket("worker", key) < 20 {
            on_canary += 1;
            assert_eq!(
                attr("qhost-producer"),
                format!("worker@{v2}"),
                "a key in the canary's share ran on the canary on its redelivery too"
            );
        }
    }
    assert!(
        on_canary > 10,
        "a fifth of keys are the canary's: {on_canary}"
    );
}
