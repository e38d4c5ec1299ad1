//! Hot reload: plugins replaced, broken, removed and re-added under a running host, and a
//! restart that takes every plugin from the compiled-code cache.
//!
//! "v1" and "v2" are the fixture plugin and the same build with a custom section appended: the
//! same behaviour under a different content hash, so each outbox message's `qhost-producer`
//! attribute says which version handled the message that sent it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use qhost::Host;
use qhost::plugins::plugin_version as version_of;
use qhost_e2e::deploy;
use qhost_e2e::harness::{Running, TestEnv, attr, contents, queue_toml, run_until_idle, send_all};
use qhost_e2e::plugin_bytes;
use qhost_e2e::processes::qhost_binary;

const PRODUCER: &str = "qhost-producer";

/// v1 and v2 of the fixture, installed as `worker` (v1) in a new environment.
fn worker_env() -> (TestEnv, Vec<u8>, Vec<u8>) {
    let env = TestEnv::new();
    let v1 = plugin_bytes("fixture");
    let v2 = deploy::build_variant(&v1, "v2");
    env.install_bytes("worker", &v1, "");
    (env, v1, v2)
}

fn target(env: &TestEnv) -> PathBuf {
    env.plugins_dir().join("worker.wasm")
}

fn serving(host: &Host) -> Option<String> {
    host.registry().get("worker").map(|p| p.version.clone())
}

fn last_error(host: &Host) -> Option<String> {
    host.registry()
        .status()
        .into_iter()
        .find(|s| s.name == "worker")
        .and_then(|s| s.last_error)
}

async fn wait_until(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn start(env: &TestEnv) -> Running {
    Running::start(env.host(env.config(&queue_toml("jobs", "worker"))).await)
}

/// The producer attribute of every sink message, by the number in its body.
async fn sink_producers(env: &TestEnv) -> Vec<(usize, String)> {
    contents(&env.queue(), "sink")
        .await
        .iter()
        .map(|m| {
            let n = String::from_utf8_lossy(&m.body).parse().expect("a number");
            (n, attr(m, PRODUCER).unwrap_or_default().to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_swap_under_load_hands_every_message_to_v1_or_v2_exactly_once() {
    const BATCHES: usize = 40;
    const PER_BATCH: usize = 10;
    const SWAP_AT: usize = 10;
    let (env, v1, v2) = worker_env();
    let (v1_id, v2_id) = (
        format!("worker@{}", version_of(&v1)),
        format!("worker@{}", version_of(&v2)),
    );
    let running = start(&env).await;
    let queue = env.queue();
    let mut sent_at = Vec::new();
    // When the test first saw the registry serve v2: every message sent after it must run on
    // v2. (Seen by the test, so no earlier than the swap itself; how soon after the rename
    // that is depends on the machine's load, which this test does not time.)
    let mut v2_live_at = None;
    let v2_serving = |running: &Running| serving(running.host()) == Some(version_of(&v2));
    for batch in 0..=BATCHES {
        if batch == SWAP_AT {
            deploy::by_rename(&target(&env), &v2);
        }
        if batch == BATCHES {
            // The last batch goes after the swap has surely landed, so some messages are v2's.
            wait_until(Duration::from_secs(60), "v2 serves", || {
                v2_serving(&running)
            })
            .await;
        }
        if v2_live_at.is_none() && v2_serving(&running) {
            v2_live_at = Some(Instant::now());
        }
        let bodies: Vec<String> = (batch * PER_BATCH..(batch + 1) * PER_BATCH)
            .map(|i| format!("send:sink:{i}"))
            .collect();
        let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
        let t = Instant::now();
        send_all(&queue, "jobs", &refs, &[]).await;
        sent_at.extend(std::iter::repeat_n(t, PER_BATCH));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = (BATCHES + 1) * PER_BATCH;
    let total = all as u64;
    running
        .wait_for(Duration::from_secs(60), |h| {
            h.stats().total().acked >= total
        })
        .await;
    let host = running.stop().await;

    let sink = sink_producers(&env).await;
    let numbers: BTreeSet<usize> = sink.iter().map(|(n, _)| *n).collect();
    assert_eq!(sink.len(), all, "one effect per message");
    assert_eq!(numbers, (0..all).collect(), "none lost");
    let live = v2_live_at.expect("v2 served before the last batch");
    for (n, producer) in &sink {
        assert!(
            producer == &v1_id || producer == &v2_id,
            "message {n} was handled by {producer}"
        );
        if sent_at[*n] >= live {
            assert_eq!(
                producer, &v2_id,
                "message {n} was sent after v2 was seen serving"
            );
        }
    }
    let by_v1 = sink.iter().filter(|(_, p)| p == &v1_id).count() as u64;
    let by_version = host.stats().invocations_by_version("worker");
    assert!(by_v1 > 0, "the first batches ran on v1");
    assert_eq!(
        by_version.values().sum::<u64>(),
        total,
        "each message ran once: {by_version:?}"
    );
    assert_eq!(by_version.get(&version_of(&v1)), Some(&by_v1));
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.failures, c.dead_lettered, c.duplicates),
        (total, 0, 0, 0),
        "{c:?}"
    );
}

fn plugins_list(env: &TestEnv) -> String {
    let out = Command::new(qhost_binary())
        .arg("--plugins-dir")
        .arg(env.plugins_dir())
        .arg("--data-dir")
        .arg(env.data_dir())
        .args(["plugins", "list"])
        .envs(qhost_e2e::processes::qhost_env())
        .output()
        .expect("running qhost plugins list");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_drop_is_refused_and_the_previous_version_keeps_serving() {
    let (env, v1, v2) = worker_env();
    let v1_version = version_of(&v1);
    let running = start(&env).await;
    let host = running.host();

    let bad_drops = [
        (
            v1[..v1.len() / 2].to_vec(),
            "it is not a valid WebAssembly component",
        ),
        (
            plugin_bytes("wrong-world"),
            "it does not export the qhost:handler world",
        ),
    ];
    for (i, (bytes, reason)) in bad_drops.into_iter().enumerate() {
        deploy::by_rename(&target(&env), &bytes);
        wait_until(Duration::from_secs(10), "the bad drop is refused", || {
            last_error(host).is_some_and(|e| e.contains(reason))
        })
        .await;
        assert_eq!(serving(host).as_deref(), Some(v1_version.as_str()));
        let listed = plugins_list(&env);
        assert!(
            listed.contains("as served by the running qhost")
                && listed.contains(&v1_version)
                && listed.contains(reason),
            "{listed}"
        );
        // Messages keep flowing to v1 meanwhile.
        send_all(&env.queue(), "jobs", &[&format!("send:sink:{i}")], &[]).await;
        let want = i + 1;
        running
            .wait_for(Duration::from_secs(10), |h| {
                h.stats().total().acked >= want as u64
            })
            .await;
    }
    let producers: Vec<String> = sink_producers(&env)
        .await
        .into_iter()
        .map(|p| p.1)
        .collect();
    assert_eq!(producers, vec![format!("worker@{v1_version}"); 2]);

    deploy::by_rename(&target(&env), &v2);
    wait_until(Duration::from_secs(10), "v2 serves", || {
        serving(host) == Some(version_of(&v2))
    })
    .await;
    assert_eq!(last_error(host), None, "a good drop clears the error");
    let c = running.stop().await.stats().total();
    assert_eq!((c.failures, c.dead_lettered), (0, 0), "{c:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_overwrite_in_place_is_never_served_half_written() {
    let (env, v1, v2) = worker_env();
    let running = start(&env).await;
    let host = running.host();
    let writer = std::thread::spawn({
        let (path, v2) = (target(&env), v2.clone());
        // Pauses longer than the watcher's debounce, so it syncs on partial files.
        move || deploy::in_place_slowly(&path, &v2, 4, Duration::from_millis(400))
    });
    let mut seen = BTreeSet::new();
    let mut refused_partial = false;
    let mut sent = 0;
    while !writer.is_finished() || serving(host) != Some(version_of(&v2)) {
        seen.extend(serving(host));
        refused_partial |= last_error(host).is_some();
        send_all(&env.queue(), "jobs", &[&format!("send:sink:{sent}")], &[]).await;
        sent += 1;
        assert!(sent < 200, "v2 never started serving");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writer.join().expect("writer");
    seen.extend(serving(host));
    let expected: BTreeSet<String> = [version_of(&v1), version_of(&v2)].into();
    assert_eq!(seen, expected, "v1, then v2, and nothing else served");
    assert!(
        refused_partial,
        "the watcher synced on a partial file at least once (else this proves nothing)"
    );
    running
        .wait_for(Duration::from_secs(20), |h| {
            h.stats().total().acked >= sent as u64
        })
        .await;
    let host = running.stop().await;
    let c = host.stats().total();
    assert_eq!(
        (c.acked, c.failures, c.dead_lettered),
        (sent as u64, 0, 0),
        "{c:?}"
    );
    let producers = sink_producers(&env).await;
    let mut numbers: Vec<usize> = producers.iter().map(|(n, _)| *n).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (0..sent).collect::<Vec<_>>(), "each message once");
    let builds: BTreeSet<String> = expected.iter().map(|v| format!("worker@{v}")).collect();
    for (n, producer) in &producers {
        assert!(
            builds.contains(producer),
            "message {n} was handled by {producer}, not a whole build"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removed_plugin_keeps_its_messages_until_it_is_added_again() {
    let (env, v1, _) = worker_env();
    let mut config = env.config(&queue_toml("jobs", "worker"));
    config.retry = qhost::RetryPolicy {
        base: Duration::from_secs(1),
        max: Duration::from_secs(2),
    };
    let running = Running::start(env.host(config).await);
    let host = running.host();
    std::fs::remove_file(target(&env)).expect("removing the plugin");
    wait_until(Duration::from_secs(10), "the plugin is unloaded", || {
        serving(host).is_none()
    })
    .await;
    send_all(&env.queue(), "jobs", &["send:sink:0"], &[]).await;
    // Not consumed while its plugin is gone: the message waits in the queue, never received,
    // so no attempt is used and nothing can be dead-lettered for a deploy mistake. (Waiting
    // here is the point: nothing may happen during it.)
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        host.stats().total().received,
        0,
        "{:?}",
        host.stats().total()
    );
    let waiting = contents(&env.queue(), "jobs").await;
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].delivery_count, 0, "never delivered");
    let reasons = host.admin_view().readiness();
    assert!(
        reasons.is_err_and(|r| r
            .iter()
            .any(|r| r.contains("plugin `worker` is not serving"))),
        "readiness says why"
    );
    deploy::by_rename(&target(&env), &v1);
    running
        .wait_for(Duration::from_secs(20), |h| h.stats().total().acked >= 1)
        .await;
    let host = running.stop().await;
    let c = host.stats().total();
    assert_eq!(
        (c.received, c.invoked, c.acked, c.retried, c.dead_lettered),
        (1, 1, 1, 0, 0),
        "{c:?}"
    );
    assert_eq!(sink_producers(&env).await.len(), 1);
    assert!(contents(&env.queue(), "jobs-dlq").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_with_a_warm_cache_compiles_nothing() {
    let env = TestEnv::new();
    env.install("worker", "fixture", "");
    env.install("email-reminder", "email-reminder", "");
    let config = env.config(&queue_toml("jobs", "worker"));
    let counts =
        |host: &Host| qhost::testing::compile_counts(host).expect("loaded from a directory");

    let cold = Host::from_config(config.clone()).await.unwrap();
    assert_eq!(counts(&cold), (2, 0), "a cold start compiles each plugin");
    drop(cold);
    let entries = std::fs::read_dir(env.data_dir().join("compiled"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        })
        .count();
    assert_eq!(entries, 2);

    let warm = Host::from_config(config).await.unwrap();
    assert_eq!(counts(&warm), (0, 2), "a warm start compiles nothing");
    send_all(&env.queue(), "jobs", &["send:sink:0"], &[]).await;
    run_until_idle(&warm).await;
    assert_eq!(warm.stats().total().acked, 1);
    assert_eq!(sink_producers(&env).await.len(), 1);
}

/// `qhost` in `dir` with `cache` as the user's cache (`XDG_CACHE_HOME`) and info logging:
/// (whether it succeeded, stdout, stderr).
fn qhost_with_cache(
    dir: &std::path::Path,
    cache: &std::path::Path,
    args: &[&str],
) -> (bool, String, String) {
    let out = Command::new(qhost_binary())
        .current_dir(dir)
        .args(args)
        .envs(qhost_e2e::processes::qhost_env())
        .env("XDG_CACHE_HOME", cache)
        .env("QHOST_LOG", "info")
        .env_remove("QHOST_CONFIG")
        .output()
        .expect("running qhost");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// A handler author's inner loop: `qhost test` in the project compiles the plugin into the
/// user's cache, and `qhost check` and `qhost run` in another directory, with a data directory
/// of their own, compile nothing.
#[test]
fn test_check_and_run_share_the_user_s_compiled_cache() {
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let bytes = plugin_bytes("fixture");
    std::fs::write(project.path().join("hello.wasm"), &bytes).unwrap();
    std::fs::write(
        project.path().join("hello.test.toml"),
        "plugin = \"hello.wasm\"\n\n[[case]]\nname = \"acks\"\nbody = \"ack\"\n[case.expect]\noutcome = \"ack\"\n",
    )
    .unwrap();
    let (ok, out, err) =
        qhost_with_cache(project.path(), cache.path(), &["test", "hello.test.toml"]);
    assert!(ok && out.contains("1 passed, 0 failed"), "{out}{err}");
    assert!(
        err.contains("plugins ready compiled=1 from_cache=0"),
        "{err}"
    );

    let beside = tempfile::tempdir().unwrap();
    std::fs::create_dir(beside.path().join("plugins")).unwrap();
    std::fs::write(beside.path().join("plugins/hello.wasm"), &bytes).unwrap();
    std::fs::write(
        beside.path().join("qhost.toml"),
        "[[queue]]\nname = \"hello\"\nplugin = \"hello\"\n",
    )
    .unwrap();
    for args in [
        &["check"][..],
        &["send", "--queue", "hello", "--body", "ack"],
        &["run", "--until-idle"],
    ] {
        let (ok, out, err) = qhost_with_cache(beside.path(), cache.path(), args);
        assert!(ok, "{args:?}: {out}{err}");
        if args[0] != "send" {
            assert!(
                err.contains("plugins ready compiled=0 from_cache=1"),
                "{args:?} compiled nothing: {err}"
            );
        }
    }
    let entries = std::fs::read_dir(cache.path().join("qhost/compiled"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        })
        .count();
    assert_eq!(entries, 1, "one plugin, one entry in the user's cache");
    for data in [project.path().join(".qhost"), beside.path().join(".qhost")] {
        assert!(
            !data.join("compiled").exists(),
            "{}: no cache of its own",
            data.display()
        );
    }
}
