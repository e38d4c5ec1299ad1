//! The pgmq source against the machine's PostgreSQL (`QHOST_POSTGRES_URL`, by default
//! `postgres://postgres@127.0.0.1:5432/test`): pgmq's schema has a fixed name, so each test
//! runs in a database of its own, created from that server and dropped after it.

#![allow(
    clippy::unwrap_used,
    reason = "a test: a call that fails fails the test, with the error"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use qhost_source::QueueSource as _;
use qhost_source::conformance::{NewQueue, assert_conforms};
use qhost_source_pgmq::{PgTarget, PgmqQueue, PgmqSettings};

fn url() -> String {
    std::env::var("QHOST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A database of a test's own, dropped when it is.
struct Database {
    name: String,
}

impl Database {
    async fn new(name: &str) -> Database {
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let name = format!("qhost_test_{name}_{}", &tag[..8]);
        admin()
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        Database { name }
    }

    /// Its URL: the server's, with this database.
    fn url(&self) -> String {
        let server = url();
        let base = server.rsplit_once('/').map_or(server.as_str(), |(b, _)| b);
        format!("{base}/{}", self.name)
    }
}

impl Drop for Database {
    /// Drops the database from a thread of its own, a failed test's too.
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async { admin().await.batch_execute(&sql).await })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop the test database: {dropped:?}");
        }
    }
}

async fn admin() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

fn settings(url: String) -> PgmqSettings {
    let ring = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(ring)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    PgmqSettings {
        pg: PgTarget {
            url,
            password: None,
            pool_size: 16,
            tls: Arc::new(tls),
            wait: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
        },
        declare: true,
        install: true,
        poll: Duration::from_millis(250),
        notify: false,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pgmq_conforms_to_the_source_contract() {
    let db = Database::new("conformance").await;
    let source = Arc::new(PgmqQueue::new(settings(db.url())).unwrap());
    let made = Arc::new(AtomicUsize::new(0));
    let new_queue: NewQueue = Arc::new({
        let source = Arc::clone(&source);
        move |_name: String, _fifo: bool| {
            let (source, made) = (Arc::clone(&source), Arc::clone(&made));
            Box::pin(async move {
                let q = format!("q{}", made.fetch_add(1, Ordering::Relaxed));
                source.prepare(&q, &format!("{q}-dlq")).await.unwrap();
                q
            })
        }
    });
    assert_conforms(source.clone(), new_queue, "pgmq").await;
    drop(source);
    drop(db);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_pgmq_and_not_asked_to_install_it_a_queue_is_refused_with_why() {
    let db = Database::new("no_pgmq").await;
    let source = PgmqQueue::new(PgmqSettings {
        install: false,
        ..settings(db.url())
    })
    .unwrap();
    let why = source.prepare("jobs", "jobs-dlq").await.unwrap_err();
    assert!(why.to_string().contains("install-pgmq = true"), "{why}");
    let depth = source.depth("jobs").await.unwrap_err();
    assert!(
        matches!(depth, qhost_source::SourceError::UnknownQueue(_)),
        "{depth:?}"
    );
    drop(source);
    drop(db);
}

#[tokio::test(flavor = "multi_thread")]
async fn message_ids_are_unique_across_queues_and_a_queue_made_again() {
    let db = Database::new("ids").await;
    let source = PgmqQueue::new(settings(db.url())).unwrap();
    let mut seen = std::collections::HashSet::new();
    for queue in ["a", "b", "a"] {
        source
            .prepare(queue, &format!("{queue}-dlq"))
            .await
            .unwrap();
        let sent = source
            .send(&[qhost_message::Outgoing::new(queue, "{}")])
            .await
            .unwrap();
        let got = source
            .receive(queue, 10, Duration::from_secs(30), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, sent[0], "the id sent is the id received");
        assert!(seen.insert(got[0].id.clone()), "{} again", got[0].id);
        // Dropped, to be made again: pgmq starts its ids over.
        let drop = format!("SELECT pgmq.drop_queue('{queue}')");
        let (client, conn) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client.batch_execute(&drop).await.unwrap();
    }
    drop(source);
    drop(db);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_notify_an_empty_receive_wakes_on_an_insert_not_on_its_timer() {
    let db = Database::new("notify").await;
    let source = Arc::new(
        // Pauses that grow to 10 s: polling alone would read at about 2.5 s and 5.1 s.
        PgmqQueue::new(PgmqSettings {
            notify: true,
            poll: Duration::from_secs(10),
            ..settings(db.url())
        })
        .unwrap(),
    );
    source.prepare("jobs", "jobs-dlq").await.unwrap();
    // A second host's start finds the notifications set up, and leaves them.
    source.prepare("jobs", "jobs-dlq").await.unwrap();
    let waiting = tokio::spawn({
        let source = Arc::clone(&source);
        async move {
            let started = std::time::Instant::now();
            let got = source
                .receive("jobs", 10, Duration::from_secs(30), Duration::from_secs(20))
                .await
                .unwrap();
            (got, started.elapsed())
        }
    });
    // Past the polling that follows an empty read (a quarter of a second): the receive waits
    // on notifications now, with nothing held or delayed to wake it, for up to five seconds.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (producer, conn) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    producer
        .batch_execute("SELECT pgmq.send('jobs', '{\"job\": 1}')")
        .await
        .unwrap();
    let (got, after) = waiting.await.unwrap();
    assert_eq!(got.len(), 1, "the message sent");
    assert!(
        after < Duration::from_millis(4500),
        "woken by the insert's notification at 3 s, not by a poll (5.1 s) or its timer: {after:?}"
    );
    drop(source);
    drop(db);
}
