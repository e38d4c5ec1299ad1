//! Secrets from the host: `[config]` values read from the environment and from a file when the
//! plugin loads, only where the host's `[secrets]` grants; a secret that cannot be read refuses
//! the plugin (the version serving goes on); values never reach logs, `plugins list` or
//! `plugins.json`.

use std::process::Command;
use std::time::{Duration, Instant};

use qhost_e2e::harness::{Running, TestEnv, body_texts, contents, queue_toml, send_all};
use qhost_e2e::processes::{HostProcess, qhost_binary};

const ENV_VALUE: &str = "env-s3cret-4f1d";
const FILE_VALUE: &str = "file-s3cret-9a2c";

/// An environment whose plugin reads `api` from the variable `var` and `token` from a file in
/// a granted directory, and the `[secrets]` table granting both.
fn secret_env(var: &str) -> (TestEnv, tempfile::TempDir, String) {
    let env = TestEnv::new();
    let secrets = tempfile::tempdir().expect("a secrets directory");
    std::fs::write(secrets.path().join("token"), format!("{FILE_VALUE}\n")).expect("a secret");
    let manifest = format!(
        "[config]\napi = {{ env = \"{var}\" }}\ntoken = {{ file = {:?} }}\n",
        secrets.path().join("token")
    );
    env.install("worker", "fixture", &manifest);
    let grant = format!(
        "[secrets]\nenv = [\"{var}\", \"QHOST_TEST_*\"]\ndirs = [{:?}]\n",
        secrets.path()
    );
    (env, secrets, grant)
}

fn bodies(out: &[qhost::Received]) -> Vec<String> {
    let mut bodies = body_texts(out);
    bodies.sort();
    bodies
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_reach_the_plugin_and_nothing_else() {
    let (env, _secrets, grant) = secret_env("QHOST_TEST_API_KEY");
    let config = env.config_file(&format!("{grant}{}", queue_toml("jobs", "worker")));
    send_all(
        &env.queue(),
        "jobs",
        &["send-config:api:out", "send-config:token:out"],
        &[],
    )
    .await;
    let vars = [
        ("QHOST_TEST_API_KEY", ENV_VALUE),
        ("QHOST_LOG", "info,qhost=trace"),
    ];
    let host =
        tokio::task::spawn_blocking(move || HostProcess::start_consuming_in(&config, &[], &vars))
            .await
            .expect("qhost started");
    let deadline = Instant::now() + Duration::from_secs(60);
    while contents(&env.queue(), "out").await.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the plugin did not send both settings"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        bodies(&contents(&env.queue(), "out").await),
        [ENV_VALUE, FILE_VALUE],
        "the plugin read both secrets"
    );
    // What a running host shows of its plugins.
    let status =
        std::fs::read_to_string(env.data_dir().join("plugins.json")).expect("plugins.json");
    let (plugins, data) = (env.plugins_dir(), env.data_dir());
    let listed = tokio::task::spawn_blocking(move || {
        Command::new(qhost_binary())
            .arg("--plugins-dir")
            .arg(plugins)
            .arg("--data-dir")
            .arg(data)
            .args(["plugins", "list"])
            .envs(qhost_e2e::processes::qhost_env())
            .output()
            .expect("running qhost plugins list")
    })
    .await
    .expect("plugins list ran");
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains("worker") && status.contains("worker"),
        "{listed}\n{status}"
    );
    let log = host.log();
    host.stop();
    assert!(log.contains("plugin loaded"), "{log}");
    for (what, text) in [
        ("the log", &log),
        ("plugins list", &listed),
        ("plugins.json", &status),
    ] {
        for secret in [ENV_VALUE, FILE_VALUE] {
            assert!(!text.contains(secret), "{what} shows a secret: {text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_that_cannot_be_read_refuses_the_plugin_and_the_serving_version_goes_on() {
    // The host runs in this test process, whose environment cargo gives CARGO_PKG_NAME.
    let (env, _secrets, grant) = secret_env("CARGO_PKG_NAME");
    let loaded_with = std::env::var("CARGO_PKG_NAME").expect("cargo sets CARGO_PKG_NAME");
    let running = Running::start(
        env.host(env.config(&format!("{grant}{}", queue_toml("jobs", "worker"))))
            .await,
    );
    let host = running.host();
    let last_error = || {
        host.registry()
            .status()
            .into_iter()
            .find(|s| s.name == "worker")
            .and_then(|s| s.last_error)
    };

    // The manifest now names a variable that is granted but unset, then one not granted.
    for (named, reason) in [
        (
            "QHOST_TEST_SURELY_UNSET",
            "config.api: the variable QHOST_TEST_SURELY_UNSET is not set",
        ),
        (
            "AWS_SECRET_ACCESS_KEY",
            "config.api: the variable AWS_SECRET_ACCESS_KEY is not granted: the host's \
             [secrets] env does not list it",
        ),
    ] {
        let manifest =
            format!("[config]\napi = {{ env = \"{named}\" }}\n[outbox]\nqueues = [\"*\"]\n");
        // Written whole and renamed into place, as a deploy does: a manifest truncated by a
        // write in progress reads as the empty (default) manifest, a version of its own that
        // would take over with no outbox grant.
        let staged = env.plugins_dir().join(".worker.toml.tmp");
        std::fs::write(&staged, manifest).expect("a manifest");
        std::fs::rename(&staged, env.plugins_dir().join("worker.toml")).expect("in place");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !last_error().is_some_and(|e| e.contains(reason)) {
            assert!(
                Instant::now() < deadline,
                "not refused with `{reason}`: {:?}",
                last_error()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    send_all(&env.queue(), "jobs", &["send-config:api:out"], &[]).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while contents(&env.queue(), "out").await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the serving version did not run the message"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.stop().await;
    assert_eq!(
        bodies(&contents(&env.queue(), "out").await),
        [loaded_with],
        "the version loaded with the secret went on serving"
    );
}
