//! The store contract: leases that make a handler run once per key, and the other capabilities
//! a fleet keeps in its store, as small traits; the values they exchange; and the conformance
//! suite (feature `conformance`) that every backend passes unchanged. It names no backend and
//! nothing of the host's: Redis, a Redis Cluster and the embedded store implement it in the
//! host, and a new backend is a crate that implements these traits and runs the suite.
//!
//! The idempotency boundary: leases that make a handler run once per key.
//!
//! "Check a cache, run, mark done" races: two workers check, both run. qhost instead takes an
//! atomic lease before the handler runs. A key moves through two states:
//!
//! ```text
//!   (none) --acquire--> in-progress(owner, fencing token, lease expiry)
//!   in-progress --complete(owner)--> completed(outbox, expiry = dedup window)
//!   in-progress --release(owner)--> (none)         lease lapses -> acquirable again
//! ```
//!
//! Extend, complete and release name the owner token they were granted; a worker whose lease
//! lapsed and was re-granted cannot complete or release the newer owner's lease. Fencing tokens
//! grow with every grant on a key and are handed to the handler, for as long as the key's
//! record lives (its lease, then its completed record for the dedup window), so a token never
//! goes back while anyone could hold an older one. Once the window ends the key is forgotten,
//! and a backend may start its tokens again (Redis does; the embedded store keeps counting):
//! every lease on it lapsed long before.
//!
//! Beside them the store counts the key's failed handler runs: a release says whether the run
//! failed ([`Released::Failed`]), and the next grant carries the count. Attempts therefore count
//! handler runs, not deliveries: a message put back while its key was busy, while a store was
//! down or while its outbox was pending has used up nothing.

pub mod commit;
#[cfg(feature = "conformance")]
#[allow(
    clippy::unwrap_used,
    reason = "a test suite: a store call that fails fails its case, with the error"
)]
pub mod conformance;
pub mod pending;
pub mod rate;
pub mod records;
pub mod slots;

use std::time::Duration;

use async_trait::async_trait;

use commit::StateCommit;
use qhost_message::Outgoing;
use slots::{Slot, SlotAnswer, SlotRequest};

/// Why a store call did not do what was asked: the store could not answer (fail closed), or it
/// answered that the caller's lease is no longer the caller's (drop the result).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdempotencyError {
    /// The owner-checked call found the lease lapsed and passed on (or released): nothing was
    /// written. Another worker's result stands.
    #[error("the lease on {0} is no longer held")]
    LeaseLost(String),
    /// The store could not be reached, or failed. Nothing runs without a lease, so the pipeline
    /// fails closed: the message goes back to the queue without using up an attempt.
    #[error("idempotency store unavailable: {0}")]
    Unavailable(String),
    /// No answer came within the response deadline. The call may still have run: every caller
    /// treats this as [`IdempotencyError::Unavailable`], which is correct whether it ran or not
    /// (see the store's module docs).
    #[error("idempotency store did not answer within the deadline: {0}")]
    TimedOut(String),
    /// The store answered with something qhost did not write (a foreign or corrupted record).
    #[error("idempotency store returned an unreadable record: {0}")]
    Corrupt(String),
    /// A completion was refused because a key its run read to decide holds another value now
    /// (see the `kv` module's docs): nothing was written, and the lease is still the caller's.
    #[error("the state {0} read changed before it completed")]
    Conflict(String),
}

impl IdempotencyError {
    /// A backend failure, with its whole chain of causes.
    pub fn unavailable(e: impl Into<anyhow::Error>) -> Self {
        IdempotencyError::Unavailable(format!("{:#}", e.into()))
    }

    /// Whether the call ran out of time, as metrics tell it apart from an error.
    pub fn is_timeout(&self) -> bool {
        matches!(self, IdempotencyError::TimedOut(_))
    }

    /// The answer to an owner-checked call on `lease`: `held` is whether the owner still held it.
    pub fn owned(lease: &Lease, held: bool) -> StoreResult<()> {
        if held {
            Ok(())
        } else {
            Err(IdempotencyError::LeaseLost(lease.key.clone()))
        }
    }
}

/// What the store's calls return.
pub type StoreResult<T> = Result<T, IdempotencyError>;

/// A request for a lease on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The fully scoped key (namespace, plugin, key).
    pub key: String,
    /// How long the lease lasts unless extended.
    pub ttl: Duration,
    /// How long the key will be remembered once completed; the fencing counter outlives it, so
    /// tokens keep growing for as long as anyone could hold an older one.
    pub window: Duration,
}

/// A granted lease: proof of ownership for extend, complete and release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The scoped key.
    pub key: String,
    /// A token unique to this grant.
    pub owner: String,
    /// Grows with every grant on this key.
    pub fencing_token: u64,
    /// Handler runs under earlier leases on this key that failed.
    pub failures: u32,
    /// How long the key is remembered once completed (the fencing counter outlives the
    /// record by this much).
    pub window: Duration,
}

/// Why a lease is given back, which decides the key's count of failed runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The handler did not run (the message was put back for another reason): unchanged.
    NotRun,
    /// The handler ran and failed: one more.
    Failed,
    /// The message was given up (dead-lettered): forgotten, so a redriven copy starts afresh.
    GaveUp,
}

/// What acquiring a key found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The caller owns the key now and should run the handler.
    Granted(Lease),
    /// The work was done already; `pending_outbox` holds messages committed but not yet
    /// confirmed sent: either the completer is sending them right now, or it crashed between
    /// commit and send. `pending_for` tells the two apart.
    Completed {
        /// Outbox messages still to send.
        pending_outbox: Vec<Outgoing>,
        /// The run's result value (JSON), committed with it and still to write where a
        /// caller waits on it.
        pending_result: Option<String>,
        /// How long ago the outbox was committed (zero when there is none).
        pending_for: Duration,
        /// The sha256 of the body the completing run handled, when it was recorded.
        digest: Option<String>,
    },
    /// Another worker holds a live lease; try again after this long.
    Busy {
        /// When the other lease lapses, at the latest.
        retry_after: Duration,
    },
}

/// A finished piece of work to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The lease it was done under.
    pub lease: Lease,
    /// The handler's outbox, committed in the same step as the completed record.
    pub outbox: Vec<Outgoing>,
    /// The run's result value (JSON) to write where a caller waits on it (a Celery task's
    /// result record), committed in the same step and pending, like the outbox, until
    /// `outbox_sent`.
    pub result: Option<String>,
    /// How long to remember the key as completed.
    pub window: Duration,
    /// The sha256 (hex) of the body the handler ran on, kept so a later delivery of the key
    /// with another body can be told apart.
    pub digest: Option<String>,
    /// The run's state: checked and written with the completed record (see the `kv` module's docs).
    pub state: StateCommit,
}

/// What a completion's commit left for its caller to carry out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Committed {
    /// The outbox and result value, if there are any, are recorded pending: the caller sends
    /// them and then calls [`IdempotencyStore::outbox_sent`].
    Pending,
    /// The outbox was written to its queues in the commit itself, as a store that shares a
    /// database with the queues can (PostgreSQL beside pgmq): nothing is pending, and nothing
    /// is left to send or to mark sent.
    Delivered,
}

/// What is known about a key: what the stores' `status` answer, for operators and tests
/// inspecting a store (the pipeline itself never asks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyStatus {
    /// Never seen, or forgotten.
    Unknown,
    /// Leased by `owner` until the lease lapses.
    InProgress {
        /// The current owner token.
        owner: String,
        /// The current fencing token.
        fencing_token: u64,
    },
    /// Completed; remembered for the rest of its window.
    Completed {
        /// Outbox messages not yet confirmed sent.
        pending_outbox: usize,
    },
}

/// Leases and completed records: what makes a handler run once per key. Redis, a Redis
/// Cluster, or the embedded store; each also serves the other capabilities below, and each
/// consumer asks for the one it uses.
#[async_trait]
pub trait IdempotencyStore: Send + Sync + std::fmt::Debug + 'static {
    /// Tries to take a lease on each key, as one round trip where the backend allows; for
    /// each, its own answer, so a part of the store that cannot answer (a cluster's stopped
    /// primary) fails only the keys it holds.
    async fn acquire(&self, requests: &[LeaseRequest]) -> StoreResult<Vec<StoreResult<Acquired>>>;

    /// The same store for a lane of its own (see `host::lanes`): a connection opened and
    /// driven on the lane's thread, so a lane's calls never wake another core. `None` where
    /// the store holds no connection (the embedded store): the lanes share this one.
    async fn for_lane(&self) -> StoreResult<Option<std::sync::Arc<dyn Store>>> {
        Ok(None)
    }

    /// Extends a lease; [`IdempotencyError::LeaseLost`] when the caller no longer owns it.
    async fn extend(&self, lease: &Lease, ttl: Duration) -> StoreResult<()>;

    /// Marks leases completed with their outboxes and state, in one call; for each, its own
    /// answer: what the commit left to carry out ([`Committed`]),
    /// [`IdempotencyError::LeaseLost`] when the caller no longer owned it, and
    /// [`IdempotencyError::Conflict`] when a key its run read changed (nothing was written).
    async fn complete(
        &self,
        completions: &[Completion],
    ) -> StoreResult<Vec<StoreResult<Committed>>>;

    /// Records that a completed key's outbox was sent (and its result value written).
    async fn outbox_sent(&self, key: &str) -> StoreResult<()>;

    /// Gives a lease up so the key can be acquired at once, counting the run by `why`;
    /// [`IdempotencyError::LeaseLost`] when not the owner.
    async fn release(&self, lease: &Lease, why: Released) -> StoreResult<()>;

    /// Checks that the store answers (for readiness): one cheap round trip.
    async fn ping(&self) -> StoreResult<()>;
}

/// Records a fleet shares, each replaced only by a compare-and-set (a plugin's rollout).
#[async_trait]
pub trait SharedRecords: Send + Sync + std::fmt::Debug + 'static {
    /// The shared record at `key`, as stored.
    async fn record(&self, key: &str) -> StoreResult<Option<String>>;

    /// Replaces the record at `key` with `new`, kept for `keep`, if it still holds `old`
    /// (`None`: absent); whether it did. Two writers that read the same record cannot both
    /// replace it.
    async fn swap_record(
        &self,
        key: &str,
        old: Option<&str>,
        new: &str,
        keep: Duration,
    ) -> StoreResult<bool>;
}

/// The fleet-wide rate limit (see [`rate`]).
#[async_trait]
pub trait FleetRate: Send + Sync + std::fmt::Debug + 'static {
    /// One call under the rate kept at `key`: when it may run (its slot then reserved), or
    /// when to try again.
    async fn admit(&self, key: &str, rate: rate::Rate) -> StoreResult<rate::Admission>;
}

/// What one call of [`FlowSlots::acquire_with_slots`] answers: each lease request's answer and
/// each slot request's, in the order asked.
pub type LeasesAndSlots = (Vec<StoreResult<Acquired>>, Vec<StoreResult<SlotAnswer>>);

/// Fleet-wide concurrency per flow key (see [`slots`]).
#[async_trait]
pub trait FlowSlots: Send + Sync + std::fmt::Debug + 'static {
    /// Takes leases and flow slots in one call (one round trip per server where the backend
    /// allows): the slots a message needs are asked for beside its lease, so a flow limit
    /// costs no round trip of its own. Each answer is its own, as [`IdempotencyStore::acquire`]'s.
    async fn acquire_with_slots(
        &self,
        leases: &[LeaseRequest],
        slots: &[SlotRequest],
    ) -> StoreResult<LeasesAndSlots>;

    /// Extends a held slot; `false` when it lapsed (its holder no longer counts).
    async fn extend_slot(&self, slot: &Slot, ttl: Duration) -> StoreResult<bool>;

    /// Gives slots back, so other runs of their keys may start at once: one call (a round
    /// trip per server) for all of them.
    async fn release_slots(&self, slots: &[Slot]) -> StoreResult<()>;

    /// How many hold a slot of `key` now (for operators and tests).
    async fn slots_held(&self, key: &str) -> StoreResult<u32>;
}

/// Handler state's committed values, as runs read them (see the `kv` module's docs); writes
/// go with a completion ([`IdempotencyStore::complete`]).
#[async_trait]
pub trait StateReads: Send + Sync + std::fmt::Debug + 'static {
    /// The live values of `keys` in the stored bucket `bucket`.
    async fn kv_get(&self, bucket: &str, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>>;

    /// The live keys of the stored bucket `bucket`, in order, at most `limit`.
    async fn kv_list(&self, bucket: &str, limit: usize) -> StoreResult<Vec<String>>;
}

/// What claiming a key found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// This caller claimed it: the key is done, its outbox committed and pending until
    /// [`IdempotencyStore::outbox_sent`].
    Won,
    /// The store knew the key already (done, or leased by a run).
    Taken {
        /// Outbox messages committed with it and not yet confirmed sent.
        pending_outbox: Vec<Outgoing>,
        /// How long ago they were committed (zero when there are none).
        pending_for: Duration,
    },
}

/// Work that is claimed and done in one step, with nothing to run between: a schedule's tick.
/// Beside it, what a scheduler reads: a key's record, and the store's clock.
#[async_trait]
pub trait Claims: Send + Sync + std::fmt::Debug + 'static {
    /// Records `key` as done, with `outbox` committed beside it, remembered for `window`,
    /// unless the store knows the key already. One atomic step: of any number of callers at
    /// once, one wins.
    async fn claim(&self, key: &str, outbox: &[Outgoing], window: Duration)
    -> StoreResult<Claimed>;

    /// Takes over sending `key`'s outbox when it has been pending for at least `after` (its
    /// claimant died before marking it sent): its pending clock restarts, so of any number of
    /// callers that find it overdue at once, one gets it. `None`: not pending that long (sent,
    /// or taken over a moment ago by another caller).
    async fn take_over(&self, key: &str, after: Duration) -> StoreResult<Option<Vec<Outgoing>>>;

    /// What the store holds for `key` (a scoped key).
    async fn status(&self, key: &str) -> StoreResult<KeyStatus>;

    /// The store's clock (Redis's `TIME`), which a fleet's hosts measure their own against.
    async fn time(&self) -> StoreResult<std::time::SystemTime>;
}

/// What the pipeline asks of a store for each message: leases and completions, the fleet-wide
/// rate and flow slots. Shared records, claims and handler state are other parts' (rollouts,
/// schedules, the fleet, the runtime's state reads), which the pipeline cannot reach.
pub trait MessageStore: IdempotencyStore + FleetRate + FlowSlots {}

impl<T: IdempotencyStore + FleetRate + FlowSlots> MessageStore for T {}

/// A store that serves every capability: what a host opens and wires, handing each part the
/// capability it uses.
pub trait Store: MessageStore + SharedRecords + StateReads + Claims {}

impl<T: IdempotencyStore + SharedRecords + FleetRate + FlowSlots + StateReads + Claims> Store
    for T
{
}
