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
use qhost_e2e::storm::Storm;

const JOBS: usize = 3_000;
/// The counters each job adds to besides `total`: `d0` to `d3`, by job number.
const SPREAD: usize = 4;
const KILLS: usize = 5;

/// A host of the job queue on `db`, waiting on pgmq's insert notifications with `notify`.
pub(crate) fn host_config(env: &TestEnv, db: &Database, name: &str, notify: bool) -> PathBuf {
    let text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\nmax-in-flight = 8\nshutdown-grace-secs = 5\n\
         {}{}[retry]\nbase-secs = 0.05\nmax-secs = 1\n\
         [[queue]]\nname = \"jobs\"\nplugin = \"counter\"\nwait-time-secs = 1\n\
         visibility-timeout-secs = 3\n",
        env.plugins_dir(),
        env.data_dir().join(name),
        pgmq_source_table(&db.url()) + &format!("notify = {notify}\n"),
        store_table("qhost").replace(&qhost_e2e::postgres::url(), &db.url()),
    );
    let path = (env.plugins_dir().parent())
        .expect("the test directory")
        .join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("config file");
    path
}

/// Sends jobs `range` with pgmq's Python client: how many messages went.
pub(crate) fn produce(db: &Database, range: std::ops::Range<usize>) -> usize {
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
pub(crate) async fn count(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.expect(sql).get(0)
}

/// The jobs whose effect reached the sink: distinct idempotency keys there.
pub(crate) async fn done(db: &tokio_postgres::Client) -> usize {
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
        .map(|i| host_config(&env, &db, &format!("host-{i}"), false))
        .collect();
    let mut hosts: Vec<HostProcess> = configs
        .iter()
        .map(|c| HostProcess::start_consuming(c))
        .collect();
    let client = db.client().await;
    let third = JOBS / 3;
    let mut sent = produce(&db, 0..third);
    let storm = Storm {
        configs: &configs,
        jobs: JOBS,
        kills: KILLS,
        limit: Duration::from_secs(300),
    };
    let left = async || {
        let waiting = count(&client, "SELECT count(*) FROM pgmq.q_jobs").await;
        let all = done(&client).await == JOBS && waiting == 0;
        (!all).then(|| format!("{waiting} messages left"))
    };
    let took = storm
        .run(
            &mut hosts,
            async || done(&client).await,
            left,
            |k| {
                if k < 2 {
                    let next = third * (k + 1)..if k == 1 { JOBS } else { third * 2 };
                    sent += produce(&db, next);
                }
            },
        )
        .await;
    for host in hosts {
        host.stop();
    }
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
    // The outbox is written into `sink` in the completion's transaction: one message per job,
    // not one copy, whatever the kills interrupted.
    let copies = count(&client, "SELECT count(*) FROM pgmq.q_sink").await;
    assert_eq!(copies as usize, JOBS, "one sink message per job");
    println!(
        "postgres alone: {JOBS} jobs ({sent} messages) on two hosts, {KILLS} kills, {:.1}s; \
         {copies} sink messages for {JOBS} keys",
        took.as_secs_f64()
    );
    drop(client);
    drop(db);
}

/// `qhost --config CONFIG ARGS`, which must succeed: its stdout.
fn qhost_ok(config: &std::path::Path, args: &[&str]) -> String {
    let (ok, out, err) = qhost_e2e::processes::run_with_config(config, args);
    assert!(ok, "qhost {args:?}: {out}{err}");
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn check_says_what_run_will_install_and_dead_letters_are_peeked_and_redriven() {
    let db = Database::new("pg_dlq").await;
    let env = TestEnv::new();
    env.install(
        "counter",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n",
    );
    let config = host_config(&env, &db, "host", false);
    let said = qhost_ok(&config, &["check"]);
    assert!(
        said.contains("`qhost run` installs its SQL-only schema (pgmq 1.13.0), then creates `jobs` and `jobs-dlq`")
            && said.contains("store:    postgres, schema qhost absent: `qhost run` creates it (version 2)"),
        "{said}"
    );
    qhost_ok(&config, &["run", "--until-idle"]);
    let said = qhost_ok(&config, &["check"]);
    let one_database = format!(
        "schema qhost at version 2; outboxes written into pgmq's queues in each completion's transaction (one database, {})",
        db.name()
    );
    assert!(
        said.contains("queue `jobs` exists (0 waiting") && said.contains(&one_database),
        "{said}"
    );
    // The store in another database: the outbox is sent after the commit, as on any store.
    let text = std::fs::read_to_string(&config).expect("the config");
    let store_at = text
        .rfind(&db.url())
        .expect("the store's URL, after the source's");
    let apart = format!(
        "{}{}{}",
        &text[..store_at],
        qhost_e2e::postgres::url(),
        &text[store_at + db.url().len()..]
    );
    let apart_config = config.with_file_name("apart.toml");
    std::fs::write(&apart_config, &apart).expect("write the config");
    let said = qhost_ok(&apart_config, &["check"]);
    assert!(
        said.contains("store:    postgres") && !said.contains("completion's transaction"),
        "{said}"
    );
    // A job its handler rejects: dead-lettered with the reason; redriven, it is back in its
    // queue, and runs (and is rejected) again.
    let send = |body: &str| {
        qhost_ok(
            &config,
            &[
                "send",
                "--queue",
                "jobs",
                "--attr",
                "job-id=j-1",
                "--body",
                body,
            ],
        )
    };
    send("reject:no such customer");
    let ran = qhost_ok(&config, &["run", "--until-idle"]);
    let client = db.client().await;
    assert_eq!(
        count(&client, "SELECT count(*) FROM pgmq.\"q_jobs-dlq\"").await,
        1,
        "{ran}"
    );
    let peeked = qhost_ok(&config, &["dlq", "peek", "--queue", "jobs"]);
    assert!(peeked.contains("reason: no such customer"), "{peeked}");
    qhost_ok(&config, &["dlq", "redrive", "--queue", "jobs"]);
    let jobs = "SELECT count(*) FROM pgmq.q_jobs";
    let dlq = "SELECT count(*) FROM pgmq.\"q_jobs-dlq\"";
    let depths = async || (count(&client, jobs).await, count(&client, dlq).await);
    assert_eq!(depths().await, (1, 0), "redriven");
    let ran = qhost_ok(&config, &["run", "--until-idle"]);
    let dead = (ran.lines())
        .find(|l| l.starts_with("jobs "))
        .and_then(|l| l.split_whitespace().nth(8));
    assert_eq!(dead, Some("1"), "ran and dead-lettered again: {ran}");
    assert_eq!(depths().await, (0, 1), "{ran}");
    drop(client);
    drop(db);
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_the_server_kills_mid_run_lose_nothing_and_run_nothing_twice() {
    const JOBS: usize = 600;
    let db = Database::new("pg_killed").await;
    let env = TestEnv::new();
    env.install(
        "counter",
        "fixture",
        "[idempotency]\nkey = \"attribute:job-id\"\n[capabilities]\nkeyvalue = [\"counts\"]\n",
    );
    // Waiting on notifications: the listener's own connection is killed too, and made again.
    let config = host_config(&env, &db, "host", true);
    let host = HostProcess::start_consuming(&config);
    let client = db.client().await;
    let sent = produce(&db, 0..JOBS);
    // Every connection to the database but this one, killed by the server: the host's store
    // and source connections, several times while the jobs run.
    let kill = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid()";
    let (mut kills, mut killed, started) = (0, 0, Instant::now());
    loop {
        let finished = done(&client).await;
        if kills < 4 && finished >= JOBS * (kills + 1) / 5 {
            killed += count(&client, kill).await;
            kills += 1;
        }
        let waiting = count(&client, "SELECT count(*) FROM pgmq.q_jobs").await;
        if finished == JOBS && waiting == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "{finished} of {JOBS} jobs done, {waiting} messages left, after {kills} kills"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, log) = host.stop_with_log();
    assert_eq!(kills, 4, "the kills happened mid-run");
    assert!(killed >= 4, "connections were killed: {killed}");
    assert_eq!(sent, JOBS + JOBS / 10);
    let dlq = "SELECT count(*) FROM pgmq.\"q_jobs-dlq\"";
    assert_eq!(count(&client, dlq).await, 0, "no dead letter");
    counters_exact(&config, JOBS, SPREAD).await;
    let copies = count(&client, "SELECT count(*) FROM pgmq.q_sink").await;
    assert_eq!(copies as usize, JOBS, "one sink message per job");
    assert!(
        log.contains("outboxes are written into pgmq's queues in each completion's transaction"),
        "the host says the outbox goes with the commit"
    );
    assert!(
        log.contains("connection closed") || log.contains("terminating connection"),
        "a killed connection is logged as such"
    );
    println!(
        "postgres, connections killed: {killed} connections in {kills} kills, {JOBS} jobs once"
    );
    drop(client);
    drop(db);
}
