//! Every bad input gets a clear error and loses nothing: broken and wrong-world components,
//! plugins that trap, loop or eat memory, an unknown plugin in the configuration.

use qhost::Host;
use qhost::runtime::loader;
use qhost::source::QueueSource;
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
async fn a_plugin_cannot_read_host_files_or_environment() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let host = env.host(env.config(&queue_toml("jobs", "fixture"))).await;
    // PATH is set in every test process; the guest's environment must still be empty.
    let var = "PATH";
    send_all(
        &env.queue(),
        "jobs",
        &["read:/etc/hostname", &format!("env:{var}")],
        &[],
    )
    .await;
    run_until_idle(&host).await;
    let dead = contents(&env.queue(), "jobs-dlq").await;
    let reasons: Vec<_> = dead
        .iter()
        .map(|d| attr(d, "qhost-dead-letter-reason").unwrap_or_default())
        .collect();
    assert_eq!(dead.len(), 2, "both probes were denied: {reasons:?}");
    assert!(
        reasons.iter().all(|r| r.starts_with("denied:")),
        "{reasons:?}"
    );
}

/// Installs `bytes` as plugin `broken` beside a good `fixture`, and checks the load error.
fn assert_refused(bytes: &[u8], expected: &str) {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    env.install_bytes("broken", bytes, "");
    let runtime = qhost::host::runtime_for(&env.config("")).expect("engine");
    let (loaded, failed) =
        loader::load_dir(&runtime, &env.plugins_dir()).expect("plugins directory reads");
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
async fn messages_for_a_plugin_that_failed_to_load_are_kept_then_dead_lettered() {
    let env = TestEnv::new();
    let good = qhost_e2e::plugin_bytes("fixture");
    env.install_bytes("fixture", &good[..100], "");
    let host = env.host(env.config(&queue_toml("jobs", "fixture"))).await;
    send_all(&env.queue(), "jobs", &["ack"], &[]).await;
    run_until_idle(&host).await;
    let c = host.stats().total();
    assert_eq!((c.invoked, c.retried, c.dead_lettered), (0, 4, 1), "{c:?}");
    let reason = only_dead_letter_reason(&env, "jobs").await;
    assert_eq!(
        reason,
        "gave up after 5 attempts: no plugin named `fixture` is loaded"
    );
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
