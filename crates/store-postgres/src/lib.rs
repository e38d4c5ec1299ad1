//! The store contract on PostgreSQL: a team that runs only Postgres keeps its leases, completed
//! records, outboxes, handler state and fleet records in the database it already backs up.
//!
//! Each state change is one call of a PL/pgSQL function in the store's schema (`sql/`, a file
//! per schema version), as each is one Lua script on Redis: one round trip and one transaction
//! per step, and a batch's leases or completions in one call. Every expiry is the server's
//! clock, never a host's. The one step that takes more is a completion whose run read state to
//! decide: its reads are checked by sha1, which PostgreSQL has no built-in function for, so it
//! locks what it read, compares in qhost and completes in the same transaction (`state`).
//!
//! Where pgmq's queues are in the same database, a completion writes its outbox into them in
//! its own transaction ([`PostgresStore::delivering_to_pgmq`]), and nothing is left pending.
//!
//! Tables live in a schema the configuration names (`migrate` creates and versions it), so two
//! fleets share a database safely; expired rows are deleted by the store itself, in small
//! batches that skip locked rows (`sweep`).
//!
//! Layout: the store and its leases and completions here (its connections are
//! `qhost-postgres-link`'s); `migrate` (versions), `state` (completions that read), `fleet` (claims,
//! shared records, the fleet rate), `slots` (flow slots), `sweep` (expired rows), `error`
//! (what a driver error is to the pipeline). It passes the store contract's conformance suite.

mod error;
mod fleet;
mod migrate;
mod slots;
mod state;
mod sweep;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Object, Pool};
use tokio_postgres::Row;

use qhost_message::Outgoing;
use qhost_store::commit::Op;
use qhost_store::pending;
use qhost_store::{
    Acquired, Committed, Completion, IdempotencyError, IdempotencyStore, KeyStatus, Lease,
    LeaseRequest, Released, StoreResult,
};

pub use migrate::SCHEMA_VERSION;
pub use qhost_postgres_link::PgTarget;

/// A PostgreSQL store to connect to: the database, and the schema its tables live in.
#[derive(Clone, Debug)]
pub struct PostgresTarget {
    /// The database.
    pub pg: PgTarget,
    /// The schema the store's tables live in (created when absent).
    pub schema: String,
}

use error::failed;

/// How an outbox message becomes a pgmq message: its body and headers as JSON text, or `None`
/// where pgmq's own send would refuse it (it is then left pending, for the host to send and
/// to dead-letter with the refusal).
pub type PgmqRow = fn(&Outgoing) -> Option<(String, String)>;

/// The store on a PostgreSQL database, in one schema.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// The schema's name, quoted for SQL.
    schema: Arc<str>,
    /// Set where the outbox's queues are pgmq queues in this database: outboxes are then
    /// written into them in the completion's transaction.
    pgmq: Option<PgmqRow>,
    /// Deletes expired rows while the store is open.
    _sweeper: Arc<sweep::Sweeper>,
    /// Round trips to the server so far (benchmarks report them per message).
    round_trips: Arc<AtomicU64>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `target`, creates or migrates its schema, and starts the sweeper. Fails with
    /// why when the database cannot be reached or holds a schema newer than this qhost knows.
    pub async fn connect(target: &PostgresTarget) -> anyhow::Result<Self> {
        let pool = qhost_postgres_link::pool(&target.pg)?;
        let schema: Arc<str> = qhost_postgres_link::quoted(&target.schema).into();
        migrate::migrate(&pool, &target.schema, &schema).await?;
        let sweeper = sweep::Sweeper::start(pool.clone(), Arc::clone(&schema));
        Ok(PostgresStore {
            pool,
            schema,
            pgmq: None,
            _sweeper: Arc::new(sweeper),
            round_trips: Arc::default(),
        })
    }

    /// The store writing each completion's outbox into pgmq's queues in the completion's own
    /// transaction, where they are in this database (`qhost-source-pgmq` beside it): `row`
    /// makes each message a pgmq message. A completion then leaves nothing pending, unless it
    /// records a result value or names a queue that does not exist (its outbox is then
    /// pending as on any store).
    pub fn delivering_to_pgmq(mut self, row: PgmqRow) -> Self {
        self.pgmq = Some(row);
        self
    }

    /// The version of the store's schema in `target`'s database, read without changing
    /// anything (`qhost check`): `None` when the schema holds no store yet.
    pub async fn schema_version(target: &PostgresTarget) -> anyhow::Result<Option<i32>> {
        let pool = qhost_postgres_link::pool(&target.pg)?;
        migrate::applied(&pool, &qhost_postgres_link::quoted(&target.schema)).await
    }

    /// Drops the store's schema and everything in it (tests and benchmarks clean up with it).
    pub async fn drop_schema(&self) -> anyhow::Result<()> {
        let client = self.pool.get().await?;
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema);
        client.batch_execute(&sql).await?;
        Ok(())
    }

    /// Deletes the rows whose time has passed now, as the sweeper does every few seconds: how
    /// many went.
    pub async fn sweep(&self) -> anyhow::Result<u64> {
        sweep::pass(&self.pool, &self.schema).await
    }

    /// The round trips to the server this store (and its clones) made so far, its statements
    /// prepared once per connection and the sweeper's aside.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// Counts `n` round trips.
    fn trips(&self, n: u64) {
        self.round_trips.fetch_add(n, Ordering::Relaxed);
    }

    /// A pooled connection, or why none came within the pool's wait.
    async fn client(&self) -> StoreResult<Object> {
        self.pool.get().await.map_err(error::pool)
    }

    /// `text` with the schema's name in place of `S`'s marker (`{s}`).
    fn sql(&self, text: &str) -> String {
        text.replace("{s}", &self.schema)
    }

    /// Runs `text` (with `{s}`) as a cached prepared statement: its rows.
    async fn query(
        &self,
        text: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> StoreResult<Vec<Row>> {
        let client = self.client().await?;
        let statement = (client.prepare_cached(&self.sql(text)).await).map_err(failed)?;
        self.trips(1);
        client.query(&statement, params).await.map_err(failed)
    }

    /// Runs `text` (with `{s}`): how many rows it changed.
    async fn execute(
        &self,
        text: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> StoreResult<u64> {
        let client = self.client().await?;
        let statement = (client.prepare_cached(&self.sql(text)).await).map_err(failed)?;
        self.trips(1);
        client.execute(&statement, params).await.map_err(failed)
    }

    /// What the store holds for `key` (a scoped key).
    pub async fn status(&self, key: &str) -> StoreResult<KeyStatus> {
        let rows = self
            .query(
                "SELECT state, owner, fencing, outbox FROM {s}.leases
                 WHERE key = $1 AND expires_ms > {s}.clock_ms()",
                &[&key],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(KeyStatus::Unknown);
        };
        Ok(match row.get::<_, &str>(0) {
            "leased" => KeyStatus::InProgress {
                owner: row.get::<_, Option<String>>(1).unwrap_or_default(),
                fencing_token: row.get::<_, i64>(2) as u64,
            },
            "completed" => KeyStatus::Completed {
                pending_outbox: decode_outbox(row.get(3))?.0.len(),
            },
            _ => KeyStatus::Unknown,
        })
    }
}

/// A stored outbox (with the run's result value), as the pending encoding keeps it.
fn decode_outbox(stored: Option<&str>) -> StoreResult<(Vec<Outgoing>, Option<String>)> {
    pending::decode(stored.unwrap_or_default())
        .map_err(|e| IdempotencyError::Corrupt(format!("a stored outbox: {e:#}")))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// One row of `acquire`'s answer, for the request it answers.
fn acquired(row: &Row, request: &LeaseRequest) -> StoreResult<Acquired> {
    Ok(match row.get::<_, &str>("kind") {
        "granted" => Acquired::Granted(Lease {
            key: request.key.clone(),
            owner: row.get("owner"),
            fencing_token: row.get::<_, i64>("fencing") as u64,
            failures: row.get::<_, i32>("failures") as u32,
            window: request.window,
        }),
        "busy" => Acquired::Busy {
            retry_after: Duration::from_millis(row.get::<_, i64>("retry_ms").max(0) as u64),
        },
        _ => {
            let (pending_outbox, pending_result) = decode_outbox(row.get("outbox"))?;
            Acquired::Completed {
                pending_outbox,
                pending_result,
                pending_for: Duration::from_millis(row.get::<_, i64>("pending_ms").max(0) as u64),
                digest: row.get("digest"),
            }
        }
    })
}

/// A completion's state writes, flattened into the columns `complete` takes.
#[derive(Default)]
struct Writes {
    of: Vec<i32>,
    bucket: Vec<String>,
    key: Vec<String>,
    op: Vec<&'static str>,
    value: Vec<Option<Vec<u8>>>,
    delta: Vec<Option<String>>,
    ttl: Vec<i64>,
}

impl Writes {
    /// Adds `done`'s writes as those of completion `place` (1-based).
    fn add(&mut self, place: usize, done: &Completion) {
        for b in &done.state.buckets {
            for (key, op) in &b.writes {
                self.of.push(place as i32);
                self.bucket.push(b.bucket.clone());
                self.key.push(key.clone());
                self.ttl.push(i64::try_from(b.ttl_ms).unwrap_or(i64::MAX));
                let (name, value, delta) = match op {
                    Op::Set { value } => ("set", Some(value.clone()), None),
                    Op::Delete => ("delete", None, None),
                    Op::Add { delta } => ("add", None, Some(delta.to_string())),
                };
                self.op.push(name);
                self.value.push(value);
                self.delta.push(delta);
            }
        }
    }
}

/// The text `complete` runs (deltas as text, cast: a u64 may not fit a bigint).
const COMPLETE: &str = "SELECT i, answer FROM {s}.complete($1, $2, $3, $4, $5, $6, $7, $8, $9,
    $10, $11::text[]::numeric[], $12, $13, $14, $15, $16, $17)";

/// Completions' outboxes as pgmq messages, flattened into the columns `complete` takes.
#[derive(Default)]
struct PgmqMessages<'a> {
    of: Vec<i32>,
    queue: Vec<&'a str>,
    message: Vec<String>,
    headers: Vec<String>,
    delay: Vec<i32>,
}

impl<'a> PgmqMessages<'a> {
    /// Adds `done`'s outbox as that of completion `place` (1-based), if `row` makes every
    /// message of it a pgmq message and the completion records no result value (which only
    /// the host writes): otherwise nothing, and the outbox is recorded pending.
    fn add(&mut self, place: usize, done: &'a Completion, row: PgmqRow) {
        if done.outbox.is_empty() || done.result.is_some() {
            return;
        }
        let Some(rows) = done.outbox.iter().map(row).collect::<Option<Vec<_>>>() else {
            return;
        };
        for (m, (message, headers)) in done.outbox.iter().zip(rows) {
            self.of.push(place as i32);
            self.queue.push(&m.queue);
            self.message.push(message);
            self.headers.push(headers);
            self.delay
                .push(i32::try_from(m.delay_seconds).unwrap_or(i32::MAX));
        }
    }
}

impl PostgresStore {
    /// Completes `batch` (none of which read state) in one call on `client`: each answer, in
    /// order.
    async fn complete_on(
        &self,
        client: &impl GenericClient,
        batch: &[&Completion],
    ) -> StoreResult<Vec<StoreResult<Committed>>> {
        let keys: Vec<&str> = batch.iter().map(|c| c.lease.key.as_str()).collect();
        let owners: Vec<&str> = batch.iter().map(|c| c.lease.owner.as_str()).collect();
        let windows: Vec<i64> = batch.iter().map(|c| ms(c.window)).collect();
        let outboxes: Vec<Option<String>> = (batch.iter())
            .map(|c| {
                Some(pending::encode(&c.outbox, c.result.as_deref())).filter(|t| !t.is_empty())
            })
            .collect();
        let digests: Vec<Option<&str>> = batch.iter().map(|c| c.digest.as_deref()).collect();
        let mut w = Writes::default();
        let mut o = PgmqMessages::default();
        for (place, done) in batch.iter().enumerate() {
            w.add(place + 1, done);
            if let Some(row) = self.pgmq {
                o.add(place + 1, done, row);
            }
        }
        let statement = (client.prepare_cached(&self.sql(COMPLETE)).await).map_err(failed)?;
        self.trips(1);
        let rows = client
            .query(
                &statement,
                &[
                    &keys, &owners, &windows, &outboxes, &digests, &w.of, &w.bucket, &w.key, &w.op,
                    &w.value, &w.delta, &w.ttl, &o.of, &o.queue, &o.message, &o.headers, &o.delay,
                ],
            )
            .await
            .map_err(failed)?;
        let mut answers = vec![Err(IdempotencyError::Unavailable("no answer".into())); batch.len()];
        for row in rows {
            let place = row.get::<_, i32>(0) as usize - 1;
            let key = || batch[place].lease.key.clone();
            answers[place] = match row.get::<_, &str>(1) {
                "done" => Ok(Committed::Pending),
                "sent" => Ok(Committed::Delivered),
                "conflict" => Err(IdempotencyError::Conflict(key())),
                _ => Err(IdempotencyError::LeaseLost(key())),
            };
        }
        Ok(answers)
    }
}

#[async_trait]
impl IdempotencyStore for PostgresStore {
    async fn acquire(&self, requests: &[LeaseRequest]) -> StoreResult<Vec<StoreResult<Acquired>>> {
        let rows = self.acquire_rows(requests).await?;
        Ok(order(requests, rows, acquired))
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> StoreResult<()> {
        let changed = self
            .execute(
                "UPDATE {s}.leases SET expires_ms = {s}.clock_ms() + $3,
                     forget_ms = greatest(forget_ms, {s}.clock_ms() + $3 + window_ms)
                 WHERE key = $1 AND owner = $2 AND state = 'leased'
                   AND expires_ms > {s}.clock_ms()",
                &[&lease.key, &lease.owner, &ms(ttl)],
            )
            .await?;
        IdempotencyError::owned(lease, changed == 1)
    }

    async fn complete(
        &self,
        completions: &[Completion],
    ) -> StoreResult<Vec<StoreResult<Committed>>> {
        let mut answers = vec![Ok(Committed::Pending); completions.len()];
        let (reading, plain): (Vec<_>, Vec<_>) = (completions.iter().enumerate())
            .partition(|(_, c)| c.state.buckets.iter().any(|b| !b.reads.is_empty()));
        if !plain.is_empty() {
            let client = self.client().await?;
            let batch: Vec<&Completion> = plain.iter().map(|(_, c)| *c).collect();
            let done = self.complete_on(&client, &batch).await?;
            for ((place, _), answer) in plain.iter().zip(done) {
                answers[*place] = answer;
            }
        }
        for (place, done) in reading {
            answers[place] = self.complete_reading(done).await?;
        }
        Ok(answers)
    }

    async fn outbox_sent(&self, key: &str) -> StoreResult<()> {
        self.execute(
            "UPDATE {s}.leases SET outbox = NULL, outbox_ms = NULL
             WHERE key = $1 AND state = 'completed' AND outbox IS NOT NULL",
            &[&key],
        )
        .await?;
        Ok(())
    }

    async fn release(&self, lease: &Lease, why: Released) -> StoreResult<()> {
        let failures = match why {
            Released::NotRun => 0,
            Released::Failed => 1,
            Released::GaveUp => -1,
        };
        let changed = self
            .execute(
                "UPDATE {s}.leases SET state = 'released', owner = NULL,
                     failures = CASE WHEN $3 < 0 THEN 0 ELSE failures + $3 END
                 WHERE key = $1 AND owner = $2 AND state = 'leased'
                   AND expires_ms > {s}.clock_ms()",
                &[&lease.key, &lease.owner, &failures],
            )
            .await?;
        IdempotencyError::owned(lease, changed == 1)
    }

    async fn ping(&self) -> StoreResult<()> {
        self.query("SELECT 1", &[]).await.map(drop)
    }
}

impl PostgresStore {
    /// `acquire`'s rows for `requests`, in key order (each names its place, `i`).
    async fn acquire_rows(&self, requests: &[LeaseRequest]) -> StoreResult<Vec<Row>> {
        let client = self.client().await?;
        self.acquire_on(&client, requests).await
    }

    /// [`Self::acquire_rows`] on `client`.
    async fn acquire_on(
        &self,
        client: &Object,
        requests: &[LeaseRequest],
    ) -> StoreResult<Vec<Row>> {
        let keys: Vec<&str> = requests.iter().map(|r| r.key.as_str()).collect();
        let ttls: Vec<i64> = requests.iter().map(|r| ms(r.ttl)).collect();
        let windows: Vec<i64> = requests.iter().map(|r| ms(r.window)).collect();
        let sql = self.sql("SELECT * FROM {s}.acquire($1, $2, $3)");
        let statement = client.prepare_cached(&sql).await.map_err(failed)?;
        self.trips(1);
        (client.query(&statement, &[&keys, &ttls, &windows]).await).map_err(failed)
    }
}

/// Each request's answer in the order asked, from rows that name their place in column `i`
/// (1-based); a request no row answers is an error of its own.
fn order<Q, T>(
    requests: &[Q],
    rows: Vec<Row>,
    answer: impl Fn(&Row, &Q) -> StoreResult<T>,
) -> Vec<StoreResult<T>> {
    let mut answers: Vec<Option<StoreResult<T>>> = (0..requests.len()).map(|_| None).collect();
    for row in &rows {
        let place = row.get::<_, i32>("i") as usize;
        if let Some(slot) = place.checked_sub(1).and_then(|p| answers.get_mut(p)) {
            *slot = Some(answer(row, &requests[place - 1]));
        }
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(IdempotencyError::Corrupt("a request unanswered".into()))))
        .collect()
}
