//! Hot reload and start-up, measured:
//!
//! - restart-to-ready for the Rust `email-reminder` plugin (`Host::from_config` returning with
//!   the plugin loaded and the backends open): without the compiled-code cache, with a cold
//!   cache (compile and store), and with a warm one, in one run, as medians and ratios;
//! - rename-to-served: a steady stream of messages flows while a new build of the plugin is
//!   renamed into the plugins directory; the time from the rename to the first invocation of
//!   the new version, for several swaps, beside the time compiling that build takes alone;
//! - an interpreter plugin's compile: a Python and a JavaScript component compiled with no
//!   cache, into an empty cache (the compiled functions stored under it), and then a second
//!   component of the same language into that cache (a rebuilt plugin, or another one on the
//!   same interpreter), which finds the interpreter's functions there.
//!
//! `cargo bench -p qhost-e2e --bench reload`

use std::time::{Duration, Instant};

use qhost::plugins::plugin_version as version_of;
use qhost::{Config, Host};
use qhost_e2e::deploy;
use qhost_e2e::harness::{Running, TestEnv, queue_toml, send_all};

const STARTS: usize = 7;
const SWAPS: usize = 8;

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn time_start(config: &Config) -> Duration {
    let started = Instant::now();
    let host = Host::from_config(config.clone())
        .await
        .expect("host starts");
    let elapsed = started.elapsed();
    drop(host);
    elapsed
}

async fn restart_to_ready() {
    let env = TestEnv::new();
    env.install("email-reminder", "email-reminder", "");
    let config = env.config(&queue_toml("reminders", "email-reminder"));
    let uncached = Config {
        compiled_cache: None,
        ..config.clone()
    };
    let mut without = Vec::new();
    for _ in 0..STARTS {
        without.push(time_start(&uncached).await);
    }
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..STARTS {
        let cache = config.compiled_cache.clone().expect("cache on by default");
        let _ = std::fs::remove_dir_all(&cache);
        cold.push(time_start(&config).await);
        warm.push(time_start(&config).await);
    }
    let base = median(without.clone());
    println!(
        "restart-to-ready, email-reminder ({} KiB), median of {STARTS}:",
        qhost_e2e::plugin_bytes("email-reminder").len() / 1024
    );
    for (label, runs) in [
        ("no cache (compile)", without),
        ("cold cache (compile + store)", cold),
        ("warm cache (load only)", warm),
    ] {
        let m = median(runs);
        println!(
            "  {label:<30} {:>8.1} ms  {:>6.2}x of no-cache",
            ms(m),
            m.as_secs_f64() / base.as_secs_f64()
        );
    }
}

/// Sends a message every few milliseconds until `stop`.
async fn stream(env_queue: qhost::sources::LocalQueue, stop: tokio_util::sync::CancellationToken) {
    let mut i = 0u64;
    while !stop.is_cancelled() {
        send_all(&env_queue, "jobs", &[&format!("ack {i}")], &[]).await;
        i += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn rename_to_served() {
    let env = TestEnv::new();
    let v1 = qhost_e2e::plugin_bytes("fixture");
    env.install_bytes("worker", &v1, "");
    let running = Running::start(env.host(env.config(&queue_toml("jobs", "worker"))).await);
    let stop = tokio_util::sync::CancellationToken::new();
    let producer = tokio::spawn(stream(env.queue(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let target = env.plugins_dir().join("worker.wasm");
    let mut latencies = Vec::new();
    for n in 0..SWAPS {
        let build = deploy::build_variant(&v1, &format!("bench-{n}"));
        let version = version_of(&build);
        let renamed = Instant::now();
        deploy::by_rename(&target, &build);
        loop {
            let served = running
                .host()
                .stats()
                .invocations_by_version("worker")
                .contains_key(&version);
            if served {
                break;
            }
            assert!(
                renamed.elapsed() < Duration::from_secs(30),
                "swap {n} never served"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        latencies.push(renamed.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.cancel();
    producer.await.expect("producer");
    let host = running.stop().await;
    let c = host.stats().total();
    assert_eq!(c.failures + c.dead_lettered, 0, "{c:?}");

    // The same builds compiled alone, without the cache: the floor under a reload.
    let runtime = qhost::runtime_for(&Config {
        compiled_cache: None,
        ..env.config("")
    })
    .expect("engine");
    let mut compiles = Vec::new();
    for n in 0..SWAPS {
        let build = deploy::build_variant(&v1, &format!("bench-{n}"));
        let started = Instant::now();
        qhost::testing::compile(&runtime, &build).expect("compiles");
        compiles.push(started.elapsed());
    }
    let (served, compile) = (median(latencies.clone()), median(compiles));
    let worst = latencies.iter().max().copied().unwrap_or_default();
    println!(
        "rename-to-served, fixture plugin ({} KiB), {SWAPS} swaps under a steady stream ({} messages handled):",
        v1.len() / 1024,
        c.acked
    );
    println!(
        "  median {:>8.1} ms   worst {:>8.1} ms",
        ms(served),
        ms(worst)
    );
    println!(
        "  of which: debounce {:.0} ms, compiling the build alone {:.1} ms (median); the rest is sync, swap and the next poll",
        ms(qhost::testing::WATCH_DEBOUNCE),
        ms(compile)
    );
}

/// Compiling `file` (a built guest) on `config`'s engine and cache, timed.
fn time_compile(config: &Config, file: &str) -> Duration {
    let bytes = std::fs::read(qhost_e2e::built_guests().join(file)).expect("a built guest");
    let runtime = qhost::runtime_for(config).expect("an engine");
    let started = Instant::now();
    qhost::testing::compile(&runtime, &bytes).expect("compiles");
    started.elapsed()
}

fn interpreter_builds() {
    const REPS: usize = 3;
    let env = TestEnv::new();
    let config = env.config(&queue_toml("jobs", "none"));
    println!(
        "an interpreter plugin's compile, median of {REPS} (wall; Cranelift uses every core):"
    );
    for (language, first, second) in [
        ("Python", "email-reminder-py.wasm", "email-sender-py.wasm"),
        (
            "JavaScript",
            "email-reminder-js.wasm",
            "email-sender-js.wasm",
        ),
    ] {
        let (mut none, mut cold, mut warm) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPS {
            let cache = tempfile::tempdir().expect("a cache directory");
            let cached = Config {
                compiled_cache: Some(cache.path().join("compiled")),
                ..config.clone()
            };
            let uncached = Config {
                compiled_cache: None,
                ..config.clone()
            };
            none.push(time_compile(&uncached, first));
            cold.push(time_compile(&cached, first));
            warm.push(time_compile(&cached, second));
        }
        let base = median(none);
        let ratio = |d: Duration| d.as_secs_f64() / base.as_secs_f64();
        let (cold, warm) = (median(cold), median(warm));
        println!("  {language}: no cache {:.0} ms", ms(base));
        println!(
            "  {language}: into an empty cache {:.0} ms ({:.2}x)",
            ms(cold),
            ratio(cold)
        );
        println!(
            "  {language}: another component, the interpreter's functions cached {:.0} ms ({:.2}x)",
            ms(warm),
            ratio(warm)
        );
    }
}

#[tokio::main]
async fn main() {
    restart_to_ready().await;
    rename_to_served().await;
    interpreter_builds();
}
