//! Handler state on Redis (the design is in the `kv` module's docs): a bucket is a sorted set of its
//! keys by expiry, `NS:kv:{PLUGIN/BUCKET}`, beside one string per key,
//! `NS:kv:{PLUGIN/BUCKET}:KEY`; the hash tag keeps a bucket in one slot. On one server the
//! completion script checks and writes the state; on a cluster the commit takes the three
//! steps the module docs describe.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, ScriptInvocation, Value};

use crate::{RedisStore, corrupt, failed, ms};
use qhost_message::now_ms;
use qhost_redis_link::RedisLink;
use qhost_store::commit::{BucketCommit, Op};
use qhost_store::pending::{self, PendingState};
use qhost_store::{Completion, IdempotencyError, StoreResult};

const KV: &str = include_str!("../lua/kv.lua");

/// The completion script, which takes a run's state on one server.
pub(super) static COMPLETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{KV}\n{}", include_str!("../lua/complete.lua"))));
static CHECK: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{KV}\n{}", include_str!("../lua/kv_check.lua"))));
static APPLY: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{KV}\n{}", include_str!("../lua/kv_apply.lua"))));

/// The key holding `key`'s value in the stored bucket `bucket`.
fn value_key(bucket: &str, key: &str) -> String {
    format!("{bucket}:{key}")
}

/// Adds `buckets`' operations to `invocation`, whose KEYS so far number `keys_before`.
pub(super) fn add_ops(
    invocation: &mut ScriptInvocation<'_>,
    buckets: &[BucketCommit],
    keys_before: usize,
) {
    let count: usize = buckets.iter().map(|b| b.reads.len() + b.writes.len()).sum();
    invocation.arg(count);
    let mut next_key = keys_before + 1;
    for b in buckets {
        invocation.key(&b.bucket);
        let index = next_key;
        next_key += 1;
        let ttl = b.ttl_ms;
        for read in &b.reads {
            invocation.key(value_key(&b.bucket, &read.key));
            let seen = read.seen.clone().unwrap_or_default();
            invocation
                .arg("r")
                .arg(next_key)
                .arg(index)
                .arg(&read.key)
                .arg(seen)
                .arg(ttl);
            next_key += 1;
        }
        for (key, op) in &b.writes {
            invocation.key(value_key(&b.bucket, key));
            invocation.arg(match op {
                Op::Set { .. } => "s",
                Op::Delete => "d",
                Op::Add { .. } => "a",
            });
            invocation.arg(next_key).arg(index).arg(key);
            match op {
                Op::Set { value } => invocation.arg(value.as_slice()),
                Op::Delete => invocation.arg(""),
                Op::Add { delta } => invocation.arg(*delta),
            };
            invocation.arg(ttl);
            next_key += 1;
        }
    }
}

/// The marker that says the writes of a completed run of `record`'s key are applied to
/// `bucket`. It names the key, not the run: should the record's primary lose the completion in
/// a failover, the key's next run finds its writes applied already, and its own are not
/// applied again. It holds the fencing token of the run that applied them.
fn marker(bucket: &str, record: &str) -> String {
    format!("{bucket}#applied:{record}")
}

impl RedisStore {
    /// Whether this store is a cluster, where a commit with state takes three steps.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.link, RedisLink::Cluster(..))
    }

    /// Step 1 on a cluster: for each completion, whether its reads still hold (per bucket).
    pub(super) async fn state_holds(&self, completions: &[&Completion]) -> Vec<StoreResult<bool>> {
        let mut owners = Vec::new();
        let invocations: Vec<(&str, ScriptInvocation<'_>)> = completions
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.state.buckets.iter().map(move |b| (i, b)))
            .map(|(i, b)| {
                owners.push(i);
                let mut invocation = CHECK.prepare_invoke();
                let only_this = std::slice::from_ref(b);
                add_ops(&mut invocation, only_this, 0);
                (b.bucket.as_str(), invocation)
            })
            .collect();
        let replies = self.run_all(&CHECK, invocations).await;
        let mut held: Vec<StoreResult<bool>> = vec![Ok(true); completions.len()];
        for (i, reply) in owners.into_iter().zip(replies) {
            let answer = reply.and_then(|v| match v {
                Value::Int(1) => Ok(true),
                Value::Int(0) => Ok(false),
                other => Err(corrupt(format!("a reply from the state check: {other:?}"))),
            });
            held[i] = match (&held[i], answer) {
                (Err(_), _) | (Ok(false), _) => continue,
                (Ok(true), answer) => answer,
            };
        }
        held
    }

    /// Step 3 on a cluster (and what a delivery of a completed key does when it finds writes
    /// still pending): applies `state`, committed by the run that completed `record`, unless
    /// it was. Ok once every bucket has it.
    pub(super) async fn apply_state(
        &self,
        record: &str,
        state: &PendingState,
        keep: Duration,
    ) -> StoreResult<()> {
        let markers: Vec<String> = (state.commit.buckets.iter())
            .map(|b| marker(&b.bucket, record))
            .collect();
        let invocations = (state.commit.buckets.iter())
            .zip(&markers)
            .filter(|(b, _)| !b.writes.is_empty())
            .map(|(b, marker)| {
                let mut invocation = APPLY.key(marker);
                invocation.arg(ms(keep)).arg(state.token);
                let writes = BucketCommit {
                    reads: Vec::new(),
                    ..b.clone()
                };
                add_ops(&mut invocation, std::slice::from_ref(&writes), 1);
                (b.bucket.as_str(), invocation)
            })
            .collect();
        for reply in self.run_all(&APPLY, invocations).await {
            reply?;
        }
        Ok(())
    }

    /// Applies the state a completed record found by `acquire` still holds, if any: its
    /// outbox is carried out only after.
    pub(super) async fn apply_pending(
        &self,
        record: &str,
        pending: &str,
        keep: Duration,
    ) -> StoreResult<()> {
        let (_, _, state) = pending::decode_with_state(pending)
            .map_err(|e| corrupt(format!("a stored outbox: {e}")))?;
        match state {
            Some(state) if state.commit.has_writes() => {
                self.apply_state(record, &state, keep).await
            }
            _ => Ok(()),
        }
    }

    /// The live values of `keys` in `bucket`.
    pub(super) async fn get_state(
        &self,
        bucket: &str,
        keys: &[String],
    ) -> StoreResult<Vec<Option<Vec<u8>>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("MGET");
        for key in keys {
            cmd.arg(value_key(bucket, key));
        }
        let mut link = self.link.clone();
        self.count_round_trip();
        cmd.query_async(&mut link).await.map_err(failed)
    }

    /// The live keys of `bucket`, in order, at most `limit`.
    pub(super) async fn list_state(&self, bucket: &str, limit: usize) -> StoreResult<Vec<String>> {
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(bucket)
            .arg(format!("({}", now_ms()))
            .arg("+inf")
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(limit);
        let mut link = self.link.clone();
        self.count_round_trip();
        let mut keys: Vec<String> = cmd.query_async(&mut link).await.map_err(failed)?;
        keys.sort();
        Ok(keys)
    }
}

/// What a completion's reply says: done, not the caller's lease, or a read that changed.
pub(super) fn completed(completion: &Completion, reply: StoreResult<Value>) -> StoreResult<()> {
    match reply? {
        Value::Int(1) => Ok(()),
        Value::Int(2) => Err(IdempotencyError::Conflict(completion.lease.key.clone())),
        _ => Err(IdempotencyError::LeaseLost(completion.lease.key.clone())),
    }
}
