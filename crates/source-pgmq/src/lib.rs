//! qhost's source contract on pgmq: queues in PostgreSQL, in pgmq's own schema, so producers
//! using pgmq's clients (`pgmq.send`, `send_batch`, delays, headers) send to qhost unchanged.
//!
//! How each operation of the contract lands (`docs/design.md` has the table for every broker):
//!
//! - **receive with a hold**: `pgmq.read`: the oldest visible rows, locked with `SKIP LOCKED`
//!   so hosts never wait on each other, made invisible for the hold (whole seconds, rounded
//!   up) and their `read_ct` counted. While a receive waits for its first message, it reads
//!   again after pauses that grow to [`PgmqSettings::poll`]; with [`PgmqSettings::notify`], it
//!   then waits on pgmq's insert notifications instead (`listen`).
//! - **settle**: the row deleted, after the host committed the completion.
//! - **put back**, **keep holding**: the row's visible-after time (`vt`) moved, as
//!   `pgmq.set_vt` does.
//! - **handles** are `MSG_ID:READ_CT`: each call above touches the row only while its read
//!   count is the delivery's, so a host whose hold lapsed, and whose message another host read
//!   since, cannot settle, put back or hold that host's delivery ([`SourceError::HandleExpired`]).
//! - **send**: `pgmq.send_batch`, a statement per target queue and delay, so pgmq's consumers
//!   see what its producers write. Every message is held to the same rules as on SQS
//!   (`qhost_message::rules`), so a handler's outbox behaves alike on every source; bodies and
//!   attributes travel as `convert` says.
//! - **delivery count**: `read_ct`.
//!
//! Layout: `settings`, `table` (a queue's tables), `convert` (pgmq's JSON messages and headers
//! to and from qhost's), `install` (pgmq's SQL-only schema, and creating queues).

mod convert;
mod install;
mod listen;
mod settings;
mod table;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
use tokio_postgres::error::SqlState;

use qhost_message::{Outgoing, Received};
use qhost_source::{Capabilities, Holds, Purged, QueueAdmin, QueueDepth, QueueSource, SourceError};

pub use qhost_postgres_link::PgTarget;
pub use settings::PgmqSettings;

/// An outbox message as pgmq stores it (its body and headers, JSON text), for a store that
/// writes a completion's outbox into pgmq's queues in its own transaction
/// (`qhost-store-postgres`): `None` where [`PgmqQueue`]'s send would refuse it.
pub fn outbox_row(m: &Outgoing) -> Option<(String, String)> {
    qhost_message::rules::check(m).ok()?;
    table::queue_table(&m.queue).ok()?;
    Some(convert::to_pgmq(m))
}

/// pgmq's queues in one database, as a source.
pub struct PgmqQueue {
    settings: PgmqSettings,
    pool: Pool,
    /// Whether pgmq's schema was found (or installed) already.
    installed: tokio::sync::OnceCell<install::Pgmq>,
    /// The connection listening on the queues' insert notifications (with `notify`), made on
    /// first use and again after it drops.
    listener: tokio::sync::Mutex<Option<Arc<listen::Listener>>>,
    /// When each queue last gave a message: a receive waits on notifications at once when
    /// that was longer ago than pgmq's throttle.
    last_message: std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
}

impl std::fmt::Debug for PgmqQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgmqQueue").finish_non_exhaustive()
    }
}

/// The shortest pause between reads of an empty queue while a receive waits.
const FIRST_PAUSE: Duration = Duration::from_millis(20);

impl PgmqQueue {
    /// A source on the database of `settings`; it connects on first use.
    pub fn new(settings: PgmqSettings) -> anyhow::Result<PgmqQueue> {
        let pool = qhost_postgres_link::pool(&settings.pg)?;
        Ok(PgmqQueue {
            settings,
            pool,
            installed: Default::default(),
            listener: Default::default(),
            last_message: Default::default(),
        })
    }

    async fn client(&self) -> Result<Object, SourceError> {
        self.pool.get().await.map_err(pool_failed)
    }

    /// Runs `sql` on `queue` (its errors named by it): its rows.
    async fn query(
        &self,
        queue: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, SourceError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| failed(queue, e))?;
        (client.query(&statement, params).await).map_err(|e| failed(queue, e))
    }

    /// One read: up to `max` visible messages of `queue`, held for `hold`.
    async fn read(
        &self,
        queue: &str,
        max: usize,
        hold: Duration,
    ) -> Result<Vec<Received>, SourceError> {
        table::queue_table(queue)?;
        let sql = "SELECT msg_id, read_ct, (extract(epoch FROM enqueued_at) * 1000000)::bigint,
                          message::text, headers::text
                   FROM pgmq.read($1::text, $2::integer, $3::integer)
                   ORDER BY msg_id";
        let max = i32::try_from(max).unwrap_or(i32::MAX);
        // pgmq holds whole seconds: a hold rounds up, so it is never shorter than asked.
        let secs = i32::try_from(hold.as_millis().div_ceil(1000).max(1)).unwrap_or(i32::MAX);
        let rows = self.query(queue, sql, &[&queue, &secs, &max]).await?;
        Ok(rows.iter().map(|r| received(queue, r)).collect())
    }

    /// Moves the visible-after time of the deliveries `handles` to `after` from now: for each,
    /// whether it was still the delivery named.
    async fn set_vt(
        &self,
        queue: &str,
        entries: &[(String, Duration)],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        let t = table::queue_table(queue)?;
        let (ids, counts) = handles(entries.iter().map(|(h, _)| h.as_str()))?;
        let delays: Vec<i64> = entries.iter().map(|(_, d)| ms(*d)).collect();
        let sql = format!(
            "UPDATE {t} m SET vt = clock_timestamp() + make_interval(secs => e.delay / 1000.0)
             FROM unnest($1::bigint[], $2::integer[], $3::bigint[]) AS e(id, ct, delay)
             WHERE m.msg_id = e.id AND m.read_ct = e.ct
             RETURNING m.msg_id"
        );
        let rows = self.query(queue, &sql, &[&ids, &counts, &delays]).await?;
        Ok(answers(&ids, &rows))
    }
}

impl PgmqQueue {
    /// What waits on `queue`'s insert notifications, with `notify`: `None` without it, or
    /// while the listener cannot connect (receives poll meanwhile).
    async fn notify_on(&self, queue: &str) -> Option<Arc<tokio::sync::Notify>> {
        if !self.settings.notify {
            return None;
        }
        let listener = {
            let mut held = self.listener.lock().await;
            match held.as_ref().filter(|l| l.is_alive()) {
                Some(alive) => Arc::clone(alive),
                None => {
                    let connected = async {
                        let (config, tls) = qhost_postgres_link::connection(&self.settings.pg)
                            .map_err(|e| e.to_string())?;
                        (listen::Listener::connect(&config, tls).await).map_err(|e| e.to_string())
                    };
                    match connected.await {
                        Ok(listener) => Arc::clone(held.insert(Arc::new(listener))),
                        Err(e) => {
                            tracing::warn!(error = %e, "could not listen for pgmq's notifications; polling");
                            return None;
                        }
                    }
                }
            }
        };
        match listener.on(queue).await {
            Ok(notify) => Some(notify),
            Err(e) => {
                tracing::warn!(%queue, error = %e, "could not listen on the queue's channel; polling");
                None
            }
        }
    }

    /// How long ago `queue` last gave a message (forever, if it never did here).
    fn quiet_for(&self, queue: &str) -> Duration {
        let last = listen::lock(&self.last_message).get(queue).copied();
        last.map_or(Duration::MAX, |at| at.elapsed())
    }

    /// How long until the earliest held or delayed message of `queue` becomes visible again
    /// (no insert announces it); `None` when none is.
    async fn next_visible(&self, queue: &str) -> Result<Option<Duration>, SourceError> {
        let t = table::queue_table(queue)?;
        let sql = format!(
            "SELECT (extract(epoch FROM min(vt) - clock_timestamp()) * 1000)::bigint
             FROM {t} WHERE vt > clock_timestamp()"
        );
        let rows = self.query(queue, &sql, &[]).await?;
        let ms: Option<i64> = rows.first().and_then(|r| r.get(0));
        Ok(ms.map(|ms| Duration::from_millis(ms.max(0) as u64 + 1)))
    }
}

/// A delivery from its row (`msg_id`, `read_ct`, `enqueued_at` in µs, `message`, `headers`).
///
/// Its id is `QUEUE:MSG_ID:ENQUEUED_US`: a pgmq message id is a queue's own sequence, which
/// another queue repeats and a queue dropped and created again starts over, so the message id
/// alone, as an idempotency key (the default), would make a new message a duplicate of an old
/// one within the dedup window.
fn received(queue: &str, row: &tokio_postgres::Row) -> Received {
    let (id, count, enqueued_us): (i64, i32, i64) = (row.get(0), row.get(1), row.get(2));
    let (body, attributes, malformed) = convert::from_pgmq(row.get(3), row.get(4));
    Received {
        id: format!("{queue}:{id}:{enqueued_us}"),
        handle: format!("{id}:{count}"),
        queue: queue.to_string(),
        body,
        attributes,
        delivery_count: count.max(0) as u32,
        sent_at_ms: (enqueued_us / 1000).max(0) as u64,
        group_id: None,
        malformed,
    }
}

/// The message ids and read counts of `handles`; a handle this source did not make is refused.
fn handles<'a>(
    handles: impl Iterator<Item = &'a str>,
) -> Result<(Vec<i64>, Vec<i32>), SourceError> {
    let mut out = (Vec::new(), Vec::new());
    for handle in handles {
        let parsed = handle
            .split_once(':')
            .and_then(|(id, ct)| Some((id.parse().ok()?, ct.parse().ok()?)));
        let Some((id, count)) = parsed else {
            return Err(SourceError::Refused(format!(
                "`{handle}` is not a pgmq delivery's handle (MSG_ID:READ_CT)"
            )));
        };
        out.0.push(id);
        out.1.push(count);
    }
    Ok(out)
}

/// For each of `ids`, whether a returned row names it (its delivery was still the one named).
fn answers(ids: &[i64], rows: &[tokio_postgres::Row]) -> Vec<Result<(), SourceError>> {
    let done: std::collections::HashSet<i64> = rows.iter().map(|r| r.get(0)).collect();
    (ids.iter())
        .map(|id| {
            if done.contains(id) {
                Ok(())
            } else {
                Err(SourceError::HandleExpired)
            }
        })
        .collect()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A statement's failure on `queue`: a queue with no table does not exist.
pub(crate) fn failed(queue: &str, e: tokio_postgres::Error) -> SourceError {
    match e.code() {
        Some(&SqlState::UNDEFINED_TABLE) => SourceError::UnknownQueue(queue.to_string()),
        Some(&SqlState::QUERY_CANCELED) => {
            SourceError::TimedOut(format!("PostgreSQL cancelled a statement on `{queue}`"))
        }
        _ => SourceError::Backend(anyhow::Error::new(e).context(format!("pgmq queue `{queue}`"))),
    }
}

/// The pool's failure to hand out a connection.
fn pool_failed(e: deadpool_postgres::PoolError) -> SourceError {
    match e {
        deadpool_postgres::PoolError::Timeout(_) => SourceError::TimedOut(format!(
            "no PostgreSQL connection free or made within the pool's wait ({e})"
        )),
        other => SourceError::Backend(anyhow::Error::new(other).context("PostgreSQL")),
    }
}

#[async_trait]
impl QueueSource for PgmqQueue {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            delay: true,
            holds: Holds::Expire,
            delivery_count: true,
            ordering_groups: false,
        }
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        hold: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, SourceError> {
        let until = tokio::time::Instant::now() + wait;
        let notify = self.notify_on(queue).await;
        let mut pause = FIRST_PAUSE;
        let mut polled = self.quiet_for(queue);
        loop {
            // Armed before the read, so a notification between the read and the wait counts.
            let mut notified = notify.as_ref().map(|n| Box::pin(n.notified()));
            if let Some(n) = notified.as_mut() {
                n.as_mut().enable();
            }
            let got = self.read(queue, max, hold).await?;
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if !got.is_empty() {
                let now = tokio::time::Instant::now();
                listen::lock(&self.last_message).insert(queue.to_string(), now);
            }
            if !got.is_empty() || left.is_zero() {
                return Ok(got);
            }
            match notified {
                // Polled past pgmq's throttle since the last message: any insert now notifies.
                Some(notified) if polled >= listen::THROTTLE => {
                    let visible = self.next_visible(queue).await?;
                    let quiet = left.min(listen::MAX_QUIET).min(visible.unwrap_or(left));
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep(quiet) => {}
                    }
                }
                _ => {
                    tokio::time::sleep(pause.min(left)).await;
                    polled = polled.saturating_add(pause.min(left));
                    pause = (pause * 2).min(self.settings.poll);
                }
            }
        }
    }

    async fn settle(
        &self,
        queue: &str,
        handles: &[String],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        let t = table::queue_table(queue)?;
        let (ids, counts) = self::handles(handles.iter().map(String::as_str))?;
        let sql = format!(
            "DELETE FROM {t} m USING unnest($1::bigint[], $2::integer[]) AS e(id, ct)
             WHERE m.msg_id = e.id AND m.read_ct = e.ct
             RETURNING m.msg_id"
        );
        let rows = self.query(queue, &sql, &[&ids, &counts]).await?;
        Ok(answers(&ids, &rows))
    }

    async fn put_back(
        &self,
        queue: &str,
        handle: &str,
        after: Duration,
    ) -> Result<(), SourceError> {
        let mut answers = self.set_vt(queue, &[(handle.to_string(), after)]).await?;
        answers.remove(0)
    }

    async fn put_back_batch(
        &self,
        queue: &str,
        entries: &[(String, Duration)],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        self.set_vt(queue, entries).await
    }

    async fn hold(&self, queue: &str, handle: &str, hold: Duration) -> Result<(), SourceError> {
        self.put_back(queue, handle, hold).await
    }

    async fn send(&self, messages: &[Outgoing]) -> Result<Vec<String>, SourceError> {
        for m in messages {
            qhost_message::rules::check(m).map_err(|r| SourceError::Refused(r.0))?;
            table::queue_table(&m.queue)?;
        }
        // A statement per target and delay, in the order they first appear; ids put back in
        // the messages' order.
        let mut groups: Vec<((&str, u32), Vec<usize>)> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let group = (m.queue.as_str(), m.delay_seconds);
            match groups.iter_mut().find(|(g, _)| *g == group) {
                Some((_, members)) => members.push(i),
                None => groups.push((group, vec![i])),
            }
        }
        let mut ids = vec![String::new(); messages.len()];
        for ((queue, delay), members) in groups {
            let (bodies, headers): (Vec<String>, Vec<String>) = members
                .iter()
                .map(|&i| convert::to_pgmq(&messages[i]))
                .unzip();
            let delay = i32::try_from(delay).unwrap_or(i32::MAX);
            // `now()` is the statement's transaction's start: the `enqueued_at` pgmq gives the
            // rows it inserts, so the ids answered are those the deliveries will carry.
            let rows = self
                .query(
                    queue,
                    "SELECT s, (extract(epoch FROM now()) * 1000000)::bigint
                     FROM pgmq.send_batch($1::text, $2::text[]::jsonb[], $3::text[]::jsonb[],
                                          $4::integer) AS s",
                    &[&queue, &bodies, &headers, &delay],
                )
                .await?;
            for (&i, row) in members.iter().zip(&rows) {
                let (id, enqueued_us): (i64, i64) = (row.get(0), row.get(1));
                ids[i] = format!("{queue}:{id}:{enqueued_us}");
            }
        }
        Ok(ids)
    }

    async fn depth(&self, queue: &str) -> Result<QueueDepth, SourceError> {
        let t = table::queue_table(queue)?;
        let sql = format!(
            "SELECT count(*) FILTER (WHERE vt <= clock_timestamp()),
                    count(*) FILTER (WHERE vt > clock_timestamp())
             FROM {t}"
        );
        let rows = self.query(queue, &sql, &[]).await?;
        Ok(QueueDepth {
            visible: rows[0].get::<_, i64>(0).max(0) as u64,
            invisible: rows[0].get::<_, i64>(1).max(0) as u64,
        })
    }

    fn depth_is_exact(&self) -> bool {
        true
    }
}

#[async_trait]
impl QueueAdmin for PgmqQueue {
    async fn purge(&self, queue: &str) -> Result<Purged, SourceError> {
        let t = table::queue_table(queue)?;
        let sql = format!("WITH gone AS (DELETE FROM {t} RETURNING 1) SELECT count(*) FROM gone");
        let rows = self.query(queue, &sql, &[]).await?;
        Ok(Purged::Deleted(rows[0].get::<_, i64>(0).max(0) as u64))
    }

    async fn peek(&self, queue: &str, limit: usize) -> Result<Vec<Received>, SourceError> {
        let t = table::queue_table(queue)?;
        let sql = format!(
            "SELECT msg_id, read_ct, (extract(epoch FROM enqueued_at) * 1000000)::bigint,
                    message::text, headers::text
             FROM {t} ORDER BY msg_id LIMIT $1"
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.query(queue, &sql, &[&limit]).await?;
        Ok(rows.iter().map(|r| received(queue, r)).collect())
    }

    async fn inspect(&self, queue: &str, dead_letter: &str) -> Result<String, SourceError> {
        self.inspect_queues(queue, dead_letter).await
    }
}
