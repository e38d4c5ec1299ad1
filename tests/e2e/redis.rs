//! The Redis idempotency store against a real Redis server: its state machine, the pipeline
//! over it when a lease lapses, and surviving a Redis crash mid-stream.

use std::sync::Arc;
use std::time::Duration;

use qhost::Host;
use qhost::Outgoing;
use qhost::plugins::Registry;
use qhost::sources::QueueSource;
use qhost::stores::RedisStore;
use qhost::stores::{
    Acquired, Committed, Completion, IdempotencyError, IdempotencyStore, KeyStatus, Lease,
    LeaseRequest, Released,
};
use qhost_e2e::harness::{
    Running, TestEnv, contents, lapsing_queue_toml, queue_toml, run_until_idle, send_all,
};
use qhost_e2e::redis_server::{RedisServer, connect, record, shared_url, unique_namespace};
use qhost_e2e::redis_tls::{PASSWORD, TlsRedis};

fn request(key: &str, ttl: Duration) -> LeaseRequest {
    LeaseRequest {
        key: key.to_string(),
        ttl,
        window: Duration::from_secs(60),
    }
}

async fn grant(store: &RedisStore, key: &str, ttl: Duration) -> Lease {
    match store
        .acquire(&[request(key, ttl)])
        .await
        .expect("acquire")
        .remove(0)
    {
        Ok(Acquired::Granted(lease)) => lease,
        other => panic!("expected a grant for {key}, got {other:?}"),
    }
}

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL")
}

/// One record per key holds the fencing token through release and lapse, counts failed runs,
/// lives as long as its lease plus the window, then the window once completed.
#[tokio::test]
async fn one_record_per_key_keeps_its_token_and_counts_failed_runs() {
    let store = RedisStore::connect(&shared_url()).await.unwrap();
    let mut conn = connect(&shared_url()).await;
    let ns = unique_namespace("failures");
    let key = qhost::testing::scoped_key(&ns, "p", "k");
    let ttl = Duration::from_secs(30);

    let first = grant(&store, &key, ttl).await;
    assert_eq!((first.fencing_token, first.failures), (1, 0));
    store.release(&first, Released::Failed).await.unwrap();
    assert_eq!(
        record(&mut conn, &key).await,
        (Some("released".into()), Some(1))
    );
    let second = grant(&store, &key, ttl).await;
    assert_eq!(
        (second.fencing_token, second.failures),
        (2, 1),
        "a failed run is counted, and the token rises past the released record's"
    );
    store.release(&second, Released::NotRun).await.unwrap();
    let third = grant(&store, &key, Duration::from_millis(200)).await;
    assert_eq!(
        (third.fencing_token, third.failures),
        (3, 1),
        "a put-back without a run uses up nothing"
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // the third lease lapses
    let fourth = grant(&store, &key, ttl).await;
    assert_eq!(
        fourth.fencing_token, 4,
        "a lapsed lease leaves its token behind"
    );

    // A heartbeat that keeps a lease far past its first lifetime keeps the record with it.
    store
        .extend(&fourth, Duration::from_secs(600))
        .await
        .unwrap();
    assert!(pttl(&mut conn, &key).await > 600_000 + 59_000);
    let done = Completion {
        lease: fourth,
        outbox: vec![],
        result: None,
        window: Duration::from_secs(3600),
        digest: None,
        state: Default::default(),
    };
    assert_eq!(
        store.complete(&[done]).await.unwrap(),
        vec![Ok(Committed::Pending)]
    );
    let record_ttl = pttl(&mut conn, &key).await;
    assert!(
        (3_500_000..=3_600_000).contains(&record_ttl),
        "the completed record lives its window: {record_ttl} ms"
    );
    assert_eq!(
        string_record(&mut conn, &key).await,
        "c:4",
        "completion keeps the token and forgets the owner, the lease's end and the failures"
    );
    let siblings: u64 = redis::cmd("EXISTS")
        .arg(format!("{key}:fence"))
        .arg(format!("{key}:failed"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(siblings, 0, "one key per message, no counters beside it");
}

/// What `GET` reads of a record that is a string (a completed one).
async fn string_record(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> String {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("a completed record is a string")
}

/// What acquiring a completed `key` finds: its pending outbox's length and its digest.
async fn completed(store: &RedisStore, key: &str) -> (usize, Option<String>) {
    let found = store
        .acquire(&[request(key, Duration::from_secs(5))])
        .await
        .expect("acquire");
    match found.as_slice() {
        [
            Ok(Acquired::Completed {
                pending_outbox,
                digest,
                ..
            }),
        ] => (pending_outbox.len(), digest.clone()),
        other => panic!("expected the key completed, found {other:?}"),
    }
}

/// A record completed with an outbox stays a hash until the outbox is sent, then becomes the
/// string `c:TOKEN:DIGEST` for the rest of its window; either way the key is completed, with its
/// digest, and no owner's call can touch it.
#[tokio::test]
async fn a_completed_record_shrinks_to_a_string_once_its_outbox_is_sent() {
    let store = RedisStore::connect(&shared_url()).await.unwrap();
    let mut conn = connect(&shared_url()).await;
    let key = qhost::testing::scoped_key(&unique_namespace("compact"), "p", "k");
    let lease = grant(&store, &key, Duration::from_secs(30)).await;
    let digest = "ab".repeat(32);
    let done = Completion {
        lease: lease.clone(),
        outbox: vec![Outgoing::new("next", b"hello".to_vec())],
        result: None,
        window: Duration::from_secs(3600),
        digest: Some(digest.clone()),
        state: Default::default(),
    };
    assert_eq!(
        store.complete(&[done]).await.unwrap(),
        vec![Ok(Committed::Pending)]
    );
    assert_eq!(completed(&store, &key).await, (1, Some(digest.clone())));

    store.outbox_sent(&key).await.unwrap();
    assert_eq!(
        string_record(&mut conn, &key).await,
        format!("c:1:{digest}")
    );
    let ttl = pttl(&mut conn, &key).await;
    assert!(
        (3_500_000..=3_600_000).contains(&ttl),
        "the window goes on: {ttl} ms"
    );
    assert_eq!(completed(&store, &key).await, (0, Some(digest.clone())));
    assert_eq!(
        store.status(&key).await.unwrap(),
        KeyStatus::Completed { pending_outbox: 0 }
    );
    assert!(matches!(
        store.extend(&lease, Duration::from_secs(5)).await,
        Err(IdempotencyError::LeaseLost(_))
    ));
    assert!(matches!(
        store.release(&lease, Released::Failed).await,
        Err(IdempotencyError::LeaseLost(_))
    ));
    store.outbox_sent(&key).await.unwrap();
    assert_eq!(
        string_record(&mut conn, &key).await,
        format!("c:1:{digest}")
    );
}

/// Records written by the earlier layout (long field names, a separate fencing counter) are
/// honoured after an upgrade: completed work is not run again, a live lease is busy, and the
/// next token follows the old counter.
#[tokio::test]
async fn records_of_the_earlier_layout_are_honoured() {
    let store = RedisStore::connect(&shared_url()).await.unwrap();
    let mut conn = connect(&shared_url()).await;
    let ns = unique_namespace("layout");
    let [done, leased, released] =
        ["done", "leased", "released"].map(|k| qhost::testing::scoped_key(&ns, "p", k));
    let mut pipe = redis::pipe();
    pipe.cmd("HSET")
        .arg(&done)
        .arg("state")
        .arg("completed")
        .arg("fence")
        .arg(3)
        .cmd("PEXPIRE")
        .arg(&done)
        .arg(60_000)
        .cmd("HSET")
        .arg(&leased)
        .arg("state")
        .arg("leased")
        .arg("owner")
        .arg("old")
        .arg("fence")
        .arg(5)
        .cmd("PEXPIRE")
        .arg(&leased)
        .arg(60_000)
        .cmd("SET")
        .arg(format!("{released}:fence"))
        .arg(7)
        .arg("PX")
        .arg(60_000);
    let () = pipe.query_async(&mut conn).await.unwrap();

    let got = store
        .acquire(&[
            request(&done, Duration::from_secs(5)),
            request(&leased, Duration::from_secs(5)),
            request(&released, Duration::from_secs(5)),
        ])
        .await
        .unwrap();
    assert!(
        matches!(got[0], Ok(Acquired::Completed { .. })),
        "{:?}",
        got[0]
    );
    assert!(
        matches!(got[1], Ok(Acquired::Busy { retry_after }) if retry_after > Duration::from_secs(50)),
        "{:?}",
        got[1]
    );
    assert!(
        matches!(&got[2], Ok(Acquired::Granted(lease)) if lease.fencing_token == 8),
        "{:?}",
        got[2]
    );
    let old_counter: u64 = redis::cmd("EXISTS")
        .arg(format!("{released}:fence"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(old_counter, 0, "the old counter is folded into the record");
}

#[tokio::test]
async fn a_batch_is_leased_in_one_round_trip() {
    let store = RedisStore::connect(&shared_url()).await.unwrap();
    let ns = unique_namespace("batch");
    let requests: Vec<_> = (0..10)
        .map(|i| {
            request(
                &qhost::testing::scoped_key(&ns, "p", &i.to_string()),
                Duration::from_secs(5),
            )
        })
        .collect();
    let before = store.round_trips();
    let acquired = store.acquire(&requests).await.unwrap();
    assert_eq!(store.round_trips() - before, 1);
    assert!(
        acquired
            .iter()
            .all(|a| matches!(a, Ok(Acquired::Granted(_))))
    );
    let completions: Vec<_> = acquired
        .into_iter()
        .map(|a| match a {
            Ok(Acquired::Granted(lease)) => Completion {
                lease,
                outbox: vec![],
                result: None,
                window: Duration::from_secs(60),
                digest: None,
                state: Default::default(),
            },
            _ => unreachable!(),
        })
        .collect();
    let before = store.round_trips();
    let all_ok: Vec<Result<Committed, IdempotencyError>> = vec![Ok(Committed::Pending); 10];
    assert_eq!(store.complete(&completions).await.unwrap(), all_ok);
    assert_eq!(store.round_trips() - before, 1);
}

#[tokio::test]
async fn an_unreachable_redis_at_start_is_one_clear_error() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let mut dead = RedisServer::start();
    let url = dead.url();
    dead.kill();
    let config = env.config(&format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{url}\"\n{}",
        queue_toml("jobs", "fixture")
    ));
    let err = Host::from_config(config).await.unwrap_err();
    let message = format!("{err:#}");
    assert!(
        message.contains("cannot connect to Redis at") && message.contains(&url),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_that_outlives_its_lease_cannot_complete_over_the_new_owner() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let ns = unique_namespace("expiry");
    // No heartbeat, a one-second visibility: the first delivery's handler sleeps past both, the
    // message is delivered again, and the second delivery takes a new lease and finishes first.
    let queue = lapsing_queue_toml("jobs", "fixture");
    let config = env.config(&format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{ns}\"\n{queue}",
        shared_url()
    ));
    // The host refuses this pairing at start (a plugin that may outlive its visibility with no
    // heartbeat); assembled from parts here, because the lapse is what is under test.
    let err = Host::from_config(config.clone()).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("queue[0].heartbeat is false"),
        "{err:#}"
    );
    let loaded = qhost::load_plugins(&config).await.unwrap();
    let registry = Registry::new(loaded.get("fixture").map(|p| (*p).clone()));
    let store = RedisStore::connect(&shared_url()).await.unwrap();
    let host = Host::new(config, Arc::new(env.queue()), Arc::new(store), registry);
    // The second one rejects after its lease lapsed: dropped, not dead-lettered, since the key's
    // new owner (which acks) decides.
    let ids = send_all(
        &env.queue(),
        "jobs",
        &["slow-first:2500", "reject-first:2500"],
        &[],
    )
    .await;

    // Returns once the queue is empty and in-flight calls (the slow first ones) have returned.
    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked, c.lost_leases, c.dead_lettered),
        (4, 2, 2, 0),
        "{c:?}"
    );
    assert!(contents(&env.queue(), "jobs-dlq").await.is_empty());
    let fenced = contents(&env.queue(), "fenced").await;
    let bodies: Vec<_> = fenced
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(bodies, vec!["2"], "only the newer owner's outbox went out");
    let mut conn = connect(&shared_url()).await;
    let key = qhost::testing::scoped_key(&ns, "fixture", &ids[0]);
    assert_eq!(
        record(&mut conn, &key).await,
        (Some("completed".into()), Some(2))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_crash_mid_stream_runs_nothing_unleased_and_loses_nothing() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let mut redis = RedisServer::start();
    let config = env.config(&format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\n{}",
        redis.url(),
        queue_toml("jobs", "fixture")
    ));
    let running = Running::start(env.host(config).await);
    let host = running.host();
    let q = env.queue();

    let mut sent = 0;
    let mut send_some = async |n: usize| {
        let bodies = vec!["send:sink:ok"; n];
        sent += n;
        send_all(&q, "jobs", &bodies, &[]).await
    };
    // Their derived keys: the only work whose records the crash can take (this Redis keeps
    // nothing on disk), so the only work that may run again.
    let before_crash: std::collections::BTreeSet<String> = send_some(100)
        .await
        .iter()
        .map(|id| format!("fixture:{id}/0"))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.kill();
    tokio::time::sleep(Duration::from_millis(300)).await; // calls in flight at the crash settle
    let invoked_at_crash = host.stats().total().invoked;
    send_some(100).await; // arrives while Redis is down
    tokio::time::sleep(Duration::from_secs(2)).await;
    let invoked_while_down = host.stats().total().invoked - invoked_at_crash;
    redis.restart();
    send_some(100).await;

    for _ in 0..600 {
        if q.depth("jobs").await.unwrap().total() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let host = running.stop().await;

    assert_eq!(
        invoked_while_down, 0,
        "no handler ran while no lease could be taken"
    );
    assert_eq!(
        q.depth("jobs").await.unwrap().total(),
        0,
        "processing resumed after the restart"
    );
    let mut keys: Vec<String> = contents(&q, "sink")
        .await
        .iter()
        .filter_map(|m| qhost_e2e::harness::attr(m, "qhost-idempotency-key").map(str::to_string))
        .collect();
    keys.sort();
    let copies: Vec<&String> = keys
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| &w[1])
        .collect();
    assert!(
        copies.iter().all(|k| before_crash.contains(*k)),
        "an effect repeated only for work whose record the crash took: {copies:?}"
    );
    keys.dedup();
    assert_eq!(keys.len(), sent, "every message's effect arrived");
    assert!(
        contents(&q, "jobs-dlq").await.is_empty(),
        "nothing was dead-lettered"
    );
    let c = host.stats().total();
    assert!(
        c.deferred > 0 && c.retried == 0,
        "messages received during the outage were put back, unrun, using no attempt: {c:?}"
    );
}

/// `rediss://` with a password and a private certificate authority: the host connects when
/// told which CA to trust and runs each job once; it refuses to start when not told, or with
/// the wrong password, and no error shows the password.
#[tokio::test(flavor = "multi_thread")]
async fn tls_with_a_password_and_a_private_ca() {
    let tls = TlsRedis::start();
    let env = TestEnv::new();
    env.install(
        "fixture",
        "fixture",
        "[idempotency]\nkey = \"body-sha256\"\n",
    );
    let config = |url: &str, ca: Option<&std::path::Path>| {
        let ca = ca.map_or(String::new(), |p| format!("ca-file = {p:?}\n"));
        env.config(&format!(
            "[idempotency]\nkind = \"redis\"\nurl = \"{url}\"\n{ca}{}",
            queue_toml("jobs", "fixture")
        ))
    };

    let untrusted = Host::from_config(config(&tls.url(), None))
        .await
        .unwrap_err();
    let wrong = tls.url().replace(PASSWORD, "not-the-password");
    let refused = Host::from_config(config(&wrong, Some(&tls.ca_file())))
        .await
        .unwrap_err();
    for err in [format!("{untrusted:#}"), format!("{refused:#}")] {
        assert!(
            err.contains("cannot connect to Redis at rediss://127.0.0.1:"),
            "{err}"
        );
        assert!(
            !err.contains(PASSWORD) && !err.contains("not-the-password"),
            "a password in an error: {err}"
        );
    }

    let host = env.host(config(&tls.url(), Some(&tls.ca_file()))).await;
    let bodies: Vec<String> = (0..10).map(|i| format!("send:out:job-{i}")).collect();
    let twice: Vec<&str> = bodies.iter().chain(&bodies).map(String::as_str).collect();
    send_all(&env.queue(), "jobs", &twice, &[]).await;
    run_until_idle(&host).await;
    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked, c.duplicates), (10, 10, 10), "{c:?}");
    assert_eq!(contents(&env.queue(), "out").await.len(), 10);
}

/// The store contract's conformance suite (the one the embedded store runs in its unit tests)
/// on the shared Redis server, under a namespace of its own.
#[tokio::test(flavor = "multi_thread")]
async fn the_redis_store_conforms_to_the_store_contract() {
    let store = RedisStore::connect(&shared_url()).await.expect("redis");
    let ns = unique_namespace("conformance");
    qhost::testing::assert_store_conforms(Arc::new(store), &ns).await;
}
