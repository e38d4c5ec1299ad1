//! A host in a temporary directory: plugins installed from the built fixtures, the local
//! backends in a file database there, and helpers to send, run until idle and look inside.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use qhost::sources::LocalQueue;
use qhost::stores::LocalStore;
use qhost::{Attribute, Outgoing, Received};
use qhost::{Config, Host};
use tokio_util::sync::CancellationToken;

/// Longest a test lets a host run before calling it stuck.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// A temporary plugins directory and data directory.
#[derive(Debug)]
pub struct TestEnv {
    dir: tempfile::TempDir,
    /// The compiled-code cache every test that asks for one shares, if this one does.
    shared_cache: Option<PathBuf>,
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    /// An empty environment.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir(dir.path().join("plugins")).expect("plugins directory");
        TestEnv {
            dir,
            shared_cache: None,
        }
    }

    /// An environment whose compiled-code cache is shared by every test that asks for it, so
    /// a large (interpreter) plugin is compiled once per run, not once per test. It is the
    /// cache the `qhost` processes the tests start use (`processes::qhost_env`), so a plugin
    /// one kind of test compiled the other loads. Entries are keyed by content and engine, so
    /// sharing is safe.
    pub fn with_shared_cache() -> Self {
        let shared = crate::workspace().join("target/test-cache/qhost/compiled");
        std::fs::create_dir_all(&shared).expect("shared cache directory");
        TestEnv {
            shared_cache: Some(shared),
            ..Self::new()
        }
    }

    /// The plugins directory.
    pub fn plugins_dir(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Installs a built plugin crate as `NAME.wasm` with `manifest` as `NAME.toml`.
    pub fn install(&self, name: &str, crate_name: &str, manifest: &str) {
        self.install_bytes(name, &crate::plugin_bytes(crate_name), manifest);
    }

    /// Installs arbitrary bytes as `NAME.wasm`. A manifest without an `[outbox]` grant gets
    /// one for every queue: the tests that are about grants write their own.
    pub fn install_bytes(&self, name: &str, bytes: &[u8], manifest: &str) {
        let dir = self.plugins_dir();
        let manifest = if manifest.contains("[outbox]") {
            manifest.to_string()
        } else {
            format!("{manifest}\n[outbox]\nqueues = [\"*\"]\n")
        };
        std::fs::write(dir.join(format!("{name}.wasm")), bytes).expect("writing plugin");
        std::fs::write(dir.join(format!("{name}.toml")), manifest).expect("writing manifest");
    }

    /// A configuration for this environment: its directories, retries without delay, short
    /// waits, plus `extra` TOML (queues, limits). Its compiled-code cache is its own (in the
    /// data directory), or the one tests share if it asked for that: never the user's.
    pub fn config(&self, extra: &str) -> Config {
        let mut config = Config::parse(&self.config_text(extra)).expect("test configuration");
        config.compiled_cache = Some(match &self.shared_cache {
            Some(shared) => shared.clone(),
            None => self.data_dir().join("compiled"),
        });
        config
    }

    /// The same configuration as [`TestEnv::config`], written to a file for `qhost --config`;
    /// a `qhost` the tests start with it uses the cache they share ([`crate::processes::qhost_env`]).
    pub fn config_file(&self, extra: &str) -> PathBuf {
        let path = self.dir.path().join("qhost.toml");
        std::fs::write(&path, self.config_text(extra)).expect("writing the configuration");
        path
    }

    fn config_text(&self, extra: &str) -> String {
        format!(
            "plugins-dir = {:?}\ndata-dir = {:?}\nshutdown-grace-secs = 5\n[retry]\nbase-secs = 0.01\nmax-secs = 0.05\n{}",
            self.plugins_dir(),
            self.data_dir(),
            every_queue_exists(extra)
        )
    }

    /// A host built from `config` the way `qhost run` builds it.
    pub async fn host(&self, config: Config) -> Host {
        Host::from_config(config).await.expect("host starts")
    }

    /// The local idempotency store in this environment's data directory, for inspecting keys.
    pub fn store(&self) -> LocalStore {
        LocalStore::open(Some(&qhost::testing::database_in(&self.data_dir()))).expect("local store")
    }

    /// The local queue in this environment's data directory, for sending and peeking.
    pub fn queue(&self) -> LocalQueue {
        LocalQueue::open(
            Some(&qhost::testing::database_in(&self.data_dir())),
            Default::default(),
        )
        .expect("local queue")
    }
}

/// `extra` with `[source] queues = ["*"]`: the tests' sink queues are read by the tests, not
/// by a consumer, so every name exists on the embedded queue here. The rule that only declared
/// queues exist has tests of its own, on configurations written without this.
fn every_queue_exists(extra: &str) -> String {
    const ANY: &str = "[source]\nqueues = [\"*\"]\n";
    match extra.contains("[source]\n") {
        true => extra.replacen("[source]\n", ANY, 1),
        false => format!("{extra}\n{ANY}"),
    }
}

/// Waits until `done` answers true, asking every 50 ms; fails naming `what` after `limit`. For
/// an effect that follows another asynchronously (a payload deleted after its ack), where a
/// fixed sleep would either waste time or, on a loaded machine, not be long enough.
pub async fn eventually(limit: Duration, what: &str, done: impl AsyncFn() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A queue section for `name` handled by `plugin`, polling briefly.
pub fn queue_toml(name: &str, plugin: &str) -> String {
    format!(
        "[[queue]]\nname = \"{name}\"\nplugin = \"{plugin}\"\nwait-time-secs = 0\nvisibility-timeout-secs = 5\n"
    )
}

/// As [`queue_toml`], with a one-second visibility and no heartbeat: a handler that runs
/// longer loses its lease, and its message is delivered again meanwhile. A host refuses this
/// pairing at start for a plugin that may outlive it; tests of the lapse assemble one from
/// parts.
pub fn lapsing_queue_toml(name: &str, plugin: &str) -> String {
    queue_toml(name, plugin).replace(
        "visibility-timeout-secs = 5",
        "visibility-timeout-secs = 1\nheartbeat = false",
    )
}

/// Sends bodies to `name` through any queue backend, each with `attributes`.
pub async fn send_all(
    queue: &dyn qhost::sources::QueueSource,
    name: &str,
    bodies: &[&str],
    attributes: &[Attribute],
) -> Vec<String> {
    let msgs: Vec<Outgoing> = bodies
        .iter()
        .map(|b| {
            let mut m = Outgoing::new(name, b.as_bytes());
            m.attributes = attributes.to_vec();
            m
        })
        .collect();
    queue.send(&msgs).await.expect("send")
}

/// Runs the host until its queues are empty; panics if that takes longer than `RUN_LIMIT`,
/// with what the host had done and which backend calls failed (a stall's usual cause is a
/// backend that stopped answering in time).
pub async fn run_until_idle(host: &Host) {
    let shutdown = CancellationToken::new();
    match tokio::time::timeout(RUN_LIMIT, host.run_until_idle(shutdown)).await {
        Ok(ran) => ran.expect("host ran cleanly"),
        Err(_) => panic!(
            "the host did not go idle in {RUN_LIMIT:?}: {:?}\nfailed backend calls:\n{}",
            host.stats().total(),
            failed_calls(host)
        ),
    }
}

/// The host's failed backend calls by operation and kind, as its metrics count them.
fn failed_calls(host: &Host) -> String {
    let metrics = host.metrics().encode();
    let failed: Vec<&str> = (metrics.lines())
        .filter(|l| l.starts_with("qhost_backend_call_failures") && !l.ends_with(" 0"))
        .collect();
    if failed.is_empty() {
        "none".into()
    } else {
        failed.join("\n")
    }
}

/// Every message in `queue`, in order.
pub async fn contents(queue: &LocalQueue, name: &str) -> Vec<Received> {
    queue.peek(name, 10_000).await.expect("peek")
}

/// Everything `queue` of `source` holds, received and deleted as it goes, in the order
/// received; each receive long-polls for `wait` (zero: only what is there now).
pub async fn take_all(
    source: &dyn qhost::sources::QueueSource,
    queue: &str,
    wait: Duration,
) -> Vec<Received> {
    let mut all = Vec::new();
    loop {
        let got = (source.receive(queue, 10, Duration::from_secs(60), wait))
            .await
            .expect("receive");
        if got.is_empty() {
            return all;
        }
        let receipts: Vec<String> = got.iter().map(|m| m.handle.clone()).collect();
        source.settle(queue, &receipts).await.expect("delete");
        all.extend(got);
    }
}

/// The bodies of `msgs` as text, in their order.
pub fn body_texts(msgs: &[Received]) -> Vec<String> {
    msgs.iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}

/// The text of attribute `name` on `msg`.
pub fn attr<'a>(msg: &'a Received, name: &str) -> Option<&'a str> {
    qhost::testing::find_attribute(&msg.attributes, name).and_then(|a| a.text())
}

/// A host running in the background until [`Running::stop`].
#[derive(Debug)]
pub struct Running {
    host: Arc<Host>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Starts `host.run` on its own task.
    pub fn start(host: Host) -> Self {
        let host = Arc::new(host);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let (host, shutdown) = (Arc::clone(&host), shutdown.clone());
            async move { host.run(shutdown).await }
        });
        Running {
            host,
            shutdown,
            task,
        }
    }

    /// The running host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Waits (up to `limit`) until `done` holds for the host.
    pub async fn wait_for(&self, limit: Duration, done: impl Fn(&Host) -> bool) {
        let deadline = tokio::time::Instant::now() + limit;
        while !done(&self.host) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Shuts the host down, waits for it to drain, and hands it back for inspection.
    pub async fn stop(self) -> Arc<Host> {
        self.shutdown.cancel();
        self.task
            .await
            .expect("host task")
            .expect("host ran cleanly");
        self.host
    }
}

/// Checks the `counts` bucket of the plugin `counter` in the store of the host configured by
/// `config`, after `jobs` jobs each added one to `total` and one to `dN`, N its number modulo
/// `spread`: each counter exact, whatever ran twice.
pub async fn counters_exact(config: &Path, jobs: usize, spread: usize) {
    let config = qhost::Config::load(Some(config), qhost::Overrides::default()).expect("config");
    let get = async |key: &str| {
        let value = (qhost::kv_get(&config, "counter", "counts", key).await).expect("the store");
        value.map(|v| String::from_utf8_lossy(&v).into_owned())
    };
    assert_eq!(get("total").await, Some(jobs.to_string()), "total");
    for d in 0..spread {
        let key = format!("d{d}");
        assert_eq!(get(&key).await, Some((jobs / spread).to_string()), "{key}");
    }
}
