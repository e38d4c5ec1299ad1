//! Flow slots on Redis (the design is in `idempotency::slots`): a flow key's slots are one
//! sorted set, `NS:slots:{PLUGIN:FLOW}`, of holder tokens scored by expiry. Taking slots rides
//! in the lease call's pipeline, so a message that needs both costs one round trip per server.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::{Script, Value};

use crate::{ACQUIRE, RedisStore, acquire_invocation, corrupt, ms};
use qhost_store::slots::{Slot, SlotAnswer, SlotRequest};
use qhost_store::{FlowSlots, LeaseRequest, LeasesAndSlots, StoreResult};

static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/slot_take.lua")));
static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/slot_extend.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/slot_release.lua")));
static COUNT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/slot_count.lua")));

/// A new holder's token.
fn holder() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The take script's answer for `request`, held by `holder`.
fn taken(
    request: &SlotRequest,
    holder: String,
    reply: StoreResult<Value>,
) -> StoreResult<SlotAnswer> {
    let (held, wait_ms): (u8, i64) = redis::from_redis_value(reply?)
        .map_err(|e| corrupt(format!("a reply from the slot script: {e}")))?;
    Ok(if held == 1 {
        SlotAnswer::Held(Slot {
            key: request.key.clone(),
            holder,
        })
    } else {
        SlotAnswer::Full {
            retry_after: Duration::from_millis(wait_ms.max(0) as u64),
        }
    })
}

#[async_trait]
impl FlowSlots for RedisStore {
    async fn acquire_with_slots(
        &self,
        leases: &[LeaseRequest],
        slots: &[SlotRequest],
    ) -> StoreResult<LeasesAndSlots> {
        let owners: Vec<String> = leases.iter().map(|_| holder()).collect();
        let holders: Vec<String> = slots.iter().map(|_| holder()).collect();
        let mut invocations: Vec<_> = leases
            .iter()
            .zip(&owners)
            .map(|(r, owner)| (r.key.as_str(), acquire_invocation(r, owner)))
            .collect();
        for (r, holder) in slots.iter().zip(&holders) {
            let mut take = TAKE.key(&r.key);
            take.arg(holder).arg(r.limit).arg(ms(r.ttl));
            invocations.push((r.key.as_str(), take));
        }
        let mut replies = self.run_mixed(&[&ACQUIRE, &TAKE], invocations).await;
        let slot_replies = replies.split_off(leases.len());
        let acquired = self.each_acquired(leases, owners, replies).await;
        let slots = (slots.iter().zip(holders).zip(slot_replies))
            .map(|((r, holder), reply)| taken(r, holder, reply))
            .collect();
        Ok((acquired, slots))
    }

    async fn extend_slot(&self, slot: &Slot, ttl: Duration) -> StoreResult<bool> {
        let mut invocation = EXTEND.key(&slot.key);
        invocation.arg(&slot.holder).arg(ms(ttl));
        let mut pipe = redis::pipe();
        pipe.load_script(&EXTEND)
            .ignore()
            .invoke_script(&invocation);
        let (held,): (i64,) = self.query(&pipe).await?;
        Ok(held == 1)
    }

    async fn release_slots(&self, slots: &[Slot]) -> StoreResult<()> {
        let invocations = (slots.iter())
            .map(|slot| {
                let mut release = RELEASE.key(&slot.key);
                release.arg(&slot.holder);
                (slot.key.as_str(), release)
            })
            .collect();
        let replies = self.run_all(&RELEASE, invocations).await;
        replies
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    async fn slots_held(&self, key: &str) -> StoreResult<u32> {
        let mut pipe = redis::pipe();
        pipe.load_script(&COUNT)
            .ignore()
            .invoke_script(&COUNT.key(key));
        let (held,): (u32,) = self.query(&pipe).await?;
        Ok(held)
    }
}
