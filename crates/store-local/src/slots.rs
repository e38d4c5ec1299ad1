//! Flow slots in the embedded store (the design is in `idempotency::slots`): one row per
//! holder with its expiry in the `slots` table (created with the store's schema), taken in
//! the same SQLite transaction as the leases asked beside it.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Transaction, params};

use crate::{LocalStore, acquire_one};
use qhost_message::now_ms;
use qhost_store::slots::{self, Slot, SlotAnswer, SlotRequest};
use qhost_store::{FlowSlots, LeaseRequest, LeasesAndSlots, StoreResult};

/// Takes one of `req.limit` slots of its key at `now`, or says how long until one lapses.
fn take(tx: &Transaction<'_>, req: &SlotRequest, now: i64) -> anyhow::Result<SlotAnswer> {
    tx.prepare_cached("DELETE FROM slots WHERE key = ?1 AND expires_at_ms <= ?2")?
        .execute(params![req.key, now])?;
    let held: Vec<u64> = tx
        .prepare_cached("SELECT expires_at_ms FROM slots WHERE key = ?1")?
        .query_map([&req.key], |r| r.get::<_, i64>(0))?
        .map(|e| e.map(|ms| ms as u64))
        .collect::<Result<_, _>>()?;
    if let Err(retry_after) = slots::decide(req.limit, now as u64, &held) {
        return Ok(SlotAnswer::Full { retry_after });
    }
    let holder = uuid::Uuid::new_v4().to_string();
    tx.prepare_cached("INSERT INTO slots (key, holder, expires_at_ms) VALUES (?1, ?2, ?3)")?
        .execute(params![req.key, holder, now + req.ttl.as_millis() as i64])?;
    Ok(SlotAnswer::Held(Slot {
        key: req.key.clone(),
        holder,
    }))
}

#[async_trait]
impl FlowSlots for LocalStore {
    async fn acquire_with_slots(
        &self,
        leases: &[LeaseRequest],
        slots: &[SlotRequest],
    ) -> StoreResult<LeasesAndSlots> {
        let (leases, slots) = (leases.to_vec(), slots.to_vec());
        let (acquired, taken) = self
            .write(move |tx| {
                let now = now_ms() as i64;
                let acquired: Vec<_> = (leases.iter())
                    .map(|r| acquire_one(tx, r, now))
                    .collect::<anyhow::Result<_>>()?;
                let taken: Vec<_> = (slots.iter())
                    .map(|r| take(tx, r, now))
                    .collect::<anyhow::Result<_>>()?;
                Ok((acquired, taken))
            })
            .await?;
        // One transaction: every request is answered, or the call fails whole.
        Ok((
            acquired.into_iter().map(Ok).collect(),
            taken.into_iter().map(Ok).collect(),
        ))
    }

    async fn extend_slot(&self, slot: &Slot, ttl: Duration) -> StoreResult<bool> {
        let slot = slot.clone();
        self.write(move |tx| {
            let now = now_ms() as i64;
            let changed = tx
                .prepare_cached(
                    "UPDATE slots SET expires_at_ms = ?3
                     WHERE key = ?1 AND holder = ?2 AND expires_at_ms > ?4",
                )?
                .execute(params![
                    slot.key,
                    slot.holder,
                    now + ttl.as_millis() as i64,
                    now
                ])?;
            Ok(changed == 1)
        })
        .await
    }

    async fn release_slots(&self, slots: &[Slot]) -> StoreResult<()> {
        let slots = slots.to_vec();
        self.write(move |tx| {
            let mut delete =
                tx.prepare_cached("DELETE FROM slots WHERE key = ?1 AND holder = ?2")?;
            for slot in &slots {
                delete.execute(params![slot.key, slot.holder])?;
            }
            Ok(())
        })
        .await
    }

    async fn slots_held(&self, key: &str) -> StoreResult<u32> {
        let key = key.to_string();
        self.write(move |tx| {
            let held: i64 = tx
                .prepare_cached("SELECT COUNT(*) FROM slots WHERE key = ?1 AND expires_at_ms > ?2")?
                .query_row(params![key, now_ms() as i64], |r| r.get(0))?;
            Ok(held as u32)
        })
        .await
    }
}
