//! pgmq in the database: the extension, pgmq's SQL-only schema (installed by qhost when asked,
//! from pgmq's own `pgmq.sql` of [`PGMQ_VERSION`], vendored in `sql/`), or neither; and a consumed queue and its
//! dead-letter queue, created with `pgmq.create` when the host declares queues.
//!
//! The install runs in one transaction under an advisory lock, so hosts starting at once on a
//! fresh database install it once.

use std::fmt;

use qhost_source::SourceError;

use crate::PgmqQueue;
use crate::listen::THROTTLE;

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
        if self.settings.notify {
            self.enable_notify(queue).await?;
        }
        Ok(())
    }

    /// Has pgmq notify on inserts into `queue` (throttled to one a [`THROTTLE`]) unless it does
    /// already: under an advisory lock, as hosts starting at once would race pgmq's trigger.
    async fn enable_notify(&self, queue: &str) -> Result<(), SourceError> {
        let failed = |e| crate::failed(queue, e);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(failed)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('qhost-pgmq-notify' || $1))",
            &[&queue],
        )
        .await
        .map_err(failed)?;
        let has = "SELECT to_regprocedure('pgmq.enable_notify_insert(text, integer)') IS NOT NULL";
        if !tx
            .query_one(has, &[])
            .await
            .map_err(failed)?
            .get::<_, bool>(0)
        {
            return Err(SourceError::Unsupported(
                "source.notify: this pgmq has no insert notifications (pgmq.enable_notify_insert \
                 came in pgmq 1.7): upgrade pgmq, or leave notify off"
                    .into(),
            ));
        }
        let on = "SELECT EXISTS (SELECT 1 FROM pgmq.notify_insert_throttle WHERE queue_name = $1)";
        if !tx
            .query_one(on, &[&queue])
            .await
            .map_err(failed)?
            .get::<_, bool>(0)
        {
            let throttle = i32::try_from(THROTTLE.as_millis()).unwrap_or(i32::MAX);
            tx.execute(
                "SELECT pgmq.enable_notify_insert($1, $2)",
                &[&queue, &throttle],
            )
            .await
            .map_err(failed)?;
        }
        tx.commit().await.map_err(failed)
    }

    /// What `qhost check` says of `queue` and its `dead_letter` queue, changing nothing: where
    /// they are, or what `qhost run` will install and create.
    pub(crate) async fn inspect_queues(
        &self,
        queue: &str,
        dead_letter: &str,
    ) -> Result<String, SourceError> {
        let Some(pgmq) = self.find().await? else {
            if self.settings.install {
                return Ok(format!(
                    "the database has no pgmq: `qhost run` installs its SQL-only schema (pgmq \
                     {PGMQ_VERSION}), then creates `{queue}` and `{dead_letter}`"
                ));
            }
            return self.pgmq(false).await.map(|_| String::new());
        };
        let mut said = Vec::new();
        for (name, what) in [(queue, "queue"), (dead_letter, "dead-letter queue")] {
            match qhost_source::QueueSource::depth(self, name).await {
                Ok(d) => said.push(format!(
                    "{what} `{name}` exists ({} waiting, {} held or delayed)",
                    d.visible, d.invisible
                )),
                Err(SourceError::UnknownQueue(_)) if self.settings.declare => {
                    said.push(format!("{what} `{name}` absent: `qhost run` creates it"));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(format!("in {pgmq}: {}", said.join("; ")))
    }

    async fn depth_of(&self, queue: &str) -> Result<(), SourceError> {
        qhost_source::QueueSource::depth(self, queue)
            .await
            .map(drop)
    }
}
