//! Handler state in the embedded store: one table, read and written inside the store's own
//! transactions, so a completion's state is committed in the same SQLite transaction as its
//! completed record (see the `kv` module's docs).

use rusqlite::{OptionalExtension, Transaction, params};

use qhost_store::commit::{self, BucketCommit, Op};

/// The table: one row per key, with its expiry (`NULL`: none).
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kv (
    bucket TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    expires_at_ms INTEGER,
    PRIMARY KEY (bucket, key)
);
";

/// The live value of `key` in `bucket`.
pub(crate) fn get(
    tx: &Transaction<'_>,
    bucket: &str,
    key: &str,
    now: i64,
) -> anyhow::Result<Option<Vec<u8>>> {
    Ok(tx
        .prepare_cached(
            "SELECT value FROM kv WHERE bucket = ?1 AND key = ?2
             AND (expires_at_ms IS NULL OR expires_at_ms > ?3)",
        )?
        .query_row(params![bucket, key, now], |r| r.get(0))
        .optional()?)
}

/// The live keys of `bucket`, in order, at most `limit`.
pub(crate) fn list(
    tx: &Transaction<'_>,
    bucket: &str,
    limit: usize,
    now: i64,
) -> anyhow::Result<Vec<String>> {
    let mut stmt = tx.prepare_cached(
        "SELECT key FROM kv WHERE bucket = ?1 AND (expires_at_ms IS NULL OR expires_at_ms > ?2)
         ORDER BY key LIMIT ?3",
    )?;
    let keys = stmt
        .query_map(params![bucket, now, limit as i64], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(keys)
}

/// Whether every key the commit read still holds what was seen, and every counter it adds to
/// is still a counter.
pub(crate) fn still_holds(
    tx: &Transaction<'_>,
    buckets: &[BucketCommit],
    now: i64,
) -> anyhow::Result<bool> {
    for b in buckets {
        for read in &b.reads {
            let value = get(tx, &b.bucket, &read.key, now)?;
            if value.map(|v| commit::sha1_hex(&v)) != read.seen {
                return Ok(false);
            }
        }
        for (key, op) in &b.writes {
            if matches!(op, Op::Add { .. })
                && commit::counter(get(tx, &b.bucket, key, now)?.as_deref()).is_none()
            {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Applies the commit's writes (checked by [`still_holds`] first).
pub(crate) fn apply(
    tx: &Transaction<'_>,
    buckets: &[BucketCommit],
    now: i64,
) -> anyhow::Result<()> {
    for b in buckets {
        let expires = (b.ttl_ms > 0).then(|| now + b.ttl_ms as i64);
        for (key, op) in &b.writes {
            let value = match op {
                Op::Delete => {
                    tx.prepare_cached("DELETE FROM kv WHERE bucket = ?1 AND key = ?2")?
                        .execute(params![b.bucket, key])?;
                    continue;
                }
                Op::Set { value } => value.clone(),
                Op::Add { delta } => {
                    let now_value = get(tx, &b.bucket, key, now)?;
                    let base = commit::counter(now_value.as_deref()).unwrap_or(0);
                    (base + delta).to_string().into_bytes()
                }
            };
            tx.prepare_cached(
                "INSERT INTO kv (bucket, key, value, expires_at_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (bucket, key) DO UPDATE SET value = ?3, expires_at_ms = ?4",
            )?
            .execute(params![b.bucket, key, value, expires])?;
        }
    }
    Ok(())
}
