//! Every bad input gets a clear error and loses nothing: broken and wrong-world components,
//! plugins that trap, loop or eat memory, an unknown plugin in the configuration.

use qhost::Host;
use qhost::sources::QueueSource;
use qhost_e2e::harness::{TestEnv, attr, contents, queue_toml, run_until_idle, send_all};

/// The reason on the one dead letter of `queue`-dlq.
async fn only_dead_letter_reason(env: &TestEnv, queue: &str) -> String {
    let dead = contents(&env.queue(), &format!("{queue}-dlq")).await;
    assert_eq!(dead.len(), 1, "exactly one dead letter");
    attr(&dead[0], "qhost-dead-letter-reason")
        .expect("reason attribute")
        .to_string()
}

/// Runs a host with `fixture` under `manifest` on bodies `[bad, "ack"]` and checks that the bad
/// one was tried `attempts` times and dead-lettered, while the good one was handled once.
async fn poison_then_good(manifest: &str, bad: &str, attempts: u64) -> (TestEnv, Host) {
    let env = TestEnv::new();
    env.install("fixture", "fixture", manifest);
    let host = env.host(env.config(&queue_toml("jobs", "fixture"))).await;
    send_all(&env.queue(), "jobs", &[bad, "ack"], &[]).await;
    run_until_idle(&host).await;
    let c = host.stats().total();
    assert_eq!(
        c.invoked,
        attempts + 1,
        "bad message ran {attempts} times, good once: {c:?}"
    );
    assert_eq!(
        (c.failures, c.dead_lettered, c.acked),
        (attempts, 1, 1),
        "{c:?}"
    );
    assert!(contents(&env.queue(), "jobs").await.is_empty());
    (env, host)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trapping_plugin_is_retried_then_dead_lettered_with_the_panic() {
    let (env, _) = poison_then_good("[limits]\nmax-attempts = 2\n", "trap", 2).await;
    let reason = only_dead_letter_reason(&env, "jobs").await;
    assert!(
        reason.starts_with("gave up after 2 attempts: plugin trapped"),
        "{reason}"
    );
    assert!(
        reason.contains("fixture asked to trap"),
        "the guest's panic message is kept: {reason}"
    );
}

/// `timeout-ms` is a wall-clock deadline: a guest blocked in a host call (a WASI sleep of a
/// minute) is stopped at it too, and its slot is free again for the next message.
#[tokio::test(flavor = "multi_thread")]
async fn a_sleeping_plugin_is_stopped_at_its_timeout() {
    let manifest = "[limits]\ntimeout-ms = 300\nmax-attempts = 2\nconcurrency = 1\n";
    let (env, _) = poison_then_good(manifest, "sleep:60000", 2).await;
    let reason = only_dead_letter_reason(&env, "jobs").await;
    assert_eq!(
        reason,
        "gave up after 2 attempts: plugin timed out after 300ms"
    );
}

/// A guest forever in and out of a host call (a 1 ms timer, polled again and again) never
/// finishes and never spins long in guest code: the deadline stops it all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_that_polls_forever_is_stopped_at_its_timeout() {
    let manifest = "[limits]\ntimeout-ms = 300\nmax-attempts = 2\nconcurrency = 1\n";
    let (env, _) = poison_then_good(manifest, "poll", 2).await;
    let reason = only_dead_letter_reason(&env, "jobs").await;
    assert_eq!(
        reason,
        "gave up after 2 attempts: plugin timed out after 300ms"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_looping_plugin_is_stopped_at_its_timeout() {
    let (env, _) =
        poison_then_good("[limits]\ntimeout-ms = 200\nmax-attempts = 2\n", "loop", 2).await;
    let reason = only_dead_letter_reason(&env, "jobs").await;
    assert_eq!(
        reason,
        "gave up after 2 attempts: plugin timed out after 200ms"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_that_eats_memory_is_stopped_at_its_limit() {
    let (env, _) =
        poison_then_good("[limits]\nmemory-mib = 16\nmax-attempts = 2\n", "grow", 2).await;
    let reason = only_dead_letter_reason(&env, "jobs").await;
    assert_eq!(
        reason,
        "gave up after 2 attempts: plugin exceeded its memory limit of 16 MiB"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_cannot_read_host_files_see_the_environment_or_open_a_socket() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let host = env.host(env.config(&queue_toml("jobs", "fixture"))).await;
    // A listener the plugin is told to connect to: it must never see a connection.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("non-blocking");
    let addr = listener.local_addr().expect("address");
    // PATH is set in every test process; the guest's environment must still be empty.
    let var = "PATH";
    assert!(std::env::var(var).is_ok());
    send_all(
        &env.queue(),
        "jobs",
        &[
            "read:/etc/hostname",
            &format!("env:{var}"),
            &format!("connect:{addr}"),
        ],
        &[],
    )
    .await;
    run_until_idle(&host).await;
    let dead = contents(&env.queue(), "jobs-dlq").await;
    let reasons: Vec<_> = dead
        .iter()
        .map(|d| attr(d, "qhost-dead-letter-reason").unwrap_or_default())
        .collect();
    assert_eq!(dead.len(), 3, "every probe was denied: {reasons:?}");
    assert!(
        reasons.iter().all(|r| r.starts_with("denied:")),
        "{reasons:?}"
    );
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the plugin reached the host's listener"
    );
    let c = host.stats().total();
    assert_eq!((c.invoked, c.dead_lettered), (3, 3), "{c:?}");
}

/// The most calls of a native plugin that ran at once, with its manifest saying `manifest`.
async fn peak_concurrency(manifest: &str) -> usize {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let env = TestEnv::new();
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    /// A native handler that takes 50 ms, waiting asynchronously, and counts calls at once.
    struct Slow {
        now: Arc<AtomicUsize>,
        peak: Arc<AtomicUsize>,
    }
    #[async_trait::async_trait]
    impl qhost::handlers::Invoke for Slow {
        async fn invoke(
            &self,
            _msg: qhost::handlers::HandlerMessage,
        ) -> Result<qhost::handlers::Invocation, qhost::handlers::Failure> {
            let running = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(running, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            Ok(qhost::handlers::Invocation::new(
                qhost::handlers::Outcome::Ack,
            ))
        }
    }
    let invoker = Slow {
        now: Arc::clone(&now),
        peak: Arc::clone(&peak),
    };
    let manifest = qhost::plugins::Manifest::parse(manifest).expect("manifest");
    let plugin = qhost::plugins::Plugin::new("slow", "native", manifest, Arc::new(invoker));
    let mut config = env.config(&queue_toml("jobs", "slow"));
    config.max_in_flight = 16;
    let store = qhost::stores::LocalStore::open(None).expect("store");
    let host = Host::new(
        config,
        Arc::new(env.queue()),
        Arc::new(store),
        qhost::plugins::Registry::new([plugin]),
    );
    let bodies: Vec<String> = (0..30).map(|i| i.to_string()).collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    send_all(&env.queue(), "jobs", &refs, &[]).await;
    run_until_idle(&host).await;
    assert_eq!(host.stats().total().acked, 30);
    peak.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_concurrency_limit_caps_its_calls_below_the_host_cap() {
    let unlimited = peak_concurrency("").await;
    assert!(
        unlimited > 2,
        "without a limit, calls overlap ({unlimited} at most)"
    );
    assert_eq!(peak_concurrency("[limits]\nconcurrency = 2\n").await, 2);
}

/// Installs `bytes` as plugin `broken` beside a good `fixture`, and checks the load error.
fn assert_refused(bytes: &[u8], expected: &str) {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    env.install_bytes("broken", bytes, "");
    let runtime = qhost::runtime_for(&env.config("")).expect("engine");
    let (loaded, failed): (Vec<_>, Vec<_>) = ["fixture", "broken"]
        .iter()
        .map(|name| {
            qhost::plugins::load_plugin(&runtime, &env.plugins_dir().join(format!("{name}.wasm")))
        })
        .partition(Result::is_ok);
    let loaded: Vec<_> = loaded.into_iter().filter_map(Result::ok).collect();
    let failed: Vec<_> = failed.into_iter().filter_map(Result::err).collect();
    let names: Vec<_> = loaded.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, vec!["fixture"], "the good plugin still loads");
    assert_eq!(failed.len(), 1);
    let message = failed[0].to_string();
    assert!(message.contains("broken.wasm"), "names the file: {message}");
    assert!(
        message.contains(expected),
        "says why ({expected}): {message}"
    );
}

#[test]
fn a_truncated_wasm_is_refused_with_the_file_and_reason() {
    let good = qhost_e2e::plugin_bytes("fixture");
    assert_refused(&good[..good.len() / 2], "not a valid WebAssembly component");
}

#[test]
fn a_component_of_another_world_is_refused() {
    assert_refused(
        &qhost_e2e::plugin_bytes("wrong-world"),
        "does not export the qhost:handler world",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_that_fails_to_load_stops_the_start_and_its_messages_wait() {
    let env = TestEnv::new();
    let good = qhost_e2e::plugin_bytes("fixture");
    env.install_bytes("fixture", &good[..100], "");
    send_all(&env.queue(), "jobs", &["ack"], &[]).await;
    let err = Host::from_config(env.config(&queue_toml("jobs", "fixture")))
        .await
        .unwrap_err();
    let message = format!("{err:#}");
    assert!(
        message.contains("queue `jobs` routes to plugin `fixture`, which did not load:")
            && message.contains("not a valid WebAssembly component")
            && message.contains("qhost plugins check")
            && message.contains("allow-unloaded-plugins"),
        "{message}"
    );

    // Allowed to start anyway, the host leaves the queue alone: no delivery, no attempt used,
    // nothing dead-lettered, and a run until idle does not wait for it.
    let mut config = env.config(&queue_toml("jobs", "fixture"));
    config.allow_unloaded_plugins = true;
    let host = env.host(config).await;
    run_until_idle(&host).await;
    let c = host.stats().total();
    assert_eq!((c.received, c.invoked, c.dead_lettered), (0, 0, 0), "{c:?}");
    let waiting = contents(&env.queue(), "jobs").await;
    assert_eq!(waiting.len(), 1, "the message waits");
    assert_eq!(waiting[0].delivery_count, 0, "never delivered");
    assert!(contents(&env.queue(), "jobs-dlq").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_plugin_in_the_config_is_refused_and_nothing_is_consumed() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    send_all(&env.queue(), "jobs", &["ack"], &[]).await;
    let err = Host::from_config(env.config(&queue_toml("jobs", "nope")))
        .await
        .unwrap_err();
    let message = format!("{err:#}");
    assert!(message.contains("queue[0].plugin"), "{message}");
    assert!(
        message.contains("`nope`") && message.contains("found: fixture"),
        "{message}"
    );
    assert_eq!(
        env.queue().depth("jobs").await.unwrap().total(),
        1,
        "the message waits"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_without_its_key_is_dead_lettered_not_run() {
    let env = TestEnv::new();
    env.install(
        "fixture",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n",
    );
    let host = env.host(env.config(&queue_toml("jobs", "fixture"))).await;
    send_all(&env.queue(), "jobs", &["ack"], &[]).await;
    run_until_idle(&host).await;
    assert_eq!(host.stats().total().invoked, 0);
    let reason = only_dead_letter_reason(&env, "jobs").await;
    assert!(
        reason.contains("attribute:job-id") && reason.contains("missing"),
        "{reason}"
    );
}

/// A flood of stderr is cut with a marker, never a write error that would make `eprintln!`
/// trap; and a reused instance's next message reports only its own stderr.
#[tokio::test(flavor = "multi_thread")]
async fn a_stderr_flood_is_cut_and_a_reused_instance_starts_clean() {
    let env = TestEnv::new();
    let manifest = "[limits]\nreuse-instance = 10\nconcurrency = 1\nmax-attempts = 1\n";
    env.install("fixture", "fixture", manifest);
    let host = env.host(env.config(&queue_toml("jobs", "fixture"))).await;
    send_all(&env.queue(), "jobs", &["stderr:100000"], &[]).await;
    run_until_idle(&host).await;
    let c = host.stats().total();
    assert_eq!(
        (c.acked, c.failures),
        (1, 0),
        "the flood did not trap: {c:?}"
    );

    send_all(&env.queue(), "jobs", &["trap"], &[]).await;
    run_until_idle(&host).await;

    let reason = only_dead_letter_reason(&env, "jobs").await;
    assert!(reason.contains("fixture asked to trap"), "{reason}");
    assert!(
        !reason.contains("flood"),
        "the earlier message's stderr is not in this one's report: {reason}"
    );
    assert_eq!(
        host.stats()
            .invocations_by_version("fixture")
            .values()
            .sum::<u64>(),
        2
    );
}

#[test]
fn a_component_of_a_later_wit_version_is_refused_naming_both_versions() {
    assert_refused(
        &qhost_e2e::plugin_bytes("next-wit"),
        "it was built against qhost:handler@0.2.0, and this host serves qhost:handler@0.1.2",
    );
}

/// The contract's minor versions add what old handlers can ignore: a component built against
/// 0.1.0 (before `result-value`) loads in a host serving 0.1.2, and its imports work.
#[tokio::test(flavor = "multi_thread")]
async fn a_component_of_the_previous_minor_wit_version_still_serves() {
    let env = TestEnv::new();
    env.install("previous", "prev-wit", "");
    let host = env.host(env.config(&queue_toml("jobs", "previous"))).await;
    send_all(&env.queue(), "jobs", &["carried on"], &[]).await;
    run_until_idle(&host).await;
    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked, c.dead_lettered), (1, 1, 0), "{c:?}");
    let next = contents(&env.queue(), "next").await;
    let bodies: Vec<&[u8]> = next.iter().map(|m| m.body.as_slice()).collect();
    assert_eq!(
        bodies,
        [b"carried on".as_slice()],
        "its outbox import works"
    );
}

#[test]
fn a_core_module_is_refused_with_how_to_make_it_a_component() {
    // The smallest core module: magic and version 1, no sections.
    assert_refused(b"\0asm\x01\0\0\0", "wasm-tools component new");
}

/// A plugin that cannot run in this host (its initial memory is over the host's cap) is
/// refused when it loads, saying so, not at its first message.
#[test]
fn a_plugin_that_cannot_be_instantiated_is_refused_at_load() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "[limits]\nmemory-mib = 1\n");
    let mut config = env.config("");
    config.max_plugin_memory_mib = 1;
    let runtime = qhost::runtime_for(&config).expect("engine");
    let err = qhost::plugins::load_plugin(&runtime, &env.plugins_dir().join("fixture.wasm"))
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("it does not fit this host's limits")
            && err.contains("memory has a minimum byte size"),
        "{err}"
    );
    // Within the pool, but its manifest asks for more than the host allows.
    config.max_plugin_memory_mib = 4;
    let runtime = qhost::runtime_for(&config).expect("engine");
    env.install("fixture", "fixture", "[limits]\nmemory-mib = 8\n");
    let err = qhost::plugins::load_plugin(&runtime, &env.plugins_dir().join("fixture.wasm"))
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("limits.memory-mib = 8, above this host's max-plugin-memory-mib = 4"),
        "{err}"
    );
}
