//! Helpers for qhost's end-to-end tests: plugins built from source, hosts in temporary
//! directories, and a queue wrapper that injects faults.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

// Every test and bench binary allocates as the qhost command does: linking the command's crate
// brings its global allocator (mimalloc, its default feature) into hosts run in-process too.
#[cfg(feature = "mimalloc")]
extern crate qhost_cli;

pub mod admin;
pub mod api_server;
pub mod browser;
pub mod cpu;
pub mod deploy;
pub mod fault_proxy;
pub mod faults;
pub mod flow_fleet;
pub mod flow_use;
pub mod harness;
pub mod nats;
pub mod otlp;
pub mod postgres;
pub mod proc_tree;
pub mod processes;
pub mod rabbitmq;
pub mod redis_cluster;
pub mod redis_server;
pub mod redis_tls;
pub mod sqs_responder;
pub mod sqs_server;
pub mod storm;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether the run built every plugin before its tests started, as `scripts/test` does and
/// says (`QHOST_E2E_PREPARED`): then a test process does not run cargo and the build script
/// only to find them up to date, which costs each of the run's two hundred processes (one per
/// test, under cargo-nextest) most of a second.
fn prepared() -> bool {
    std::env::var_os("QHOST_E2E_PREPARED").is_some()
}

/// Builds the Rust plugins for wasm32-wasip2 (once per test process) and returns the directory
/// holding `email_reminder.wasm`, `email_sender.wasm`, `fixture.wasm`, `wrong_world.wasm` and
/// `next_wit.wasm` and `prev_wit.wasm`.
pub fn built_plugins() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = workspace();
        let target = root.join("target/wasm");
        if prepared() {
            return target.join("wasm32-wasip2/wasm");
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(&root)
            .args([
                "build",
                "--profile",
                "wasm",
                "--target",
                "wasm32-wasip2",
                "--target-dir",
            ])
            .arg(&target)
            .args([
                "-p",
                "email-reminder",
                "-p",
                "email-sender",
                "-p",
                "fixture",
                "-p",
                "order-tally",
                "-p",
                "batch-fixture",
                "-p",
                "ack",
            ])
            .args(["-p", "wrong-world"])
            .args(["-p", "next-wit", "-p", "prev-wit"])
            .status()
            .expect("running cargo to build the plugins");
        assert!(
            status.success(),
            "building the plugins failed (is the wasm32-wasip2 target installed?)"
        );
        target.join("wasm32-wasip2/wasm")
    })
}

/// Builds the Python and JavaScript example plugins from source (once per test process, with
/// `scripts/build-guest-plugins`, which installs the pinned toolchains if missing) and returns
/// the directory holding `email-reminder-py.wasm` and `email-reminder-js.wasm`.
pub fn built_guests() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = workspace();
        let out = root.join("target/wasm/guests");
        if prepared() {
            return out;
        }
        let status = Command::new(root.join("scripts/build-guest-plugins"))
            .arg(&out)
            .status()
            .expect("running scripts/build-guest-plugins");
        assert!(
            status.success(),
            "building the Python and JavaScript plugins failed"
        );
        out
    })
}

/// The bytes of a built Python or JavaScript plugin (`email-reminder-py`, `email-reminder-js`).
pub fn guest_bytes(name: &str) -> Vec<u8> {
    let file = built_guests().join(format!("{name}.wasm"));
    std::fs::read(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

/// The manifest of a built Python or JavaScript plugin.
pub fn guest_manifest(name: &str) -> String {
    let file = built_guests().join(format!("{name}.toml"));
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

/// The bytes of a built plugin (`fixture`, `email-reminder`, `wrong-world`).
pub fn plugin_bytes(crate_name: &str) -> Vec<u8> {
    let file = built_plugins().join(format!("{}.wasm", crate_name.replace('-', "_")));
    std::fs::read(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

/// The fixture plugin, installed as `NAME.wasm` in a temporary directory and loaded by an engine
/// sized for `config`, as the host would load it.
pub fn fixture_plugin(name: &str, config: &qhost::Config) -> qhost::plugins::Plugin {
    fixture_plugin_with(name, config, "")
}

/// The fixture as plugin `name`, its bytes changed by `tag` (the same behaviour, another
/// version), loaded by an engine sized for `config`.
pub fn fixture_variant(name: &str, config: &qhost::Config, tag: &str) -> qhost::plugins::Plugin {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join(format!("{name}.wasm"));
    let bytes = deploy::build_variant(&plugin_bytes("fixture"), tag);
    std::fs::write(&path, bytes).expect("installing the variant");
    let config = qhost::Config {
        compiled_cache: None,
        ..config.clone()
    };
    let runtime = qhost::runtime_for(&config).expect("engine");
    qhost::plugins::load_plugin(&runtime, &path).expect("loading the variant")
}

/// As [`fixture_plugin`], with `manifest` (a plugin manifest's TOML) beside it.
pub fn fixture_plugin_with(
    name: &str,
    config: &qhost::Config,
    manifest: &str,
) -> qhost::plugins::Plugin {
    built_plugin_as("fixture", name, config, manifest)
}

/// The built plugin crate `crate_name` as plugin `name` with `manifest` beside it (none when
/// empty), loaded by an engine sized for `config`.
pub fn built_plugin_as(
    crate_name: &str,
    name: &str,
    config: &qhost::Config,
    manifest: &str,
) -> qhost::plugins::Plugin {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join(format!("{name}.wasm"));
    std::fs::write(&path, plugin_bytes(crate_name)).expect("installing the plugin");
    if !manifest.is_empty() {
        std::fs::write(path.with_extension("toml"), manifest).expect("writing the manifest");
    }
    // Compiled afresh every time: no cache directory left behind.
    let config = qhost::Config {
        compiled_cache: None,
        ..config.clone()
    };
    let runtime = qhost::runtime_for(&config).expect("engine");
    qhost::plugins::load_plugin(&runtime, &path).expect("loading the plugin")
}

/// Runs `host` until its queues are empty, checks that each of its `n` messages ran and was
/// acked once, and returns messages per second.
pub async fn timed_run(host: &qhost::Host, n: usize) -> f64 {
    let started = std::time::Instant::now();
    host.run_until_idle(tokio_util::sync::CancellationToken::new())
        .await
        .expect("run");
    let secs = started.elapsed().as_secs_f64();
    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked), (n as u64, n as u64), "each once");
    n as f64 / secs
}

/// Messages a benchmark runs: `QHOST_BENCH_MESSAGES`, or `default`.
pub fn bench_messages(default: usize) -> usize {
    std::env::var("QHOST_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The sha256 of `bytes` as lowercase hex, as qhost writes digests.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Runs the tools' Python (the virtual environment `scripts/install-test-tools` makes, with
/// `tests/support` on its path) with `args`; its stdout. It must exit 0.
pub fn python(args: &[&str]) -> Vec<u8> {
    let root = crate::workspace();
    let out = std::process::Command::new(root.join("target/tools/moto/bin/python"))
        .current_dir(&root)
        .args(args)
        .env("PYTHONPATH", root.join("tests/support"))
        .output()
        .expect("running Python");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python {args:?}: {stderr}");
    out.stdout
}
