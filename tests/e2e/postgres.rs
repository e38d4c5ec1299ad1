//! PostgreSQL alone: pgmq's queues as the source and the PostgreSQL store, nothing else
//! running (no Redis, no SQS server). Two `qhost run` processes on one pgmq queue, jobs with
//! duplicates sent by pgmq's own Python client, hosts SIGKILLed five times mid-run: every job's
//! effect reaches the sink, no job is dead-lettered, the queue ends empty, and every state
//! counter is exact.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use qhost_e2e::harness::{TestEnv, counters_exact};
use qhost_e2e::postgres::{Database, pgmq_source_table, store_table};
use qhost_e2e::processes::HostProcess;

const JOBS: usize = 3_000;
/// The counters each job adds to besides `total`: `d0` to `d3`, by job number.
const SPREAD: usize = 4;
const KILLS: usize = 5;

fn host_config(env: &TestEnv, db: &Database, name: &str) -> PathBuf {
    let text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\nmax-in-flight = 8\nshutdown-grace-secs = 5\n\
         {}{}[retry]\nbase-secs = 0.05\nmax-secs = 1\n\
         [[queue]]\nname = \"jobs\"\nplugin = \"counter\"\nwait-time-secs = 1\n\
         visibility-timeout-secs = 3\n",
        env.plugins_dir(),
        env.data_dir().join(name),
        pgmq_source_table(&db.url()),
        store_table("qhost").replace(&qhost_e2e::postgres::url(), &db.url()),
    );
    let path = (env.plugins_dir().parent())
        .expect("the test directory")
        .join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("config file");
    path
}

/// Sends jobs `range` with pgmq's Python client: how many messages went.
fn produce(db: &Database, range: std::ops::Range<usize>) -> usize {
    let (start, end) = (range.start.to_string(), range.end.to_string());
    let url = db.url();
    let args = [
        "tests/support/pgmq_producer.py",
        &url,
        "jobs",
        "sink",
        &start,
        &end,
    ];
    let out = qhost_e2e::python(&args);
    String::from_utf8_lossy(&out)
        .trim()
        .parse()
        .expect("the count sent")
}

/// `sql`'s one number.
async fn count(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.expect(sql).get(0)
}

/// The jobs whose effect reached the sink: distinct idempotency keys there.
async fn done(db: &tokio_postgres::Client) -> usize {
    let sql = "SELECT count(DISTINCT headers->>'qhost-idempotency-key') FROM pgmq.q_sink";
    count(db, sql).await as usize
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_alone_runs_each_job_once_through_killed_hosts() {
    let db = Database::new("pg_only").await;
    let env = TestEnv::new();
    env.install(
        "counter",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n[capabilities]\nkeyvalue = [\"counts\"]\n",
    );
    let configs: Vec<PathBuf> = (0..2)
        .map(|i| host_config(&env, &db, &format!("host-{i}")))
        .collect();
    let mut hosts: Vec<HostProcess> = configs
        .iter()
        .map(|c| HostProcess::start_consuming(c))
        .collect();
    let client = db.client().await;
    let third = JOBS / 3;
    let mut sent = produce(&db, 0..third);
    let (mut kills, started) = (0, Instant::now());
    loop {
        let finished = done(&client).await;
        if kills < KILLS && finished >= JOBS * (kills + 1) / (KILLS + 1) {
            // Restarted without waiting for it: the other host goes on meanwhile.
            let victim = kills % 2;
            hosts.remove(victim).kill();
            hosts.insert(victim, HostProcess::start(&configs[victim]));
            kills += 1;
            if kills <= 2 {
                let next = third * kills..if kills == 2 { JOBS } else { third * 2 };
                sent += produce(&db, next);
            }
        }
        let waiting = count(&client, "SELECT count(*) FROM pgmq.q_jobs").await;
        if finished == JOBS && waiting == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{finished} of {JOBS} jobs done, {waiting} messages left, after {kills} kills"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for host in hosts {
        host.stop();
    }
    assert_eq!(kills, KILLS, "the kills happened mid-run");
    assert_eq!(sent, JOBS + JOBS / 10, "with a copy of every tenth job");
    assert_eq!(
        count(&client, "SELECT count(*) FROM pgmq.\"q_jobs-dlq\"").await,
        0,
        "no dead letter"
    );
    let completed = "SELECT count(*) FROM qhost.leases WHERE state = 'completed'";
    assert_eq!(
        count(&client, completed).await as usize,
        JOBS,
        "each job completed once"
    );
    counters_exact(&configs[0], JOBS, SPREAD).await;
    let copies = count(&client, "SELECT count(*) FROM pgmq.q_sink").await;
    println!(
        "postgres alone: {JOBS} jobs ({sent} messages) on two hosts, {KILLS} kills, {:.1}s; \
         {copies} sink messages for {JOBS} keys",
        started.elapsed().as_secs_f64()
    );
    drop(client);
    db.drop().await;
}
