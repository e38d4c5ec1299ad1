//! Per-message cost of the `email-reminder` handler in Rust, Python and JavaScript, in one run,
//! after the smallest Rust handler (`plugins/ack`: acks, imports only what the guest SDK and the
//! standard library need), whose figures are the sandbox's own cost with no handler work:
//! instantiate + call, timed directly on the invoker and split into its stages (instantiation,
//! the guest's call, dropping the instance, which resets its pool slot, and the host's other
//! work around them), and messages/second through the whole
//! pipeline on the in-memory local queue; with a fresh instance per message, and for the
//! interpreter guests also with an instance reused for up to 100 messages.
//!
//! `cargo bench -p qhost-e2e --bench languages` (QHOST_BENCH_MESSAGES overrides the 1,000;
//! `QHOST_BENCH_ONLY=ROW` times one row's invocations alone, all N of them, without the
//! pipeline, for `perf record`: ROW is `ack`, `rust`, `python`, `python-reuse`, `js` or
//! `js-reuse`).

use std::sync::Arc;
use std::time::Instant;

use qhost::Outgoing;
use qhost::handlers::{HandlerMessage, Outcome};
use qhost::plugins::Plugin;
use qhost::plugins::Registry;
use qhost::sources::LocalQueue;
use qhost::sources::QueueSource;
use qhost::stores::LocalStore;
use qhost::{Config, Host};

const QUEUE: &str = "reminders";

fn config() -> Config {
    let mut c = Config::parse(&format!(
        "max-in-flight = 32\n[[queue]]\nname = \"{QUEUE}\"\nplugin = \"email-reminder\"\nwait-time-secs = 0\n"
    ))
    .expect("bench config");
    c.data_dir = None;
    c.compiled_cache = Some(qhost_e2e::workspace().join("target/test-compiled-cache"));
    c
}

fn reminder(i: usize) -> Vec<u8> {
    format!(
        r#"{{"reminder-id":"r{i}","email":"u{i}@example.com","customer":"C","month":"2026-12"}}"#
    )
    .into_bytes()
}

fn load(bytes: &[u8], manifest: &str, config: &Config) -> Plugin {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("email-reminder.wasm");
    std::fs::write(&path, bytes).expect("plugin");
    std::fs::write(path.with_extension("toml"), manifest).expect("manifest");
    let runtime = qhost::runtime_for(config).expect("engine");
    qhost::plugins::load_plugin(&runtime, &path).expect("loads")
}

/// Mean microseconds per direct invocation, over `n`: in all, instantiating, in the call.
struct PerMessage {
    total: f64,
    instantiate: f64,
    call: f64,
    drop: f64,
}

/// Mean microseconds per direct invocation (fresh instance + call), over `n`; each call acks
/// and sends `sends` outbox messages.
async fn per_message(plugin: &Plugin, n: usize, sends: usize) -> PerMessage {
    let before = plugin.costs().expect("a wasm plugin counts its costs");
    let started = Instant::now();
    for i in 0..n {
        let msg = HandlerMessage {
            id: format!("m{i}"),
            idempotency_key: format!("r{i}"),
            fencing_token: 1,
            queue: QUEUE.into(),
            body: reminder(i),
            attributes: Vec::new(),
            receive_count: 1,
            sent_at_ms: 0,
            group_id: None,
            time_limit: None,
        };
        let out = plugin.invoke(msg).await.expect("handled");
        assert_eq!(out.outcome, Outcome::Ack);
        assert_eq!(out.outbox.len(), sends);
    }
    let total = started.elapsed().as_secs_f64() * 1e6 / n as f64;
    let after = plugin.costs().expect("a wasm plugin counts its costs");
    let micros = |d: std::time::Duration| d.as_secs_f64() * 1e6 / n as f64;
    PerMessage {
        total,
        instantiate: micros(after.instantiate - before.instantiate),
        call: micros(after.call - before.call),
        drop: micros(after.drop - before.drop),
    }
}

/// Messages per second through the pipeline.
async fn pipeline(plugin: Plugin, config: Config, n: usize) -> f64 {
    let source = Arc::new(LocalQueue::open(None, Default::default()).expect("queue"));
    for start in (0..n).step_by(500) {
        let batch: Vec<Outgoing> = (start..(start + 500).min(n))
            .map(|i| Outgoing::new(QUEUE, reminder(i)))
            .collect();
        source.send(&batch).await.expect("fill");
    }
    let store = Arc::new(LocalStore::open(None).expect("store"));
    let host = Host::new(config, source, store, Registry::new([plugin]));
    qhost_e2e::timed_run(&host, n).await
}

/// Where a row's component comes from: a Rust plugin crate, or a built Python or JavaScript
/// guest (built only when a row needs it).
#[derive(Clone, Copy)]
enum Source {
    Rust(&'static str),
    Guest(&'static str),
}

impl Source {
    /// The component's bytes and its manifest (empty for none).
    fn load(self) -> (Vec<u8>, String) {
        match self {
            Source::Rust(name) => {
                let file = qhost_e2e::workspace().join(format!("plugins/{name}/qhost.toml"));
                let manifest = match file.exists() {
                    true => std::fs::read_to_string(&file).expect("the plugin's manifest"),
                    false => String::new(),
                };
                (qhost_e2e::plugin_bytes(name), manifest)
            }
            Source::Guest(name) => (
                qhost_e2e::guest_bytes(name),
                qhost_e2e::guest_manifest(name),
            ),
        }
    }
}

#[tokio::main]
async fn main() {
    let n = qhost_e2e::bench_messages(1000);
    let config = config();
    let py = Source::Guest("email-reminder-py");
    let js = Source::Guest("email-reminder-js");
    let reminder = "email-reminder";
    // Row (for QHOST_BENCH_ONLY), language, handler, instance, component, outbox messages each
    // call sends.
    let builds = [
        ("ack", "Rust", "ack", "fresh", Source::Rust("ack"), 0),
        ("rust", "Rust", reminder, "fresh", Source::Rust(reminder), 1),
        ("python", "Python", reminder, "fresh", py, 1),
        ("python-reuse", "Python", reminder, "reuse 100", py, 1),
        ("js", "JavaScript", reminder, "fresh", js, 1),
        ("js-reuse", "JavaScript", reminder, "reuse 100", js, 1),
    ];
    let only = std::env::var("QHOST_BENCH_ONLY").ok();
    let mut rows = Vec::new();
    for (row, language, handler, mode, source, sends) in builds {
        if only.as_ref().is_some_and(|only| only != row) {
            continue;
        }
        let (bytes, mut manifest) = source.load();
        if mode == "reuse 100" {
            manifest = manifest.replace("[limits]", "[limits]\nreuse-instance = 100");
        }
        let plugin = load(&bytes, &manifest, &config);
        per_message(&plugin, 20, sends).await; // warm up
        if only.is_some() {
            // All n on the invoker, none through the pipeline: what a profile should see.
            let cost = per_message(&plugin, n, sends).await;
            rows.push((language, handler, mode, bytes.len() / 1024, cost, f64::NAN));
            continue;
        }
        let cost = per_message(&plugin, n.min(500), sends).await;
        let rate = pipeline(plugin, config.clone(), n).await;
        rows.push((language, handler, mode, bytes.len() / 1024, cost, rate));
    }
    // Rates are compared with the Rust email-reminder's.
    let base = (rows.iter())
        .find(|r| r.0 == "Rust" && r.1 == "email-reminder")
        .map_or(f64::NAN, |r| r.5);
    println!("{n} messages each, max-in-flight 32");
    println!(
        "{:<12} {:<15} {:<10} {:>9} {:>11} {:>12} {:>6} {:>6} {:>6} {:>10} {:>8}",
        "", "", "", "", "µs/message", "instantiate", "call", "drop", "other", "pipeline", ""
    );
    println!(
        "{:<12} {:<15} {:<10} {:>9} {:>11} {:>12} {:>6} {:>6} {:>6} {:>10} {:>8}",
        "language", "handler", "instance", "size KiB", "in all", "", "", "", "", "msg/s", "vs Rust"
    );
    for (language, handler, mode, size, cost, rate) in rows {
        println!(
            "{language:<12} {handler:<15} {mode:<10} {size:>9} {:>11.1} {:>12.1} {:>6.1} {:>6.1} {:>6.1} {rate:>10.0} {:>8.2}",
            cost.total,
            cost.instantiate,
            cost.call,
            cost.drop,
            cost.total - cost.instantiate - cost.call - cost.drop,
            rate / base
        );
    }
}
