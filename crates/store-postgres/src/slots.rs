//! Flow slots on PostgreSQL (the design is in `qhost_store::slots`): a row per holder with
//! its expiry, taken by `take_slots` under an advisory lock per flow key, so two hosts taking
//! the last slot at once cannot both get it. Leases and slots asked together go as two
//! statements pipelined on one connection: one round trip.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::GenericClient as _;

use qhost_store::slots::{Slot, SlotAnswer, SlotRequest};
use qhost_store::{FlowSlots, LeaseRequest, LeasesAndSlots, StoreResult};

use crate::error::failed;
use crate::{PostgresStore, acquired, ms, order};

#[async_trait]
impl FlowSlots for PostgresStore {
    async fn acquire_with_slots(
        &self,
        leases: &[LeaseRequest],
        slots: &[SlotRequest],
    ) -> StoreResult<LeasesAndSlots> {
        if slots.is_empty() {
            let rows = self.acquire_rows(leases).await?;
            return Ok((order(leases, rows, crate::acquired), Vec::new()));
        }
        let client = self.client().await?;
        let keys: Vec<&str> = slots.iter().map(|s| s.key.as_str()).collect();
        let limits: Vec<i32> = (slots.iter())
            .map(|s| i32::try_from(s.limit).unwrap_or(i32::MAX))
            .collect();
        let ttls: Vec<i64> = slots.iter().map(|s| ms(s.ttl)).collect();
        let take = self.sql("SELECT i, holder, retry_ms FROM {s}.take_slots($1, $2, $3)");
        let take = client.prepare_cached(&take).await.map_err(failed)?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&keys, &limits, &ttls];
        let (lease_rows, slot_rows) = if leases.is_empty() {
            self.trips(1);
            let rows = client.query(&take, &params).await;
            (Vec::new(), rows.map_err(failed)?)
        } else {
            // Both statements go out before either answer is read: one round trip (the
            // lease's call counts it).
            let (l, s) = tokio::join!(
                self.acquire_on(&client, leases),
                client.query(&take, &params)
            );
            (l?, s.map_err(failed)?)
        };
        let answers = order(slots, slot_rows, |row, req| {
            Ok(match row.get::<_, Option<String>>("holder") {
                Some(holder) => SlotAnswer::Held(Slot {
                    key: req.key.clone(),
                    holder,
                }),
                None => SlotAnswer::Full {
                    retry_after: Duration::from_millis(row.get::<_, i64>("retry_ms").max(0) as u64),
                },
            })
        });
        Ok((order(leases, lease_rows, acquired), answers))
    }

    async fn extend_slot(&self, slot: &Slot, ttl: Duration) -> StoreResult<bool> {
        let changed = self
            .execute(
                "UPDATE {s}.slots SET expires_ms = {s}.clock_ms() + $3
                 WHERE key = $1 AND holder = $2 AND expires_ms > {s}.clock_ms()",
                &[&slot.key, &slot.holder, &ms(ttl)],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn release_slots(&self, slots: &[Slot]) -> StoreResult<()> {
        let keys: Vec<&str> = slots.iter().map(|s| s.key.as_str()).collect();
        let holders: Vec<&str> = slots.iter().map(|s| s.holder.as_str()).collect();
        self.execute(
            "DELETE FROM {s}.slots WHERE (key, holder) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
            &[&keys, &holders],
        )
        .await?;
        Ok(())
    }

    async fn slots_held(&self, key: &str) -> StoreResult<u32> {
        let rows = self
            .query(
                "SELECT count(*) FROM {s}.slots WHERE key = $1 AND expires_ms > {s}.clock_ms()",
                &[&key],
            )
            .await?;
        Ok(rows[0].get::<_, i64>(0) as u32)
    }
}
