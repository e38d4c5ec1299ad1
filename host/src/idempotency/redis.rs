//! The Redis idempotency store: each state change is one Lua script, so it is atomic, and a
//! batch of acquisitions is one pipelined round trip.
//!
//! Layout per key (the braces are a Redis Cluster hash tag, so both live in one slot):
//!
//! ```text
//! NS:{PLUGIN:KEY}        hash  state = leased | completed, owner, fence,
//!                              outbox (JSON) and outbox_at (ms, Redis clock) until sent,
//!                              digest (sha256 of the body that ran) once completed
//!                              TTL = the lease while leased, the dedup window once completed
//! NS:{PLUGIN:KEY}:fence  counter for fencing tokens (INCR); TTL = the record's plus a window
//! NS:{PLUGIN:KEY}:failed failed handler runs (INCR on a failed release), gone on completion
//! ```
//!
//! A lease that lapses is simply gone (its TTL ran out), which is what makes a crashed
//! worker's key acquirable again. Every pipeline also sends `SCRIPT LOAD`, so a Redis that
//! restarted (and forgot its script cache) never answers `NOSCRIPT`.
//!
//! On a Redis Cluster (see `redis_link`) a batch is one pipeline per slot it touches, sent at
//! once; on one server it is one pipeline. The client reconnects by itself. While Redis (or
//! the shard holding a key) is unreachable every call for it fails, and the pipeline fails
//! closed: nothing runs without a lease.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use redis::{Script, ScriptInvocation, Value};

use super::{
    Acquired, Completion, IdempotencyError, IdempotencyStore, KeyStatus, Lease, LeaseRequest,
    Released, StoreResult,
};
use crate::message::Outgoing;
use crate::redis_link::{RedisLink, RedisTarget, Timeouts, slot};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/acquire.lua")));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/extend.lua")));
static COMPLETE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/complete.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/release.lua")));
static OUTBOX_SENT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/outbox_sent.lua")));

/// How long one call may wait for Redis before it counts as down.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The fencing counter's key for a record key.
pub(crate) fn fence_key(key: &str) -> String {
    format!("{key}:fence")
}

/// The failed-runs counter's key for a record key.
pub(crate) fn failures_key(key: &str) -> String {
    format!("{key}:failed")
}

/// The Redis idempotency store.
#[derive(Clone)]
pub struct RedisStore {
    link: RedisLink,
    round_trips: Arc<AtomicU64>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("round_trips", &self.round_trips())
            .finish_non_exhaustive()
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis().max(1) as u64
}

impl RedisStore {
    /// Connects to one server at `url` (`redis://host:port/db`). An unreachable server is an
    /// error here, at start; later outages are survived.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        Self::connect_to(&RedisTarget::single(url)).await
    }

    /// Connects to `target`, one server or a cluster.
    pub async fn connect_to(target: &RedisTarget) -> anyhow::Result<Self> {
        let timeouts = Timeouts {
            connect: RESPONSE_TIMEOUT,
            response: RESPONSE_TIMEOUT,
        };
        Ok(RedisStore {
            link: RedisLink::connect(target, timeouts).await?,
            round_trips: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Round trips made so far (a pipeline counts once), for measuring.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// What the store holds for `key` (a scoped key).
    pub async fn status(&self, key: &str) -> StoreResult<KeyStatus> {
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET")
            .arg(key)
            .arg("state")
            .arg("owner")
            .arg("fence")
            .arg("outbox");
        let (fields,): (Vec<Value>,) = self.query(&pipe).await?;
        let text =
            |i: usize| -> Option<String> { redis::from_redis_value(fields.get(i)?.clone()).ok() };
        Ok(match text(0).as_deref() {
            Some("leased") => KeyStatus::InProgress {
                owner: text(1).unwrap_or_default(),
                fencing_token: text(2).and_then(|f| f.parse().ok()).unwrap_or(0),
            },
            Some("completed") => KeyStatus::Completed {
                pending_outbox: decode_outbox(&text(3).unwrap_or_default())?.len(),
            },
            _ => KeyStatus::Unknown,
        })
    }

    async fn query<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> StoreResult<T> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let mut link = self.link.clone();
        pipe.query_async(&mut link)
            .await
            .map_err(|e| IdempotencyError::Unavailable(format!("Redis call failed: {e}")))
    }

    /// Runs `script` once per invocation, each on the record key it names, and returns the
    /// replies in order: one pipeline on a single server, one per slot on a cluster (sent
    /// together).
    async fn run_all(
        &self,
        script: &Script,
        invocations: Vec<(&str, ScriptInvocation<'_>)>,
    ) -> StoreResult<Vec<Value>> {
        let groups = slot_groups(
            self.link.is_cluster(),
            invocations.iter().map(|(key, _)| *key),
        );
        let pipes = groups.iter().map(|indices| {
            let mut pipe = redis::pipe();
            pipe.load_script(script).ignore();
            for &i in indices {
                pipe.invoke_script(&invocations[i].1);
            }
            pipe
        });
        let replies: Vec<Vec<Value>> = futures_util::future::try_join_all(
            pipes.map(|pipe| async move { self.query::<Vec<Value>>(&pipe).await }),
        )
        .await?;
        let mut ordered = vec![Value::Nil; invocations.len()];
        for (indices, values) in groups.iter().zip(replies) {
            if values.len() != indices.len() {
                return Err(corrupt(format!(
                    "{} replies to a pipeline of {} scripts",
                    values.len(),
                    indices.len()
                )));
            }
            for (&i, value) in indices.iter().zip(values) {
                ordered[i] = value;
            }
        }
        Ok(ordered)
    }

    /// One owner-checked script on one lease, with its record's `sibling` key.
    async fn owned(
        &self,
        script: &Script,
        lease: &Lease,
        sibling: String,
        args: &[String],
    ) -> StoreResult<()> {
        let mut invocation = script.key(&lease.key);
        invocation.key(sibling).arg(&lease.owner);
        for a in args {
            invocation.arg(a);
        }
        let mut pipe = redis::pipe();
        pipe.load_script(script).ignore().invoke_script(&invocation);
        let (done,): (i64,) = self.query(&pipe).await?;
        IdempotencyError::owned(lease, done == 1)
    }
}

fn corrupt(what: impl std::fmt::Display) -> IdempotencyError {
    IdempotencyError::Corrupt(what.to_string())
}

fn parse_acquired(
    request: &LeaseRequest,
    owner: String,
    reply: Vec<String>,
) -> StoreResult<Acquired> {
    match reply.as_slice() {
        [kind, fence, failures] if kind == "granted" => Ok(Acquired::Granted(Lease {
            key: request.key.clone(),
            owner,
            fencing_token: fence
                .parse()
                .map_err(|e| corrupt(format!("fencing token `{fence}`: {e}")))?,
            failures: failures
                .parse()
                .map_err(|e| corrupt(format!("failed runs `{failures}`: {e}")))?,
            window: request.window,
        })),
        [kind, outbox, age, digest] if kind == "completed" => Ok(Acquired::Completed {
            pending_outbox: decode_outbox(outbox)?,
            pending_for: Duration::from_millis(age.parse::<i64>().unwrap_or(0).max(0) as u64),
            digest: Some(digest.clone()).filter(|d| !d.is_empty()),
        }),
        [kind, pttl] if kind == "busy" => Ok(Acquired::Busy {
            retry_after: Duration::from_millis(pttl.parse::<i64>().unwrap_or(0).max(0) as u64),
        }),
        other => Err(corrupt(format!(
            "unexpected reply from the acquire script: {other:?}"
        ))),
    }
}

fn decode_outbox(json: &str) -> StoreResult<Vec<Outgoing>> {
    if json.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(json).map_err(|e| corrupt(format!("a stored outbox: {e}")))
}

fn encode_outbox(outbox: &[Outgoing]) -> String {
    if outbox.is_empty() {
        return String::new();
    }
    // Outgoing is plain data (strings, bytes, numbers): serialising it cannot fail.
    serde_json::to_string(outbox).unwrap_or_default()
}

/// The indices of `keys` grouped so that each group is one pipeline: all of them on a single
/// server, one group per slot on a cluster (in order of first appearance).
fn slot_groups<'a>(cluster: bool, keys: impl Iterator<Item = &'a str>) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, key) in keys.enumerate() {
        let slot = if cluster { slot(key) } else { 0 };
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, indices)) => indices.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, indices)| indices).collect()
}

#[async_trait]
impl IdempotencyStore for RedisStore {
    async fn acquire(&self, requests: &[LeaseRequest]) -> StoreResult<Vec<Acquired>> {
        let owners: Vec<String> = requests
            .iter()
            .map(|_| uuid::Uuid::new_v4().to_string())
            .collect();
        let invocations = requests
            .iter()
            .zip(&owners)
            .map(|(r, owner)| {
                let mut invocation = ACQUIRE.key(&r.key);
                invocation
                    .key(fence_key(&r.key))
                    .key(failures_key(&r.key))
                    .arg(owner)
                    .arg(ms(r.ttl))
                    .arg(ms(r.window + r.ttl));
                (r.key.as_str(), invocation)
            })
            .collect();
        let replies = self.run_all(&ACQUIRE, invocations).await?;
        requests
            .iter()
            .zip(owners)
            .zip(replies)
            .map(|((r, owner), reply)| {
                let reply: Vec<String> = redis::from_redis_value(reply)
                    .map_err(|e| corrupt(format!("a reply from the acquire script: {e}")))?;
                parse_acquired(r, owner, reply)
            })
            .collect()
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> StoreResult<()> {
        let args = [ms(ttl).to_string(), ms(ttl + lease.window).to_string()];
        self.owned(&EXTEND, lease, fence_key(&lease.key), &args)
            .await
    }

    async fn complete(&self, completions: &[Completion]) -> StoreResult<Vec<StoreResult<()>>> {
        let outboxes: Vec<String> = completions
            .iter()
            .map(|c| encode_outbox(&c.outbox))
            .collect();
        let invocations = completions
            .iter()
            .zip(&outboxes)
            .map(|(c, outbox)| {
                let mut invocation = COMPLETE.key(&c.lease.key);
                invocation
                    .key(fence_key(&c.lease.key))
                    .key(failures_key(&c.lease.key))
                    .arg(&c.lease.owner)
                    .arg(ms(c.window))
                    .arg(outbox)
                    .arg(ms(c.window + c.window))
                    .arg(c.digest.as_deref().unwrap_or_default());
                (c.lease.key.as_str(), invocation)
            })
            .collect();
        let done = self.run_all(&COMPLETE, invocations).await?;
        Ok(completions
            .iter()
            .zip(done)
            .map(|(c, d)| IdempotencyError::owned(&c.lease, d == Value::Int(1)))
            .collect())
    }

    async fn outbox_sent(&self, key: &str) -> StoreResult<()> {
        let mut pipe = redis::pipe();
        pipe.load_script(&OUTBOX_SENT)
            .ignore()
            .invoke_script(&OUTBOX_SENT.key(key))
            .ignore();
        self.query::<()>(&pipe).await
    }

    async fn release(&self, lease: &Lease, why: Released) -> StoreResult<()> {
        let how = match why {
            Released::NotRun => "not-run",
            Released::Failed => "failed",
            Released::GaveUp => "gave-up",
        };
        // The count lives as long as the fencing counter would for a fresh lease.
        let args = [how.to_string(), ms(lease.window * 2).to_string()];
        self.owned(&RELEASE, lease, failures_key(&lease.key), &args)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::{failures_key, fence_key, slot_groups};
    use crate::idempotency::key::scoped;
    use crate::redis_link::slot;

    #[test]
    fn a_batch_is_one_pipeline_on_a_server_and_one_per_slot_on_a_cluster() {
        let keys = ["q:{p:a}", "q:{p:b}", "q:{p:a}:fence", "q:{p:c}"];
        assert_eq!(
            slot_groups(false, keys.iter().copied()),
            vec![vec![0, 1, 2, 3]]
        );
        let groups = slot_groups(true, keys.iter().copied());
        assert!(groups.contains(&vec![0, 2]), "{groups:?}");
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), 4);
        for group in &groups {
            assert!(group.iter().all(|&i| slot(keys[i]) == slot(keys[group[0]])));
        }
    }

    #[test]
    fn every_key_a_script_touches_shares_one_slot() {
        for (plugin, key) in [("mail", "k1"), ("orders", "a/b/0"), ("x", "}{"), ("p", "")] {
            let record = scoped("qhost", plugin, key);
            assert_eq!(slot(&record), slot(&fence_key(&record)), "{record}");
            assert_eq!(slot(&record), slot(&failures_key(&record)), "{record}");
            assert_eq!(
                slot(&record),
                slot(&format!("{{{plugin}:{key}}}")),
                "{record}"
            );
        }
    }
}
