//! How closely `timeout-ms` holds: a fixture plugin with a 200 ms deadline is given a guest that
//! sleeps in a WASI call for a minute, one that polls a 1 ms timer forever, and one that spins in
//! guest code, first one at a time and then 16 at once on the runtime's threads; the bench prints
//! how far past the deadline each call ended (the failure must be the timeout every time).
//!
//! `cargo bench -p qhost-e2e --bench deadline`.

use std::time::{Duration, Instant};

use qhost::Config;
use qhost::handlers::{Failure, HandlerMessage};
use qhost::plugins::Plugin;

const TIMEOUT: Duration = Duration::from_millis(200);

fn load() -> Plugin {
    let config = Config::default();
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("fixture.wasm");
    std::fs::write(&path, qhost_e2e::plugin_bytes("fixture")).expect("plugin");
    let manifest = format!("[limits]\ntimeout-ms = {}\n", TIMEOUT.as_millis());
    std::fs::write(path.with_extension("toml"), manifest).expect("manifest");
    let runtime = qhost::runtime_for(&config).expect("engine");
    qhost::plugins::load_plugin(&runtime, &path).expect("loads")
}

fn message(body: &str, i: usize) -> HandlerMessage {
    HandlerMessage {
        id: format!("m{i}"),
        idempotency_key: format!("k{i}"),
        fencing_token: 1,
        queue: "jobs".into(),
        body: body.as_bytes().to_vec(),
        attributes: Vec::new(),
        receive_count: 1,
        sent_at_ms: 0,
        group_id: None,
        time_limit: None,
    }
}

/// How far past the deadline one call ended.
async fn overshoot(plugin: Plugin, body: &'static str, i: usize) -> Duration {
    let started = Instant::now();
    let result = plugin.invoke(message(body, i)).await;
    let elapsed = started.elapsed();
    assert!(
        matches!(result, Err(Failure::Timeout(t)) if t == TIMEOUT),
        "{body}: {result:?}"
    );
    elapsed.saturating_sub(TIMEOUT)
}

/// Mean and largest overshoot of `runs` calls, `at_once` of them at a time.
async fn measure(plugin: &Plugin, body: &'static str, runs: usize, at_once: usize) -> (f64, f64) {
    let mut all = Vec::new();
    for round in 0..runs / at_once {
        let calls: Vec<_> = (0..at_once)
            .map(|i| tokio::spawn(overshoot(plugin.clone(), body, round * at_once + i)))
            .collect();
        for call in calls {
            all.push(call.await.expect("call").as_secs_f64() * 1e3);
        }
    }
    let mean = all.iter().sum::<f64>() / all.len() as f64;
    (mean, all.iter().copied().fold(0.0, f64::max))
}

#[tokio::main]
async fn main() {
    qhost_e2e::built_plugins(); // build before printing, so cargo's output stays out of the table
    let plugin = load();
    println!(
        "overshoot past a {} ms timeout-ms, ms (mean / max)",
        TIMEOUT.as_millis()
    );
    println!(
        "{:<34} {:>16} {:>16}",
        "guest", "one at a time", "16 at once"
    );
    for (label, body) in [
        ("sleeps a minute (WASI sleep)", "sleep:60000"),
        ("polls a 1 ms timer forever", "poll"),
        ("spins in guest code", "loop"),
    ] {
        let (one_mean, one_max) = measure(&plugin, body, 10, 1).await;
        let (many_mean, many_max) = measure(&plugin, body, 32, 16).await;
        println!(
            "{label:<34} {:>16} {:>16}",
            format!("{one_mean:.1} / {one_max:.1}"),
            format!("{many_mean:.1} / {many_max:.1}")
        );
    }
}
