//! The Redis idempotency store: each state change is one Lua script, so it is atomic, and a
//! batch of acquisitions is one pipelined round trip.
//!
//! One hash per key, `NS:{PLUGIN:KEY}` (the braces are a Redis Cluster hash tag), with
//! one-letter fields, since a store holds one record per message of its dedup window:
//!
//! ```text
//! s  state: l (leased), c (completed), r (released: free, remembered for its token)
//! f  the fencing token of the last grant (HINCRBY on each grant, so it only rises)
//! o  the owner, and u the lease's end (ms, Redis clock), while leased
//! n  failed handler runs, counted on a failed release, gone on completion
//! b  the outbox and result value (`pending`) and t when committed (ms), until carried out
//! d  the sha256 of the body that ran, once completed (body-keyed plugins)
//! ```
//!
//! A completed record whose outbox is sent (or that had none) is the string `c:TOKEN`, or
//! `c:TOKEN:DIGEST` for body-keyed plugins, instead: most of a store is completed records kept
//! for their window, and a string costs Redis one object where a hash costs two (120 bytes
//! against 136 for a 55-character key, measured by the pipeline bench with `MEMORY USAGE`).
//! Every script reads either form.
//!
//! TTL: the lease plus the window while leased (a lease that lapses leaves the record, and its
//! token, behind; `u` says it lapsed), the window once completed, twice the window after a
//! failed run. A key forgotten after its window starts its tokens at 1 again, like a
//! key never seen; no lease can outlive the window, so no older holder is left to fence out.
//!
//! Records of the earlier layout (long field names, the lease as the key's TTL, the fencing
//! counter in `NS:{PLUGIN:KEY}:fence`) are honoured by `acquire`: completed is completed, leased
//! is busy, and the next token follows the old counter's, so a host upgraded after the old ones
//! stopped runs nothing twice. Old and new hosts must not share a store at once.
//!
//! Every pipeline also sends `SCRIPT LOAD`, so a Redis that restarted (and forgot its script
//! cache) never answers `NOSCRIPT`.
//!
//! On a Redis Cluster (see `redis_link`) a batch is one pipeline per primary it touches, sent
//! at once; on one server it is one pipeline. The client reconnects by itself. While Redis (or
//! the shard holding a key) is unreachable every call for it fails, and the pipeline fails
//! closed: nothing runs without a lease. Batched calls answer per key, so on a cluster a
//! stopped primary holds back the keys it holds and no others.
//!
//! A call whose answer does not come within the response deadline
//! ([`qhost_redis_link::RedisDeadlines`]) fails as [`IdempotencyError::TimedOut`], though the
//! script may have run. Each call stays correct either way:
//!
//! - `acquire`: a lease granted but never heard of is held by nobody; the message goes back,
//!   its next delivery finds the key busy until the lease lapses, then takes it with a higher
//!   fencing token. Nothing runs without a lease the host knows it holds.
//! - `extend`: a lost extension is at worst a lease that lapses early; the run then finds its
//!   lease lost when it completes, and its result is dropped for the new owner's.
//! - `complete`: the message goes back. If the completion did land, its next delivery finds the
//!   key completed and sends the recorded outbox; if not, the lease lapses and the handler runs
//!   again under a new token (its effects leave through the outbox, keyed, so they do not
//!   double).
//! - `release` and `outbox_sent`: if lost, the lease lapses by itself, and the outbox mark is
//!   tried again (a duplicate finding a pending outbox sends it again, under the same keys).

mod slots;
mod state;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use redis::{Script, ScriptInvocation, Value};

use qhost_message::Outgoing;
use qhost_redis_link::{Group, RedisLink, RedisTarget};
use qhost_store::pending;
use qhost_store::rate::{self, Admission, Rate};
use qhost_store::{
    Acquired, Claimed, Claims, Committed, Completion, FleetRate, IdempotencyError,
    IdempotencyStore, KeyStatus, Lease, LeaseRequest, Released, SharedRecords, StateReads,
    StoreResult,
};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/acquire.lua")));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/extend.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/release.lua")));
static OUTBOX_SENT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/outbox_sent.lua")));
static RATE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/rate.lua")));
static CLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/claim.lua")));
static TAKE_OVER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/take_over.lua")));
static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/status.lua")));
static SWAP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/swap.lua")));

/// The Redis idempotency store.
#[derive(Clone)]
pub struct RedisStore {
    link: RedisLink,
    /// What it connected to, for a lane's connection.
    target: Arc<RedisTarget>,
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
        Ok(RedisStore {
            link: RedisLink::connect(target, target.deadlines).await?,
            target: Arc::new(target.clone()),
            round_trips: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Counts one round trip (a pipeline counts once).
    fn count_round_trip(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// Round trips made so far (a pipeline counts once), for measuring.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// What the store holds for `key` (a scoped key).
    pub async fn status(&self, key: &str) -> StoreResult<KeyStatus> {
        let mut pipe = redis::pipe();
        pipe.load_script(&STATUS)
            .ignore()
            .invoke_script(&STATUS.key(key));
        let (fields,): (Vec<String>,) = self.query(&pipe).await?;
        Ok(match fields.as_slice() {
            [state, owner, fence, _] if state == "l" => KeyStatus::InProgress {
                owner: owner.clone(),
                fencing_token: fence.parse().unwrap_or(0),
            },
            [state, _, _, outbox] if state == "c" => KeyStatus::Completed {
                pending_outbox: decode_pending(outbox)?.0.len(),
            },
            _ => KeyStatus::Unknown,
        })
    }

    async fn query<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> StoreResult<T> {
        self.count_round_trip();
        let mut link = self.link.clone();
        pipe.query_async(&mut link).await.map_err(failed)
    }

    /// Runs `script` once per invocation, each on the record key it names, and returns each
    /// one's reply in order: one pipeline on a single server, one per primary on a cluster (sent
    /// together). A primary that fails or does not answer fails only its own invocations, so a
    /// stopped shard holds back only the keys it holds. An invocation a stale node map sent to
    /// the wrong primary is answered `MOVED` (or `ASK`) without running, and is sent again
    /// alone, through the client's routing.
    async fn run_all(
        &self,
        script: &Script,
        invocations: Vec<(&str, ScriptInvocation<'_>)>,
    ) -> Vec<StoreResult<Value>> {
        self.run_mixed(&[script], invocations).await
    }

    /// As [`RedisStore::run_all`], for invocations of any of `scripts` (each loaded once per
    /// pipeline): several kinds of step sent together, one round trip per server.
    async fn run_mixed(
        &self,
        scripts: &[&Script],
        invocations: Vec<(&str, ScriptInvocation<'_>)>,
    ) -> Vec<StoreResult<Value>> {
        let keys: Vec<&str> = invocations.iter().map(|(key, _)| *key).collect();
        let groups = self.link.groups(&keys).await;
        let sent = groups.iter().map(|group| {
            let mut pipe = redis::pipe();
            for script in scripts {
                pipe.load_script(script);
            }
            for &i in &group.indices {
                pipe.invoke_script(&invocations[i].1);
            }
            async move { self.send(&pipe, group).await }
        });
        let replies = futures_util::future::join_all(sent).await;
        let mut ordered = vec![Ok(Value::Nil); invocations.len()];
        let mut moved = Vec::new();
        for (group, values) in groups.iter().zip(replies) {
            let values = match values.and_then(|v| script_replies(v, group, scripts.len())) {
                Ok(values) => values,
                Err(e) => {
                    group
                        .indices
                        .iter()
                        .for_each(|&i| ordered[i] = Err(e.clone()));
                    continue;
                }
            };
            for (&i, value) in group.indices.iter().zip(values) {
                match value {
                    Value::ServerError(e) if redirected(&e) => moved.push(i),
                    Value::ServerError(e) => ordered[i] = Err(unavailable(e)),
                    value => ordered[i] = Ok(value),
                }
            }
        }
        if !moved.is_empty() {
            self.link.forget_nodes();
        }
        for i in moved {
            self.count_round_trip();
            let mut link = self.link.clone();
            ordered[i] = invocations[i]
                .1
                .invoke_async(&mut link)
                .await
                .map_err(failed);
        }
        ordered
    }

    /// Sends one group's pipeline (see [`RedisLink::send`]), counting the round trip.
    async fn send(&self, pipe: &redis::Pipeline, group: &Group) -> StoreResult<Vec<Value>> {
        self.count_round_trip();
        self.link.send(pipe, group).await.map_err(failed)
    }

    /// One owner-checked script on one lease.
    async fn owned(&self, script: &Script, lease: &Lease, args: &[String]) -> StoreResult<()> {
        let mut invocation = script.key(&lease.key);
        invocation.arg(&lease.owner);
        for a in args {
            invocation.arg(a);
        }
        let mut pipe = redis::pipe();
        pipe.load_script(script).ignore().invoke_script(&invocation);
        let (done,): (i64,) = self.query(&pipe).await?;
        IdempotencyError::owned(lease, done == 1)
    }
}

impl RedisStore {
    /// Completes each lease in one script: with its state on one server; on a cluster with
    /// the state writes `pending` (by position) kept in the record instead.
    async fn complete_here(
        &self,
        completions: &[Completion],
        pending: &[Option<pending::PendingState>],
    ) -> Vec<StoreResult<()>> {
        let on_one_server = !self.is_cluster();
        let outboxes: Vec<String> = completions
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let state = pending.get(i).and_then(Option::as_ref);
                pending::encode_with_state(&c.outbox, c.result.as_deref(), state)
            })
            .collect();
        let invocations = completions
            .iter()
            .zip(&outboxes)
            .map(|(c, outbox)| {
                let mut invocation = state::COMPLETE.key(&c.lease.key);
                invocation
                    .arg(&c.lease.owner)
                    .arg(ms(c.window))
                    .arg(outbox)
                    .arg(c.digest.as_deref().unwrap_or_default());
                if on_one_server && !c.state.is_empty() {
                    state::add_ops(&mut invocation, &c.state.buckets, 1);
                }
                (c.lease.key.as_str(), invocation)
            })
            .collect();
        let done = self.run_all(&state::COMPLETE, invocations).await;
        completions
            .iter()
            .zip(done)
            .map(|(c, d)| state::completed(c, d))
            .collect()
    }

    /// The three steps of a commit with state on a cluster (see the `kv` module's docs): check the reads,
    /// complete with the writes pending, apply them. A completion whose writes could not be
    /// applied is answered as one that may have landed: its message comes back, finds the key
    /// completed and applies them then.
    async fn complete_on_cluster(&self, completions: &[Completion]) -> Vec<StoreResult<()>> {
        let all: Vec<&Completion> = completions.iter().collect();
        let held = self.state_holds(&all).await;
        let mut answers: Vec<Option<StoreResult<()>>> = vec![None; completions.len()];
        let mut going = Vec::new();
        for (i, (c, held)) in completions.iter().zip(held).enumerate() {
            match held {
                Ok(true) => going.push(i),
                Ok(false) => {
                    answers[i] = Some(Err(IdempotencyError::Conflict(c.lease.key.clone())))
                }
                Err(e) => answers[i] = Some(Err(e)),
            }
        }
        let batch: Vec<Completion> = going.iter().map(|&i| completions[i].clone()).collect();
        let pending: Vec<Option<pending::PendingState>> = batch
            .iter()
            .map(|c| {
                c.state.has_writes().then(|| pending::PendingState {
                    token: c.lease.fencing_token,
                    commit: c.state.clone(),
                })
            })
            .collect();
        let done = self.complete_here(&batch, &pending).await;
        for ((&i, done), state) in going.iter().zip(done).zip(&pending) {
            let c = &completions[i];
            let applied = match (done, state) {
                (Ok(()), Some(state)) => self
                    .apply_state(&c.lease.key, state, c.window)
                    .await
                    .map_err(|e| {
                        IdempotencyError::Unavailable(format!(
                            "completed, but its state is not applied yet: {e}"
                        ))
                    }),
                (done, _) => done,
            };
            answers[i] = Some(applied);
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(corrupt("a completion went unanswered"))))
            .collect()
    }
}

fn corrupt(what: impl std::fmt::Display) -> IdempotencyError {
    IdempotencyError::Corrupt(what.to_string())
}

/// A group's pipeline replies less the first `loads`, the script loads'.
fn script_replies(
    values: Vec<Value>,
    group: &Group,
    loads: usize,
) -> StoreResult<impl Iterator<Item = Value>> {
    if values.len() != group.indices.len() + loads {
        return Err(corrupt(format!(
            "{} replies to a pipeline of {} scripts",
            values.len(),
            group.indices.len()
        )));
    }
    Ok(values.into_iter().skip(loads))
}

fn unavailable(e: impl std::fmt::Display) -> IdempotencyError {
    IdempotencyError::Unavailable(format!("Redis call failed: {e}"))
}

/// A call that failed on the way: no answer within the response deadline, or another error.
fn failed(e: redis::RedisError) -> IdempotencyError {
    if e.is_timeout() {
        IdempotencyError::TimedOut(format!("Redis: {e}"))
    } else {
        unavailable(e)
    }
}

/// Whether a command's error says its slot is served elsewhere (it did not run).
fn redirected(error: &redis::ServerError) -> bool {
    use redis::ServerErrorKind::{Ask, Moved, TryAgain};
    matches!(error.kind(), Some(Moved | Ask | TryAgain))
}

/// The acquire script's invocation for `request`, granting to `owner`.
fn acquire_invocation<'a>(request: &'a LeaseRequest, owner: &str) -> ScriptInvocation<'a> {
    let mut invocation = ACQUIRE.key(&request.key);
    invocation
        .key(format!("{}:fence", request.key))
        .arg(owner)
        .arg(ms(request.ttl))
        .arg(ms(request.window + request.ttl));
    invocation
}

impl RedisStore {
    /// Each key's answer to `acquire`, from the script's replies in request order.
    async fn each_acquired(
        &self,
        requests: &[LeaseRequest],
        owners: Vec<String>,
        replies: Vec<StoreResult<Value>>,
    ) -> Vec<StoreResult<Acquired>> {
        let mut answers = Vec::with_capacity(requests.len());
        for ((r, owner), reply) in requests.iter().zip(owners).zip(replies) {
            answers.push(self.acquired(r, owner, reply).await);
        }
        answers
    }

    /// One key's answer to `acquire`. On a cluster, a completed record that still holds state
    /// writes has them applied first (see the `kv` module's docs): its outbox is carried out only after.
    async fn acquired(
        &self,
        request: &LeaseRequest,
        owner: String,
        reply: StoreResult<Value>,
    ) -> StoreResult<Acquired> {
        let reply: Vec<String> = redis::from_redis_value(reply?)
            .map_err(|e| corrupt(format!("a reply from the acquire script: {e}")))?;
        if let [kind, pending, ..] = reply.as_slice()
            && kind == "completed"
            && self.is_cluster()
            && pending.contains("\"state\"")
        {
            self.apply_pending(&request.key, pending, request.window)
                .await?;
        }
        parse_acquired(request, owner, reply)
    }
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
        [kind, pending, age, digest] if kind == "completed" => {
            let (pending_outbox, pending_result) = decode_pending(pending)?;
            Ok(Acquired::Completed {
                pending_outbox,
                pending_result,
                pending_for: Duration::from_millis(age.parse::<i64>().unwrap_or(0).max(0) as u64),
                digest: Some(digest.clone()).filter(|d| !d.is_empty()),
            })
        }
        [kind, pttl] if kind == "busy" => Ok(Acquired::Busy {
            retry_after: Duration::from_millis(pttl.parse::<i64>().unwrap_or(0).max(0) as u64),
        }),
        other => Err(corrupt(format!(
            "unexpected reply from the acquire script: {other:?}"
        ))),
    }
}

fn decode_pending(text: &str) -> StoreResult<(Vec<Outgoing>, Option<String>)> {
    pending::decode(text).map_err(|e| corrupt(format!("a stored outbox: {e}")))
}

#[async_trait]
impl IdempotencyStore for RedisStore {
    async fn ping(&self) -> StoreResult<()> {
        let mut link = self.link.clone();
        redis::cmd("PING")
            .query_async::<String>(&mut link)
            .await
            .map(drop)
            .map_err(failed)
    }
    async fn for_lane(&self) -> StoreResult<Option<Arc<dyn qhost_store::Store>>> {
        let link = RedisLink::connect(&self.target, self.target.deadlines)
            .await
            .map_err(IdempotencyError::unavailable)?;
        Ok(Some(Arc::new(RedisStore {
            link,
            target: Arc::clone(&self.target),
            round_trips: Arc::clone(&self.round_trips),
        })))
    }

    async fn acquire(&self, requests: &[LeaseRequest]) -> StoreResult<Vec<StoreResult<Acquired>>> {
        let owners: Vec<String> = requests
            .iter()
            .map(|_| uuid::Uuid::new_v4().to_string())
            .collect();
        let invocations = requests
            .iter()
            .zip(&owners)
            .map(|(r, owner)| (r.key.as_str(), acquire_invocation(r, owner)))
            .collect();
        let replies = self.run_all(&ACQUIRE, invocations).await;
        Ok(self.each_acquired(requests, owners, replies).await)
    }
    async fn extend(&self, lease: &Lease, ttl: Duration) -> StoreResult<()> {
        let args = [ms(ttl).to_string(), ms(ttl + lease.window).to_string()];
        self.owned(&EXTEND, lease, &args).await
    }
    async fn complete(
        &self,
        completions: &[Completion],
    ) -> StoreResult<Vec<StoreResult<Committed>>> {
        let done = if self.is_cluster() && completions.iter().any(|c| !c.state.is_empty()) {
            self.complete_on_cluster(completions).await
        } else {
            self.complete_here(completions, &[]).await
        };
        // Redis holds no queue: an outbox is always the caller's to send.
        Ok(done
            .into_iter()
            .map(|d| d.map(|()| Committed::Pending))
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
        // After a failed run the record (its count and token) lives two windows.
        let args = [how.to_string(), ms(lease.window * 2).to_string()];
        self.owned(&RELEASE, lease, &args).await
    }
}

#[async_trait]
impl Claims for RedisStore {
    async fn claim(
        &self,
        key: &str,
        outbox: &[Outgoing],
        window: Duration,
    ) -> StoreResult<Claimed> {
        let mut invocation = CLAIM.key(key);
        invocation
            .arg(ms(window))
            .arg(pending::encode(outbox, None));
        let mut pipe = redis::pipe();
        pipe.load_script(&CLAIM).ignore().invoke_script(&invocation);
        let (reply,): (Vec<String>,) = self.query(&pipe).await?;
        match reply.as_slice() {
            [won] if won == "won" => Ok(Claimed::Won),
            [taken, pending, age] if taken == "taken" => Ok(Claimed::Taken {
                pending_outbox: decode_pending(pending)?.0,
                pending_for: Duration::from_millis(age.parse::<i64>().unwrap_or(0).max(0) as u64),
            }),
            other => Err(corrupt(format!(
                "unexpected reply from the claim script: {other:?}"
            ))),
        }
    }
    async fn take_over(&self, key: &str, after: Duration) -> StoreResult<Option<Vec<Outgoing>>> {
        let mut invocation = TAKE_OVER.key(key);
        invocation.arg(ms(after));
        let mut pipe = redis::pipe();
        pipe.load_script(&TAKE_OVER)
            .ignore()
            .invoke_script(&invocation);
        let (reply,): (Vec<String>,) = self.query(&pipe).await?;
        match reply.as_slice() {
            [] => Ok(None),
            [pending] => Ok(Some(decode_pending(pending)?.0)),
            other => Err(corrupt(format!(
                "unexpected reply from the take-over script: {other:?}"
            ))),
        }
    }
    async fn status(&self, key: &str) -> StoreResult<KeyStatus> {
        RedisStore::status(self, key).await
    }
    async fn time(&self) -> StoreResult<SystemTime> {
        let mut link = self.link.clone();
        self.count_round_trip();
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut link)
            .await
            .map_err(failed)?;
        Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
    }
}

#[async_trait]
impl SharedRecords for RedisStore {
    async fn record(&self, key: &str) -> StoreResult<Option<String>> {
        let mut pipe = redis::pipe();
        pipe.get(key);
        let (text,): (Option<String>,) = self.query(&pipe).await?;
        Ok(text)
    }
    async fn swap_record(
        &self,
        key: &str,
        old: Option<&str>,
        new: &str,
        keep: Duration,
    ) -> StoreResult<bool> {
        let mut invocation = SWAP.key(key);
        invocation
            .arg(if old.is_none() { "1" } else { "0" })
            .arg(old.unwrap_or_default())
            .arg(new)
            .arg(ms(keep));
        let mut pipe = redis::pipe();
        pipe.load_script(&SWAP).ignore().invoke_script(&invocation);
        let (swapped,): (u8,) = self.query(&pipe).await?;
        Ok(swapped == 1)
    }
}

#[async_trait]
impl FleetRate for RedisStore {
    async fn admit(&self, key: &str, rate: Rate) -> StoreResult<Admission> {
        let mut invocation = RATE.key(key);
        invocation
            .arg(rate.interval_us())
            .arg(rate.tolerance_us())
            .arg(rate::MAX_WAIT.as_micros() as u64);
        let mut pipe = redis::pipe();
        pipe.load_script(&RATE).ignore().invoke_script(&invocation);
        let ((reserved, wait_us),): ((u8, u64),) = self.query(&pipe).await?;
        let wait = Duration::from_micros(wait_us);
        Ok(if reserved == 1 {
            Admission::After(wait)
        } else {
            Admission::Later(wait)
        })
    }
}

#[async_trait]
impl StateReads for RedisStore {
    async fn kv_get(&self, bucket: &str, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        self.get_state(bucket, keys).await
    }
    async fn kv_list(&self, bucket: &str, limit: usize) -> StoreResult<Vec<String>> {
        self.list_state(bucket, limit).await
    }
}
