//! What a fleet keeps beside its leases: claims (a schedule's tick, claimed and done in one
//! step), shared records replaced by compare-and-set, the fleet rate, and handler state's
//! reads. Each is one statement or one function call.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use qhost_message::Outgoing;
use qhost_store::pending;
use qhost_store::rate::{Admission, MAX_WAIT, Rate};
use qhost_store::{Claimed, Claims, FleetRate, KeyStatus, SharedRecords, StateReads, StoreResult};

use crate::{PostgresStore, decode_outbox, ms};

#[async_trait]
impl Claims for PostgresStore {
    async fn claim(
        &self,
        key: &str,
        outbox: &[Outgoing],
        window: Duration,
    ) -> StoreResult<Claimed> {
        let outbox = Some(pending::encode(outbox, None)).filter(|t| !t.is_empty());
        let rows = self
            .query(
                "SELECT won, outbox, pending_ms FROM {s}.claim($1, $2, $3)",
                &[&key, &outbox, &ms(window)],
            )
            .await?;
        let row = &rows[0];
        if row.get::<_, bool>(0) {
            return Ok(Claimed::Won);
        }
        Ok(Claimed::Taken {
            pending_outbox: decode_outbox(row.get(1))?.0,
            pending_for: Duration::from_millis(row.get::<_, i64>(2).max(0) as u64),
        })
    }

    async fn take_over(&self, key: &str, after: Duration) -> StoreResult<Option<Vec<Outgoing>>> {
        let rows = self
            .query("SELECT {s}.take_over($1, $2)", &[&key, &ms(after)])
            .await?;
        let taken: Option<&str> = rows.first().and_then(|r| r.get(0));
        taken.map(|t| Ok(decode_outbox(Some(t))?.0)).transpose()
    }

    async fn status(&self, key: &str) -> StoreResult<KeyStatus> {
        PostgresStore::status(self, key).await
    }

    async fn time(&self) -> StoreResult<SystemTime> {
        let rows = self.query("SELECT {s}.clock_ms()", &[]).await?;
        let at = rows[0].get::<_, i64>(0).max(0) as u64;
        Ok(SystemTime::UNIX_EPOCH + Duration::from_millis(at))
    }
}

#[async_trait]
impl SharedRecords for PostgresStore {
    async fn record(&self, key: &str) -> StoreResult<Option<String>> {
        let rows = self
            .query(
                "SELECT value FROM {s}.records WHERE key = $1 AND expires_ms > {s}.clock_ms()",
                &[&key],
            )
            .await?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    async fn swap_record(
        &self,
        key: &str,
        old: Option<&str>,
        new: &str,
        keep: Duration,
    ) -> StoreResult<bool> {
        let keep = ms(keep);
        let changed = match old {
            // An expired record counts as absent.
            None => {
                self.execute(
                    "INSERT INTO {s}.records AS r (key, value, expires_ms)
                     VALUES ($1, $2, {s}.clock_ms() + $3)
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value,
                         expires_ms = excluded.expires_ms
                     WHERE r.expires_ms <= {s}.clock_ms()",
                    &[&key, &new, &keep],
                )
                .await?
            }
            Some(old) => {
                self.execute(
                    "UPDATE {s}.records SET value = $3, expires_ms = {s}.clock_ms() + $4
                     WHERE key = $1 AND value = $2 AND expires_ms > {s}.clock_ms()",
                    &[&key, &old, &new, &keep],
                )
                .await?
            }
        };
        Ok(changed == 1)
    }
}

#[async_trait]
impl FleetRate for PostgresStore {
    async fn admit(&self, key: &str, rate: Rate) -> StoreResult<Admission> {
        let us = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let rows = self
            .query(
                "SELECT later, wait_us FROM {s}.admit($1, $2, $3, $4)",
                &[
                    &key,
                    &us(rate.interval_us()),
                    &us(rate.tolerance_us()),
                    &us(MAX_WAIT.as_micros() as u64),
                ],
            )
            .await?;
        let wait = Duration::from_micros(rows[0].get::<_, i64>(1).max(0) as u64);
        Ok(if rows[0].get::<_, bool>(0) {
            Admission::Later(wait)
        } else {
            Admission::After(wait)
        })
    }
}

#[async_trait]
impl StateReads for PostgresStore {
    async fn kv_get(&self, bucket: &str, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let rows = self
            .query(
                "SELECT {s}.kv_value($1, k, {s}.clock_ms())
                 FROM unnest($2::text[]) WITH ORDINALITY AS u(k, o) ORDER BY o",
                &[&bucket, &keys],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn kv_list(&self, bucket: &str, limit: usize) -> StoreResult<Vec<String>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .query(
                "SELECT key FROM {s}.kv
                 WHERE bucket = $1 AND (expires_ms IS NULL OR expires_ms > {s}.clock_ms())
                 ORDER BY key LIMIT $2",
                &[&bucket, &limit],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}
