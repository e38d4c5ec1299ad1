//! The machine's PostgreSQL for the tests (`QHOST_POSTGRES_URL`, by default
//! `postgres://postgres@127.0.0.1:5432/test`): each test in schemas of its own, dropped after
//! it.

/// The database's URL.
pub fn url() -> String {
    std::env::var("QHOST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A schema name no other test uses.
pub fn unique_schema(name: &str) -> String {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("qhost_e2e_{}_{}", name.replace('-', "_"), &tag[..8])
}

/// The `[idempotency]` table of a host whose store is the database, in `schema`.
pub fn store_table(schema: &str) -> String {
    format!(
        "[idempotency]\nkind = \"postgres\"\nurl = \"{}\"\nschema = \"{schema}\"\n",
        url()
    )
}

/// A connection for a test's own statements.
pub async fn client() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the tests' PostgreSQL");
    tokio::spawn(connection);
    client
}

/// Drops `schemas` and everything in them.
pub async fn drop_schemas(schemas: &[&str]) {
    let client = client().await;
    for schema in schemas {
        let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        client
            .batch_execute(&sql)
            .await
            .expect("drop a test schema");
    }
}

/// The database at `url` as qhost connects to it: 16 connections, statements of up to 30 s,
/// and TLS where the URL's `sslmode` asks for it (the loopback server's certificate is not
/// checked: no platform root signs it).
pub fn target(url: &str) -> qhost::stores::PgTarget {
    let ring = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(ring)
        .with_safe_default_protocol_versions()
        .expect("ring's protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    qhost::stores::PgTarget {
        url: url.to_string(),
        password: None,
        pool_size: 16,
        tls: std::sync::Arc::new(tls),
        wait: std::time::Duration::from_secs(5),
        statement_timeout: std::time::Duration::from_secs(30),
    }
}

/// The store in `schema` of the tests' database, as a host opens it.
pub async fn store(schema: &str) -> anyhow::Result<qhost::stores::PostgresStore> {
    let target = qhost::stores::PostgresTarget {
        pg: target(&url()),
        schema: schema.to_string(),
    };
    qhost::stores::PostgresStore::connect(&target).await
}

/// The CPU time the database's server has used so far: its postmaster (started with `-D`)
/// and every process below it (backends, WAL writer, checkpointer), those that ended
/// included: what messages cost the database.
pub fn server_cpu() -> std::time::Duration {
    let postmasters = crate::proc_tree::named("postgres", "-D");
    postmasters.into_iter().map(crate::proc_tree::cpu).sum()
}

/// A database of a test's own on the tests' server (pgmq's schema has a fixed name, so a
/// test of pgmq cannot share one), dropped with the value, a failed test's too.
#[derive(Debug)]
pub struct Database {
    name: String,
}

impl Database {
    /// A new, empty database named after `name`.
    pub async fn new(name: &str) -> Database {
        let name = unique_schema(name);
        let sql = format!("CREATE DATABASE {name}");
        client()
            .await
            .batch_execute(&sql)
            .await
            .expect("create a test database");
        Database { name }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its URL: the server's, with this database.
    pub fn url(&self) -> String {
        let server = url();
        let base = server.rsplit_once('/').map_or(server.as_str(), |(b, _)| b);
        format!("{base}/{}", self.name)
    }

    /// pgmq in it (its SQL-only schema installed where there is none), with `queue` and its
    /// dead-letter queue made: for a test that needs a queue before any host starts.
    pub async fn pgmq(&self, queue: &str) -> qhost::sources::PgmqQueue {
        let pgmq = qhost::sources::PgmqQueue::new(qhost::sources::PgmqSettings {
            pg: target(&self.url()),
            declare: true,
            install: true,
            poll: std::time::Duration::from_millis(100),
            notify: false,
        })
        .expect("pgmq's settings");
        (pgmq.prepare(queue, &format!("{queue}-dlq")).await)
            .unwrap_or_else(|e| panic!("pgmq and queue `{queue}`: {e}"));
        pgmq
    }

    /// A connection to it, for a test's own statements.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .expect("connect to a test database");
        tokio::spawn(connection);
        client
    }
}

impl Drop for Database {
    /// Drops the database from a thread of its own (a test's runtime may be ending, or be the
    /// one this is dropped on).
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                client.batch_execute(&sql).await.map_err(|e| e.to_string())
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not drop a test database: {e}"),
            Err(_) => eprintln!("could not drop a test database: its thread panicked"),
        }
    }
}

/// The `[source]` table of a host reading pgmq's queues in the database at `url`, installing
/// pgmq's SQL-only schema where there is none.
pub fn pgmq_source_table(url: &str) -> String {
    format!("[source]\nkind = \"pgmq\"\nurl = \"{url}\"\ninstall-pgmq = true\npoll-ms = 100\n")
}
