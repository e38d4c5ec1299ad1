//! The embedded idempotency store, with the lease semantics of the Redis one, in SQLite.
//!
//! Every step runs in one SQLite transaction, which is what makes acquire atomic across the
//! workers of one host and across host processes sharing the data directory. A lease that has
//! lapsed counts as absent, exactly as a Redis key whose TTL ran out.
//!
//! Layout: the store and its leases, completions, claims and records here; `slots` (flow
//! slots), `state` (handler state). It passes the store contract's conformance suite, in memory
//! and on disk.

mod slots;
mod state;

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Transaction, params};

use crate::state as kv;
use qhost_message::{Outgoing, now_ms};
use qhost_sqlite::Db;
use qhost_store::pending;
use qhost_store::rate::{self, Admission, Rate};
use qhost_store::{
    Acquired, Claimed, Claims, Committed, Completion, FleetRate, IdempotencyError,
    IdempotencyStore, KeyStatus, Lease, LeaseRequest, Released, SharedRecords, StateReads,
    StoreResult,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('leased', 'completed', 'released')),
    owner TEXT,
    fencing INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    outbox TEXT,
    outbox_at_ms INTEGER,
    failures INTEGER NOT NULL DEFAULT 0,
    digest TEXT
);
CREATE TABLE IF NOT EXISTS rate (
    key TEXT PRIMARY KEY,
    tat_us INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS slots (
    key TEXT NOT NULL,
    holder TEXT NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    PRIMARY KEY (key, holder)
);
CREATE TABLE IF NOT EXISTS records (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    expires_at_ms INTEGER NOT NULL
);
";

/// Adds what later versions keep to a store written by an earlier one.
const MIGRATIONS: [(&str, &str); 2] = [
    (
        "failures",
        "ALTER TABLE idempotency ADD COLUMN failures INTEGER NOT NULL DEFAULT 0",
    ),
    ("digest", "ALTER TABLE idempotency ADD COLUMN digest TEXT"),
];

/// The embedded idempotency store.
#[derive(Debug)]
pub struct LocalStore {
    db: Db,
}

struct Row {
    state: String,
    owner: Option<String>,
    fencing: u64,
    expires_at_ms: i64,
    outbox: Option<String>,
    outbox_at_ms: Option<i64>,
    failures: u32,
    digest: Option<String>,
}

impl LocalStore {
    /// Opens the store at `path`, or an in-memory one for `None`.
    pub fn open(path: Option<&Path>) -> anyhow::Result<Self> {
        let db = Db::open(path)?;
        db.call_now(|c| {
            c.execute_batch(SCHEMA)?;
            c.execute_batch(kv::SCHEMA)?;
            for (column, add) in MIGRATIONS {
                let probe = format!("SELECT {column} FROM idempotency LIMIT 0");
                if c.prepare(&probe).is_err() {
                    c.execute_batch(add)?;
                }
            }
            Ok(())
        })?;
        Ok(LocalStore { db })
    }
}

fn read(tx: &Transaction<'_>, key: &str) -> anyhow::Result<Option<Row>> {
    Ok(tx
        .prepare_cached(
            "SELECT state, owner, fencing, expires_at_ms, outbox, outbox_at_ms, failures, digest
             FROM idempotency WHERE key = ?1",
        )?
        .query_row([key], |r| {
            Ok(Row {
                state: r.get(0)?,
                owner: r.get(1)?,
                fencing: r.get::<_, i64>(2)? as u64,
                expires_at_ms: r.get(3)?,
                outbox: r.get(4)?,
                outbox_at_ms: r.get(5)?,
                failures: r.get(6)?,
                digest: r.get(7)?,
            })
        })
        .optional()?)
}

/// The shared record at `key`, unless it has expired.
fn read_record(tx: &Transaction<'_>, key: &str) -> anyhow::Result<Option<String>> {
    Ok(tx
        .prepare_cached("SELECT value FROM records WHERE key = ?1 AND expires_at_ms > ?2")?
        .query_row(params![key, now_ms() as i64], |row| row.get(0))
        .optional()?)
}

pub(crate) fn acquire_one(
    tx: &Transaction<'_>,
    req: &LeaseRequest,
    now: i64,
) -> anyhow::Result<Acquired> {
    let row = read(tx, &req.key)?;
    let live = row.as_ref().filter(|r| r.expires_at_ms > now);
    match live.map(|r| r.state.as_str()) {
        Some("completed") => {
            let stored = live.and_then(|r| r.outbox.as_deref());
            let (pending_outbox, pending_result) = pending::decode(stored.unwrap_or_default())?;
            let since = live.and_then(|r| r.outbox_at_ms).unwrap_or(now);
            let pending_for = Duration::from_millis((now - since).max(0) as u64);
            return Ok(Acquired::Completed {
                pending_outbox,
                pending_result,
                pending_for,
                digest: live.and_then(|r| r.digest.clone()),
            });
        }
        Some("leased") => {
            let left = live.map_or(0, |r| r.expires_at_ms - now);
            return Ok(Acquired::Busy {
                retry_after: Duration::from_millis(left as u64),
            });
        }
        _ => {}
    }
    let fencing_token = row.as_ref().map_or(0, |r| r.fencing) + 1;
    let failures = row.map_or(0, |r| r.failures);
    let owner = uuid::Uuid::new_v4().to_string();
    tx.prepare_cached(
        "INSERT INTO idempotency (key, state, owner, fencing, expires_at_ms, outbox)
         VALUES (?1, 'leased', ?2, ?3, ?4, NULL)
         ON CONFLICT (key) DO UPDATE SET state = 'leased', owner = ?2, fencing = ?3,
             expires_at_ms = ?4, outbox = NULL, outbox_at_ms = NULL",
    )?
    .execute(params![
        req.key,
        owner,
        fencing_token as i64,
        now + req.ttl.as_millis() as i64
    ])?;
    Ok(Acquired::Granted(Lease {
        key: req.key.clone(),
        owner,
        fencing_token,
        failures,
        window: req.window,
    }))
}

/// Updates a live lease held by `lease.owner`; returns whether it was.
fn update_owned(
    tx: &Transaction<'_>,
    lease: &Lease,
    set: &str,
    values: &[&dyn rusqlite::ToSql],
) -> anyhow::Result<bool> {
    let sql = format!(
        "UPDATE idempotency SET {set}
         WHERE key = ?1 AND owner = ?2 AND state = 'leased' AND expires_at_ms > ?3"
    );
    let now = now_ms() as i64;
    let mut all: Vec<&dyn rusqlite::ToSql> = vec![&lease.key, &lease.owner, &now];
    all.extend_from_slice(values);
    Ok(tx.prepare_cached(&sql)?.execute(all.as_slice())? == 1)
}

/// What completing one lease came to.
enum Completed {
    Done,
    Lost,
    Conflict,
}

fn complete_one(tx: &Transaction<'_>, done: &Completion) -> anyhow::Result<Completed> {
    let outbox =
        Some(pending::encode(&done.outbox, done.result.as_deref())).filter(|t| !t.is_empty());
    let now = now_ms() as i64;
    let state = &done.state.buckets;
    if !state.is_empty() {
        // The lease is checked before the state: a lost lease is lost, whatever the state.
        let held = read(tx, &done.lease.key)?.is_some_and(|r| {
            r.state == "leased"
                && r.owner.as_deref() == Some(done.lease.owner.as_str())
                && r.expires_at_ms > now
        });
        if !held {
            return Ok(Completed::Lost);
        }
        if !kv::still_holds(tx, state, now)? {
            return Ok(Completed::Conflict);
        }
        kv::apply(tx, state, now)?;
    }
    let expires = now + done.window.as_millis() as i64;
    let held = update_owned(
        tx,
        &done.lease,
        "state = 'completed', owner = NULL, expires_at_ms = ?4, outbox = ?5, outbox_at_ms = ?6,
         failures = 0, digest = ?7",
        &[&expires, &outbox, &now, &done.digest],
    )?;
    Ok(if held {
        Completed::Done
    } else {
        Completed::Lost
    })
}

impl LocalStore {
    /// What the store holds for `key` (a scoped key).
    pub async fn status(&self, key: &str) -> StoreResult<KeyStatus> {
        let key = key.to_string();
        self.write(move |tx| {
            let now = now_ms() as i64;
            Ok(match read(tx, &key)?.filter(|r| r.expires_at_ms > now) {
                Some(r) if r.state == "leased" => KeyStatus::InProgress {
                    owner: r.owner.unwrap_or_default(),
                    fencing_token: r.fencing,
                },
                Some(r) if r.state == "completed" => KeyStatus::Completed {
                    pending_outbox: pending::decode(r.outbox.as_deref().unwrap_or_default())?
                        .0
                        .len(),
                },
                _ => KeyStatus::Unknown,
            })
        })
        .await
    }

    /// Forgets everything it holds: a test's world starts from nothing (`qhost test`).
    pub async fn forget_all(&self) -> StoreResult<()> {
        self.write(|tx| {
            tx.execute_batch(
                "DELETE FROM idempotency; DELETE FROM rate; DELETE FROM records; DELETE FROM kv;",
            )?;
            Ok(())
        })
        .await
    }

    /// Writes state as it stood before a test: each bucket's writes, applied as a commit
    /// applies them.
    pub async fn seed(&self, buckets: Vec<qhost_store::commit::BucketCommit>) -> StoreResult<()> {
        self.write(move |tx| kv::apply(tx, &buckets, now_ms() as i64))
            .await
    }

    pub(crate) async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> anyhow::Result<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.db
            .call(move |c| {
                let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let out = f(&tx)?;
                tx.commit()?;
                Ok(out)
            })
            .await
            .map_err(IdempotencyError::unavailable)
    }
}

#[async_trait]
impl IdempotencyStore for LocalStore {
    async fn ping(&self) -> StoreResult<()> {
        self.write(|_| Ok(())).await
    }
    async fn acquire(&self, requests: &[LeaseRequest]) -> StoreResult<Vec<StoreResult<Acquired>>> {
        let requests = requests.to_vec();
        let acquired: Vec<Acquired> = self
            .write(move |tx| {
                let now = now_ms() as i64;
                requests.iter().map(|r| acquire_one(tx, r, now)).collect()
            })
            .await?;
        // One transaction: every key is answered, or the call fails whole.
        Ok(acquired.into_iter().map(Ok).collect())
    }
    async fn extend(&self, lease: &Lease, ttl: Duration) -> StoreResult<()> {
        let owned = lease.clone();
        let held = self
            .write(move |tx| {
                let expires = now_ms() as i64 + ttl.as_millis() as i64;
                update_owned(tx, &owned, "expires_at_ms = ?4", &[&expires])
            })
            .await?;
        IdempotencyError::owned(lease, held)
    }
    async fn complete(
        &self,
        completions: &[Completion],
    ) -> StoreResult<Vec<StoreResult<Committed>>> {
        let batch = completions.to_vec();
        let done: Vec<Completed> = self
            .write(move |tx| batch.iter().map(|c| complete_one(tx, c)).collect())
            .await?;
        Ok(completions
            .iter()
            .zip(done)
            .map(|(c, done)| match done {
                // The embedded queue is another database: the caller sends the outbox.
                Completed::Done => Ok(Committed::Pending),
                Completed::Lost => Err(IdempotencyError::LeaseLost(c.lease.key.clone())),
                Completed::Conflict => Err(IdempotencyError::Conflict(c.lease.key.clone())),
            })
            .collect())
    }
    async fn outbox_sent(&self, key: &str) -> StoreResult<()> {
        let key = key.to_string();
        self.write(move |tx| {
            tx.prepare_cached(
                "UPDATE idempotency SET outbox = NULL, outbox_at_ms = NULL
                 WHERE key = ?1 AND state = 'completed'",
            )?
            .execute([key])?;
            Ok(())
        })
        .await
    }
    async fn release(&self, lease: &Lease, why: Released) -> StoreResult<()> {
        let owned = lease.clone();
        let failures = match why {
            Released::NotRun => "failures",
            Released::Failed => "failures + 1",
            Released::GaveUp => "0",
        };
        let set = format!("state = 'released', owner = NULL, failures = {failures}");
        let held = self
            .write(move |tx| update_owned(tx, &owned, &set, &[]))
            .await?;
        IdempotencyError::owned(lease, held)
    }
}

/// Claims `key` (see [`Claims::claim`]): a live record is someone's; anything else becomes a
/// completed record with the outbox pending.
fn claim_one(
    tx: &Transaction<'_>,
    key: &str,
    outbox: &str,
    window: Duration,
) -> anyhow::Result<Claimed> {
    let now = now_ms() as i64;
    if let Some(live) = read(tx, key)?.filter(|r| r.expires_at_ms > now && r.state != "released") {
        let stored = live.outbox.as_deref().unwrap_or_default();
        let since = live.outbox_at_ms.unwrap_or(now);
        return Ok(Claimed::Taken {
            pending_outbox: pending::decode(stored)?.0,
            pending_for: Duration::from_millis((now - since).max(0) as u64),
        });
    }
    let outbox = Some(outbox).filter(|t| !t.is_empty());
    tx.prepare_cached(
        "INSERT OR REPLACE INTO idempotency
             (key, state, owner, fencing, expires_at_ms, outbox, outbox_at_ms, failures, digest)
         VALUES (?1, 'completed', NULL, 1, ?2, ?3, ?4, 0, NULL)",
    )?
    .execute(params![
        key,
        now + window.as_millis() as i64,
        outbox,
        outbox.map(|_| now)
    ])?;
    Ok(Claimed::Won)
}

/// `key`'s pending outbox, with its pending clock restarted, when it has waited `after`.
fn take_over_one(
    tx: &Transaction<'_>,
    key: &str,
    after: Duration,
) -> anyhow::Result<Option<Vec<Outgoing>>> {
    let now = now_ms() as i64;
    let Some(live) = read(tx, key)?.filter(|r| r.expires_at_ms > now && r.state == "completed")
    else {
        return Ok(None);
    };
    let stored = live.outbox.as_deref().unwrap_or_default();
    let since = live.outbox_at_ms.unwrap_or(now);
    if stored.is_empty() || now - since < after.as_millis() as i64 {
        return Ok(None);
    }
    tx.prepare_cached("UPDATE idempotency SET outbox_at_ms = ?2 WHERE key = ?1")?
        .execute(params![key, now])?;
    Ok(Some(pending::decode(stored)?.0))
}

#[async_trait]
impl Claims for LocalStore {
    async fn claim(
        &self,
        key: &str,
        outbox: &[Outgoing],
        window: Duration,
    ) -> StoreResult<Claimed> {
        let (key, outbox) = (key.to_string(), pending::encode(outbox, None));
        self.write(move |tx| claim_one(tx, &key, &outbox, window))
            .await
    }
    async fn take_over(&self, key: &str, after: Duration) -> StoreResult<Option<Vec<Outgoing>>> {
        let key = key.to_string();
        self.write(move |tx| take_over_one(tx, &key, after)).await
    }
    async fn status(&self, key: &str) -> StoreResult<KeyStatus> {
        LocalStore::status(self, key).await
    }
    async fn time(&self) -> StoreResult<std::time::SystemTime> {
        Ok(std::time::SystemTime::now())
    }
}

#[async_trait]
impl SharedRecords for LocalStore {
    async fn record(&self, key: &str) -> StoreResult<Option<String>> {
        let key = key.to_string();
        self.write(move |tx| read_record(tx, &key)).await
    }
    async fn swap_record(
        &self,
        key: &str,
        old: Option<&str>,
        new: &str,
        keep: Duration,
    ) -> StoreResult<bool> {
        let (key, old, new) = (key.to_string(), old.map(str::to_string), new.to_string());
        self.write(move |tx| {
            if read_record(tx, &key)? != old {
                return Ok(false);
            }
            let expires = now_ms() as i64 + keep.as_millis() as i64;
            tx.prepare_cached(
                "INSERT INTO records (key, value, expires_at_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value,
                 expires_at_ms = excluded.expires_at_ms",
            )?
            .execute(params![key, new, expires])?;
            Ok(true)
        })
        .await
    }
}

#[async_trait]
impl FleetRate for LocalStore {
    async fn admit(&self, key: &str, rate: Rate) -> StoreResult<Admission> {
        let key = key.to_string();
        self.write(move |tx| {
            let stored: Option<i64> = tx
                .prepare_cached("SELECT tat_us FROM rate WHERE key = ?1")?
                .query_row([&key], |row| row.get(0))
                .optional()?;
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64);
            let (admission, next) = rate::decide(rate, now_us, stored.map(|t| t as u64));
            if let Some(next) = next {
                tx.prepare_cached(
                    "INSERT INTO rate (key, tat_us) VALUES (?1, ?2)
                     ON CONFLICT (key) DO UPDATE SET tat_us = excluded.tat_us",
                )?
                .execute(params![key, next as i64])?;
            }
            Ok(admission)
        })
        .await
    }
}

#[async_trait]
impl StateReads for LocalStore {
    async fn kv_get(&self, bucket: &str, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let (bucket, keys) = (bucket.to_string(), keys.to_vec());
        self.write(move |tx| {
            let now = now_ms() as i64;
            keys.iter().map(|k| kv::get(tx, &bucket, k, now)).collect()
        })
        .await
    }
    async fn kv_list(&self, bucket: &str, limit: usize) -> StoreResult<Vec<String>> {
        let bucket = bucket.to_string();
        self.write(move |tx| kv::list(tx, &bucket, limit, now_ms() as i64))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use qhost_store::conformance::assert_conforms;

    use super::LocalStore;

    #[tokio::test(flavor = "multi_thread")]
    async fn the_embedded_store_conforms() {
        let store = Arc::new(LocalStore::open(None).unwrap());
        assert_conforms(store, "conformance").await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_embedded_store_on_disk_conforms() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(Some(&dir.path().join("store.db"))).unwrap();
        assert_conforms(Arc::new(store), "conformance").await;
    }
}
