//! pgmq in the database: the extension, pgmq's SQL-only schema (installed by qhost when asked,
//! from pgmq's own `pgmq.sql` of [`PGMQ_VERSION`], vendored in `sql/`), or neither; and a consumed queue and its
//! dead-letter queue, created with `pgmq.create` when the host declares queues.
//!
//! The install runs in one transaction under an advisory lock, so hosts starting at once on a
//! fresh database install it once.

use std::fmt;

use qhost_source::SourceError;

use crate::PgmqQueue;

/// pgmq's SQL-only installation.
const PGMQ_SQL: &str = include_str!("../sql/pgmq.sql");

/// The version of pgmq it installs.
pub(crate) const PGMQ_VERSION: &str = "1.13.0";

/// How pgmq is in the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pgmq {
    /// `CREATE EXTENSION pgmq`.
    Extension,
    /// The `pgmq` schema, from pgmq's SQL-only installation.
    SqlOnly,
}

impl fmt::Display for Pgmq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pgmq::Extension => "pgmq (the extension)",
            Pgmq::SqlOnly => "pgmq (its SQL-only schema)",
        })
    }
}

impl PgmqQueue {
    /// How pgmq is in the database, installing its SQL-only schema first when there is none
    /// and `install` (and the settings) allow.
    pub(crate) async fn pgmq(&self, install: bool) -> Result<Pgmq, SourceError> {
        let found = self
            .installed
            .get_or_try_init(|| async {
                match self.find().await? {
                    Some(pgmq) => Ok(pgmq),
                    None if install && self.settings.install => self.install().await,
                    None => Err(SourceError::Unsupported(
                        "the database has no pgmq: install the extension (CREATE EXTENSION \
                         pgmq), or set source.install-pgmq = true for qhost to install pgmq's \
                         SQL-only schema"
                            .into(),
                    )),
                }
            })
            .await?;
        Ok(*found)
    }

    async fn find(&self) -> Result<Option<Pgmq>, SourceError> {
        let rows = self
            .query(
                "pgmq",
                "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pgmq'),
                        to_regclass('pgmq.meta') IS NOT NULL",
                &[],
            )
            .await?;
        Ok(
            match (rows[0].get::<_, bool>(0), rows[0].get::<_, bool>(1)) {
                (true, _) => Some(Pgmq::Extension),
                (false, true) => Some(Pgmq::SqlOnly),
                (false, false) => None,
            },
        )
    }

    async fn install(&self) -> Result<Pgmq, SourceError> {
        let backend = |e| SourceError::Backend(anyhow::Error::new(e).context("installing pgmq"));
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(backend)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('qhost-install-pgmq'))",
            &[],
        )
        .await
        .map_err(backend)?;
        let there: bool = tx
            .query_one("SELECT to_regclass('pgmq.meta') IS NOT NULL", &[])
            .await
            .map_err(backend)?
            .get(0);
        if !there {
            tx.batch_execute(PGMQ_SQL).await.map_err(backend)?;
            tracing::info!(version = PGMQ_VERSION, "installed pgmq's SQL-only schema");
        }
        tx.commit().await.map_err(backend)?;
        Ok(Pgmq::SqlOnly)
    }

    /// Makes `queue` and its `dead_letter` queue ready: pgmq found or installed, and each
    /// queue created when the settings declare queues, or checked to exist when not.
    pub async fn prepare(&self, queue: &str, dead_letter: &str) -> Result<(), SourceError> {
        self.pgmq(true).await?;
        for name in [queue, dead_letter] {
            crate::table::queue_table(name)?;
            if self.settings.declare {
                self.query(name, "SELECT pgmq.create($1)", &[&name]).await?;
            } else {
                self.depth_of(name).await?;
            }
        }
        Ok(())
    }

    async fn depth_of(&self, queue: &str) -> Result<(), SourceError> {
        qhost_source::QueueSource::depth(self, queue)
            .await
            .map(drop)
    }
}
