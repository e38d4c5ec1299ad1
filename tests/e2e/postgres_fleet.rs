//! The fleet's features on PostgreSQL alone: two `qhost run` processes on pgmq's queues and the
//! PostgreSQL store, one's clock 2.5 s ahead of the database's and the other's 2.5 s behind. A
//! schedule fires each tick once and none early (on the store's clock: PostgreSQL's), each
//! host's metrics show its skew, `qhost fleet` and the console's fleet show both hosts, a queue
//! paused from the command line stops both until it is resumed, and the handler's state in the
//! database is exact (read as `qhost kv` reads it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qhost_e2e::harness::{TestEnv, counters_exact};
use qhost_e2e::postgres::Database;
use qhost_e2e::processes::{HostProcess, run_with_config};

use super::postgres::{count, done, host_config, produce};

const JOBS: usize = 400;
const SKEW_MS: i64 = 2_500;

/// `qhost --config CONFIG ARGS`, which must succeed: its stdout.
fn qhost_ok(config: &Path, args: &[&str]) -> String {
    let (ok, out, err) = run_with_config(config, args);
    assert!(ok, "qhost {args:?}: {out}{err}");
    out
}

/// Host `name` of the fleet, with an every-second schedule sending to `ticks`.
fn fleet_config(env: &TestEnv, db: &Database, name: &str) -> PathBuf {
    let path = host_config(env, db, name, false);
    let schedule = "\n[[schedule]]\nname = \"beat\"\ncron = \"* * * * * *\"\nqueue = \"ticks\"\n\
                    body = \"tick\"\ncatch-up-secs = 60\n";
    let text = std::fs::read_to_string(&path).expect("the config") + schedule;
    std::fs::write(&path, text).expect("the config");
    path
}

/// Each tick on `ticks` (its `qhost-tick` header) with how many times it was sent, and how
/// far before its time each message was sent (ms; negative: after).
async fn ticks(db: &tokio_postgres::Client) -> (BTreeMap<String, usize>, Vec<i64>) {
    let rows = db
        .query(
            "SELECT headers->>'qhost-tick',
                    (extract(epoch FROM enqueued_at) * 1000)::bigint FROM pgmq.q_ticks",
            &[],
        )
        .await
        .expect("read the ticks");
    let (mut seen, mut early) = (BTreeMap::new(), Vec::new());
    for row in rows {
        let (tick, at_ms): (String, i64) = (row.get(0), row.get(1));
        let due: jiff::Timestamp = tick.parse().expect("a tick's time");
        early.push(due.as_millisecond() - at_ms);
        *seen.entry(tick).or_insert(0) += 1;
    }
    (seen, early)
}

/// The host's `qhost_schedule_clock_skew_seconds`.
fn skew(host: &HostProcess) -> f64 {
    let (_, metrics) = qhost_e2e::admin::get(host.admin_addr(), "/metrics");
    (metrics.lines())
        .find_map(|l| l.strip_prefix("qhost_schedule_clock_skew_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no skew metric:\n{metrics}"))
}

/// Waits until `ready` holds, for at most `limit`.
async fn until(limit: Duration, what: &str, mut ready: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !ready().await {
        assert!(started.elapsed() < limit, "{what}, after {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn skewed_hosts_on_postgres_alone_fire_each_tick_once_and_pause_as_one_fleet() {
    let db = Database::new("pg_fleet").await;
    let env = TestEnv::new();
    env.install(
        "counter",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n[capabilities]\nkeyvalue = [\"counts\"]\n",
    );
    // pgmq and the schedule's queue, made before the hosts start.
    db.pgmq("ticks").await;
    let (a, b) = (fleet_config(&env, &db, "a"), fleet_config(&env, &db, "b"));
    let start = |config: &Path, ms: i64| {
        let offset = ms.to_string();
        HostProcess::start_consuming_in(config, &[], &[("QHOST_TEST_CLOCK_OFFSET_MS", &offset)])
    };
    let (ahead, behind) = (start(&a, SKEW_MS), start(&b, -SKEW_MS));
    let client = db.client().await;
    let mut sent = produce(&db, 0..JOBS / 2);

    // One fleet: each host sees both, on the store's records.
    let both = async || qhost_ok(&a, &["fleet"]).matches(" live ").count() == 2;
    until(Duration::from_secs(30), "qhost fleet shows two hosts", both).await;
    let (_, page) = qhost_e2e::admin::get(behind.admin_addr(), "/api/fleet");
    let fleet: serde_json::Value = serde_json::from_str(&page).expect("JSON");
    assert_eq!(fleet["hosts"].as_array().map(Vec::len), Some(2), "{page}");
    for (host, ms) in [(&ahead, SKEW_MS), (&behind, -SKEW_MS)] {
        let seen = skew(host);
        assert!(
            (seen - ms as f64 / 1000.0).abs() < 0.5,
            "skew {seen} s, clock {ms} ms"
        );
    }

    // Paused from the command line: neither host receives the queue until it is resumed.
    let jobs = "SELECT count(*) FROM pgmq.q_jobs";
    let drained = async || done(&client).await == JOBS / 2 && count(&client, jobs).await == 0;
    until(Duration::from_secs(120), "the first jobs run", drained).await;
    qhost_ok(&a, &["fleet", "pause", "jobs"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    sent += produce(&db, JOBS / 2..JOBS);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = count(&client, jobs).await as usize;
    assert_eq!(
        waiting,
        sent - JOBS / 2 - JOBS / 20,
        "paused: nothing received"
    );
    qhost_ok(&b, &["fleet", "resume", "jobs"]);
    let drained = async || done(&client).await == JOBS;
    until(
        Duration::from_secs(120),
        "the rest of the jobs run",
        drained,
    )
    .await;

    let ten = async || count(&client, "SELECT count(*) FROM pgmq.q_ticks").await >= 10;
    until(Duration::from_secs(30), "ten ticks sent", ten).await;
    let (_, log_a) = ahead.stop_with_log();
    let (_, log_b) = behind.stop_with_log();
    let (seen, early) = ticks(&client).await;
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "ticks sent more than once: {twice:?}");
    let first = seen.keys().next().expect("some tick").clone();
    let last = seen.keys().last().expect("some tick").clone();
    let span = last.parse::<jiff::Timestamp>().expect("a tick").as_second()
        - first
            .parse::<jiff::Timestamp>()
            .expect("a tick")
            .as_second();
    assert_eq!(
        span as usize + 1,
        seen.len(),
        "every tick from {first} to {last}:\n{log_a}\n{log_b}"
    );
    assert!(seen.len() >= 10, "{} ticks", seen.len());
    let worst = early.iter().max().copied().unwrap_or(0);
    assert!(worst <= 1_000, "a tick sent {worst} ms before its time");
    counters_exact(&a, JOBS, 4).await;
    let sink = count(&client, "SELECT count(*) FROM pgmq.q_sink").await as usize;
    assert_eq!(sink, JOBS, "one effect per job");
    println!(
        "postgres fleet: clocks {SKEW_MS} ms ahead and behind, {} ticks each once, at most {worst} ms early; {JOBS} jobs, paused and resumed",
        seen.len()
    );
    drop(client);
    drop(db);
}
