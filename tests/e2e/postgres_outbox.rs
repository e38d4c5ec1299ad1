//! The outbox in the completion's transaction: the PostgreSQL store, in the database that
//! holds pgmq's queues, writes a completion's outbox into them as it commits. Sent with the
//! record or not at all: a connection killed mid-commit leaves neither, and nothing is left
//! pending to send twice. Where it cannot (a queue that does not exist, a result value to
//! write) the outbox is pending, as on every store.

use std::time::{Duration, Instant};

use qhost::Outgoing;
use qhost::sources::pgmq_outbox_row;
use qhost::stores::{
    Acquired, BucketCommit, Committed, Completion, IdempotencyError, IdempotencyStore, KeyStatus,
    Lease, LeaseRequest, Op, PostgresStore, PostgresTarget, StateCommit,
};
use qhost_e2e::postgres::{Database, target};

const WINDOW: Duration = Duration::from_secs(600);

/// A database with pgmq installed and a queue `out`, and the store in it writing outboxes
/// into pgmq's queues.
async fn store_beside_pgmq(name: &str) -> (Database, PostgresStore) {
    let db = Database::new(name).await;
    db.pgmq("out").await;
    let store = PostgresStore::connect(&PostgresTarget {
        pg: target(&db.url()),
        schema: "qhost".into(),
    })
    .await
    .expect("the store");
    (db, store.delivering_to_pgmq(pgmq_outbox_row))
}

async fn lease(store: &PostgresStore, key: &str) -> Lease {
    let request = LeaseRequest {
        key: key.into(),
        ttl: Duration::from_secs(30),
        window: WINDOW,
    };
    match store.acquire(&[request]).await.expect("acquire").remove(0) {
        Ok(Acquired::Granted(lease)) => lease,
        other => panic!("{key}: {other:?}"),
    }
}

fn completion(lease: &Lease, outbox: Vec<Outgoing>) -> Completion {
    Completion {
        lease: lease.clone(),
        outbox,
        result: None,
        window: WINDOW,
        digest: None,
        state: StateCommit::default(),
    }
}

/// The bodies in pgmq queue `out`, oldest first.
async fn sent(db: &tokio_postgres::Client) -> Vec<String> {
    let rows = (db
        .query("SELECT message::text FROM pgmq.q_out ORDER BY msg_id", &[])
        .await)
        .expect("read queue out");
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completion_writes_its_outbox_into_pgmq_as_it_commits_and_leaves_nothing_pending() {
    let (db, store) = store_beside_pgmq("pg_outbox").await;
    let client = db.client().await;
    let k1 = lease(&store, "ns:{p:k1}").await;
    let out = vec![Outgoing::new("out", r#"{"n":1}"#)];
    let done = store
        .complete(&[completion(&k1, out)])
        .await
        .expect("complete");
    assert_eq!(done, vec![Ok(Committed::Delivered)]);
    assert_eq!(sent(&client).await, vec![r#"{"n": 1}"#]);
    assert_eq!(
        store.status("ns:{p:k1}").await,
        Ok(KeyStatus::Completed { pending_outbox: 0 }),
        "nothing left to send or mark sent"
    );

    // A lost lease and a live one in one call: only the live one's outbox goes.
    let k2 = lease(&store, "ns:{p:k2}").await;
    let k3 = lease(&store, "ns:{p:k3}").await;
    let stale = Lease {
        owner: "not-the-owner".into(),
        ..k2.clone()
    };
    let batch = [
        completion(&stale, vec![Outgoing::new("out", r#""stale""#)]),
        completion(&k3, vec![Outgoing::new("out", r#""k3""#)]),
    ];
    let done = store.complete(&batch).await.expect("complete");
    assert_eq!(
        done,
        vec![
            Err(IdempotencyError::LeaseLost("ns:{p:k2}".into())),
            Ok(Committed::Delivered)
        ]
    );
    assert_eq!(sent(&client).await, vec![r#"{"n": 1}"#, r#""k3""#]);

    // A queue that does not exist, or a result value to write: pending, as on any store, for
    // the host to send (and dead-letter with the refusal) and mark sent.
    let nowhere = store
        .complete(&[completion(&k2, vec![Outgoing::new("nowhere", "{}")])])
        .await
        .expect("complete");
    assert_eq!(nowhere, vec![Ok(Committed::Pending)]);
    let k4 = lease(&store, "ns:{p:k4}").await;
    let with_result = Completion {
        result: Some("42".into()),
        ..completion(&k4, vec![Outgoing::new("out", "{}")])
    };
    let done = store.complete(&[with_result]).await.expect("complete");
    assert_eq!(done, vec![Ok(Committed::Pending)]);
    for key in ["ns:{p:k2}", "ns:{p:k4}"] {
        assert_eq!(
            store.status(key).await,
            Ok(KeyStatus::Completed { pending_outbox: 1 }),
            "{key}"
        );
    }
    assert_eq!(sent(&client).await.len(), 2, "neither went into `out`");
    drop(client);
    drop(db);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_killed_mid_commit_leaves_neither_the_record_nor_the_outbox() {
    let (db, store) = store_beside_pgmq("pg_outbox_kill").await;
    let client = db.client().await;
    let k = lease(&store, "ns:{p:k}").await;
    // The completion writes a state key; the test holds that key's lock, so the commit waits
    // on it, half done, until its connection is killed.
    let write = BucketCommit {
        bucket: "ns:kv:{p/b}".into(),
        ttl_ms: 0,
        reads: vec![],
        writes: vec![(
            "x".into(),
            Op::Set {
                value: b"1".to_vec(),
            },
        )],
    };
    let done = Completion {
        state: StateCommit {
            buckets: vec![write],
        },
        ..completion(&k, vec![Outgoing::new("out", r#""once""#)])
    };
    let locker = db.client().await;
    locker
        .execute(
            "SELECT pg_advisory_lock(qhost.kv_lock_id('ns:kv:{p/b}', 'x'))",
            &[],
        )
        .await
        .expect("hold the key's lock");
    let completing = {
        let (store, done) = (store.clone(), done.clone());
        tokio::spawn(async move { store.complete(&[done]).await })
    };
    let waiting = "SELECT pid FROM pg_stat_activity
                   WHERE datname = current_database() AND wait_event_type = 'Lock'
                     AND query LIKE '%complete(%'";
    let started = Instant::now();
    let pid: i32 = loop {
        if let Some(row) = client.query_opt(waiting, &[]).await.expect("activity") {
            break row.get(0);
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the commit never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    client
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .expect("kill the committing connection");
    let answer = completing.await.expect("the completion's task");
    assert!(
        matches!(answer, Err(IdempotencyError::Unavailable(_))),
        "{answer:?}"
    );
    assert_eq!(sent(&client).await, Vec::<String>::new(), "no outbox");
    assert!(
        matches!(
            store.status("ns:{p:k}").await,
            Ok(KeyStatus::InProgress { .. })
        ),
        "no completed record"
    );
    locker
        .execute(
            "SELECT pg_advisory_unlock(qhost.kv_lock_id('ns:kv:{p/b}', 'x'))",
            &[],
        )
        .await
        .expect("let the key go");
    // The lease is still held: the completion made again lands, with its outbox once.
    let again = store.complete(&[done]).await.expect("complete");
    assert_eq!(again, vec![Ok(Committed::Delivered)]);
    assert_eq!(sent(&client).await, vec![r#""once""#]);
    drop((client, locker));
    drop(db);
}
