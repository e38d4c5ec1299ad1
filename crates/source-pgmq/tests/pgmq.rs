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

    async fn drop(self) {
        let sql = format!("DROP DATABASE {} WITH (FORCE)", self.name);
        admin().await.batch_execute(&sql).await.unwrap();
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
    db.drop().await;
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
    db.drop().await;
}
