//! The PostgreSQL store against the machine's PostgreSQL (`QHOST_POSTGRES_URL`, by default
//! `postgres://postgres@127.0.0.1:5432/test`): each test in a schema of its own, dropped
//! after it.

#![allow(
    clippy::unwrap_used,
    reason = "a test: a call that fails fails the test, with the error"
)]

use std::sync::Arc;
use std::time::Duration;

use qhost_store::conformance::assert_conforms;
use qhost_store::{Acquired, IdempotencyError, IdempotencyStore as _, LeaseRequest};
use qhost_store_postgres::{PgTarget, PostgresStore, PostgresTarget, SCHEMA_VERSION};

fn url() -> String {
    std::env::var("QHOST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A schema name no other test uses.
fn unique(name: &str) -> String {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("qhost_test_{name}_{}", &tag[..8])
}

fn tls() -> Arc<rustls::ClientConfig> {
    let ring = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(ring)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    Arc::new(config)
}

fn target(schema: &str) -> PostgresTarget {
    with(schema, |_| {})
}

/// The target of `schema`, its connections changed by `change`.
fn with(schema: &str, change: impl FnOnce(&mut PgTarget)) -> PostgresTarget {
    let mut pg = PgTarget {
        url: url(),
        password: None,
        pool_size: 8,
        tls: tls(),
        wait: Duration::from_secs(5),
        statement_timeout: Duration::from_secs(5),
    };
    change(&mut pg);
    PostgresTarget {
        pg,
        schema: schema.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_postgres_store_conforms_to_the_store_contract() {
    let schema = unique("conformance");
    let store = PostgresStore::connect(&target(&schema)).await.unwrap();
    assert_conforms(Arc::new(store.clone()), "conformance").await;
    store.drop_schema().await.unwrap();
}

/// A plain connection to the database, for a test's own statements.
async fn admin() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

fn request(key: &str) -> LeaseRequest {
    LeaseRequest {
        key: key.to_string(),
        ttl: Duration::from_secs(60),
        window: Duration::from_secs(60),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn of_many_hosts_asking_for_a_new_key_at_once_one_is_granted_it() {
    let schema = unique("race");
    let store = PostgresStore::connect(&target(&schema)).await.unwrap();
    for round in 0..20 {
        let key = format!("race:{round}");
        let asks = (0..8).map(|_| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move { store.acquire(&[request(&key)]).await })
        });
        let answers = futures_join(asks).await;
        let granted = (answers.iter())
            .filter(|a| matches!(a.as_ref().unwrap()[0], Ok(Acquired::Granted(_))))
            .count();
        assert_eq!(granted, 1, "round {round}: {answers:?}");
    }
    // The same key twice in one call: the second finds the first's lease.
    let twice = store
        .acquire(&[request("twice"), request("twice")])
        .await
        .unwrap();
    assert!(matches!(twice[0], Ok(Acquired::Granted(_))), "{twice:?}");
    assert!(matches!(twice[1], Ok(Acquired::Busy { .. })), "{twice:?}");
    store.drop_schema().await.unwrap();
}

async fn futures_join<T: Send + 'static>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        out.push(task.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_starting_at_once_migrate_a_fresh_schema_once() {
    let schema = unique("migrate");
    let starts = (0..4).map(|_| {
        let target = target(&schema);
        tokio::spawn(async move { PostgresStore::connect(&target).await })
    });
    let stores = futures_join(starts).await;
    for store in &stores {
        assert!(store.is_ok(), "{:?}", store.as_ref().err());
    }
    let versions = admin()
        .await
        .query(&format!("SELECT version FROM {schema}.qhost_versions"), &[])
        .await
        .unwrap();
    let versions: Vec<i32> = versions.iter().map(|r| r.get(0)).collect();
    let every: Vec<i32> = (1..=SCHEMA_VERSION).collect();
    assert_eq!(versions, every, "each applied once");
    stores[0].as_ref().unwrap().drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schema_at_version_1_is_migrated_with_its_records_kept() {
    let schema = unique("v1");
    let quoted = format!("\"{schema}\"");
    let admin = admin().await;
    // The schema as the first release left it, with a lease taken by its `acquire`.
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {quoted};
             CREATE TABLE {quoted}.qhost_versions (
                 version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
             {}
             INSERT INTO {quoted}.qhost_versions (version) VALUES (1);",
            include_str!("../src/sql/v1.sql").replace("qhost_schema", &quoted)
        ))
        .await
        .unwrap();
    let owner: String = admin
        .query_one(
            &format!("SELECT owner FROM {quoted}.acquire(ARRAY['k'], ARRAY[60000::bigint], ARRAY[600000::bigint])"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let store = PostgresStore::connect(&target(&schema)).await.unwrap();
    let versions = (admin
        .query(
            &format!("SELECT version FROM {quoted}.qhost_versions ORDER BY 1"),
            &[],
        )
        .await)
        .unwrap();
    let versions: Vec<i32> = versions.iter().map(|r| r.get(0)).collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    // The lease taken before the migration completes after it.
    let lease = qhost_store::Lease {
        key: "k".into(),
        owner,
        fencing_token: 1,
        failures: 0,
        window: Duration::from_secs(600),
    };
    let done = qhost_store::Completion {
        lease,
        outbox: vec![],
        result: None,
        window: Duration::from_secs(600),
        digest: None,
        state: Default::default(),
    };
    assert_eq!(
        store.complete(&[done]).await.unwrap(),
        vec![Ok(qhost_store::Committed::Pending)]
    );
    store.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schema_newer_than_this_qhost_is_refused_with_why() {
    let schema = unique("newer");
    let store = PostgresStore::connect(&target(&schema)).await.unwrap();
    let newer = SCHEMA_VERSION + 1;
    admin()
        .await
        .execute(
            &format!("INSERT INTO {schema}.qhost_versions (version) VALUES ($1)"),
            &[&newer],
        )
        .await
        .unwrap();
    let refused = PostgresStore::connect(&target(&schema)).await.unwrap_err();
    let why = format!("{refused:#}");
    assert!(
        why.contains(&format!("at version {newer}, newer than this qhost knows")),
        "{why}"
    );
    store.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_rows_are_deleted_by_the_store_in_batches() {
    let schema = unique("sweep");
    let store = PostgresStore::connect(&target(&schema)).await.unwrap();
    let short = |key: String| LeaseRequest {
        key,
        ttl: Duration::from_millis(50),
        window: Duration::from_millis(50),
    };
    // More than one batch's worth, leased briefly and left to lapse, and one live lease.
    let keys: Vec<LeaseRequest> = (0..1_200).map(|n| short(format!("gone:{n}"))).collect();
    for chunk in keys.chunks(100) {
        store.acquire(chunk).await.unwrap();
    }
    store.acquire(&[request("live")]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.sweep().await.unwrap(), 1_200);
    let left = admin()
        .await
        .query(&format!("SELECT key FROM {schema}.leases"), &[])
        .await
        .unwrap();
    let left: Vec<String> = left.iter().map(|r| r.get(0)).collect();
    assert_eq!(left, ["live"]);
    store.drop_schema().await.unwrap();
}

/// A target whose connections carry `name` (to find them in `pg_stat_activity`).
fn named(schema: &str, name: &str) -> PostgresTarget {
    with(schema, |pg| {
        pg.url = format!("{}?application_name={name}", url())
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_the_server_kills_fail_their_call_and_are_replaced() {
    let (schema, name) = (unique("killed"), unique("app"));
    let store = PostgresStore::connect(&named(&schema, &name))
        .await
        .unwrap();
    let before = store.acquire(&[request("before")]).await.unwrap();
    assert!(matches!(before[0], Ok(Acquired::Granted(_))));
    let killed: i64 = admin()
        .await
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(killed >= 1, "the store's connections were killed");
    // Each call either fails as unavailable (the message would go back to the queue) or
    // answers truly; within a few calls the pool has new connections.
    let mut answered = None;
    for _ in 0..20 {
        match store.acquire(&[request("before"), request("after")]).await {
            Ok(answers) => {
                answered = Some(answers);
                break;
            }
            Err(e) => assert!(
                matches!(e, IdempotencyError::Unavailable(_)),
                "a killed connection is unavailable, not {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answers = answered.expect("a new connection answers");
    assert!(
        matches!(answers[0], Ok(Acquired::Busy { .. })),
        "the lease taken before stands: {answers:?}"
    );
    assert!(
        matches!(answers[1], Ok(Acquired::Granted(_))),
        "{answers:?}"
    );
    store.drop_schema().await.unwrap();
}

/// Holds `key`'s lease row locked from another connection until the answer is dropped.
async fn hold_row(schema: &str, key: &str) -> tokio_postgres::Client {
    let client = admin().await;
    client.batch_execute("BEGIN").await.unwrap();
    let sql = format!("SELECT 1 FROM {schema}.leases WHERE key = $1 FOR UPDATE");
    assert_eq!(client.query(&sql, &[&key]).await.unwrap().len(), 1);
    client
}

#[tokio::test(flavor = "multi_thread")]
async fn a_statement_past_its_timeout_is_cancelled_and_says_so() {
    let schema = unique("timeout");
    let store = PostgresStore::connect(&with(&schema, |pg| {
        pg.statement_timeout = Duration::from_millis(300)
    }))
    .await
    .unwrap();
    store.acquire(&[request("held")]).await.unwrap();
    let holder = hold_row(&schema, "held").await;
    let blocked = store.acquire(&[request("held")]).await.unwrap_err();
    assert!(blocked.is_timeout(), "{blocked:?}");
    assert!(blocked.to_string().contains("cancelled"), "{blocked}");
    holder.batch_execute("ROLLBACK").await.unwrap();
    let again = store.acquire(&[request("held")]).await.unwrap();
    assert!(
        matches!(again[0], Ok(Acquired::Busy { .. })),
        "nothing changed: the lease stands: {again:?}"
    );
    store.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exhausted_pool_answers_in_time_with_why() {
    let schema = unique("pool");
    let store = PostgresStore::connect(&with(&schema, |pg| {
        pg.pool_size = 1;
        pg.wait = Duration::from_millis(300);
    }))
    .await
    .unwrap();
    store.acquire(&[request("held")]).await.unwrap();
    let holder = hold_row(&schema, "held").await;
    // The one connection waits on the lock...
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { store.acquire(&[request("held")]).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ...so another call finds none free.
    let exhausted = store.ping().await.unwrap_err();
    assert!(exhausted.is_timeout(), "{exhausted:?}");
    assert!(
        exhausted.to_string().contains("pool is exhausted"),
        "{exhausted}"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    let answer = waiting.await.unwrap().unwrap();
    assert!(matches!(answer[0], Ok(Acquired::Busy { .. })), "{answer:?}");
    store.ping().await.unwrap();
    store.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn of_runs_that_read_the_same_absent_key_at_once_one_commits() {
    use qhost_store::Completion;
    use qhost_store::commit::{BucketCommit, Op, Read, StateCommit};
    let schema = unique("reads");
    let store = PostgresStore::connect(&target(&schema)).await.unwrap();
    let mut runs = Vec::new();
    for n in 0..8 {
        let answer = store
            .acquire(&[request(&format!("run:{n}"))])
            .await
            .unwrap();
        let Ok(Acquired::Granted(lease)) = &answer[0] else {
            panic!("{answer:?}")
        };
        let state = StateCommit {
            buckets: vec![BucketCommit {
                bucket: "b".into(),
                ttl_ms: 0,
                reads: vec![Read {
                    key: "x".into(),
                    seen: None,
                }],
                writes: vec![(
                    "x".into(),
                    Op::Set {
                        value: n.to_string().into_bytes(),
                    },
                )],
            }],
        };
        runs.push(Completion {
            lease: lease.clone(),
            outbox: vec![],
            result: None,
            window: Duration::from_secs(60),
            digest: None,
            state,
        });
    }
    let commits = runs.into_iter().map(|run| {
        let store = store.clone();
        tokio::spawn(async move { store.complete(&[run]).await.unwrap().remove(0) })
    });
    let answers = futures_join(commits).await;
    let committed = answers.iter().filter(|a| a.is_ok()).count();
    let conflicts = (answers.iter())
        .filter(|a| matches!(a, Err(IdempotencyError::Conflict(_))))
        .count();
    assert_eq!((committed, conflicts), (1, 7), "{answers:?}");
    store.drop_schema().await.unwrap();
}
