//! The data path: poll, route, lease, invoke, dispose.
//!
//! ```text
//! poller (per queue) --batch--> route + key --> acquire leases (one call per batch)
//!    completed before -> ack without running (sending any outbox left unsent)
//!    leased elsewhere -> put back until the lease lapses
//!    granted          -> fetch an offloaded payload (bad pointer: reject; store down: retry),
//!                        invoke on the blocking pool, heartbeat extending lease + visibility
//!                        ack:    commit outbox + completed record, send outbox, delete
//!                        retry:  release lease, delay by backoff (dead-letter at max attempts)
//!                        reject: dead-letter with the reason, then delete
//! ```
//!
//! A semaphore caps messages in flight across queues, and a poller asks the queue only for as
//! many messages as it has permits, so nothing waits in a buffer while its visibility runs out.

mod acker;
pub mod backoff;
mod completer;
mod deadletter;
mod dispatch;
mod dispose;
mod handle;
mod poller;
mod prepare;

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, QueueConfig};
use crate::idempotency::IdempotencyStore;
use crate::payload::Payloads;
use crate::runtime::registry::Registry;
use crate::source::QueueSource;
use crate::stats::Stats;
pub use acker::Acker;
pub use completer::Completer;
pub use poller::run_poller;
pub use prepare::OUTBOX_KEY_ATTRIBUTE;

/// What every part of the pipeline shares.
#[derive(Clone)]
pub struct Shared {
    /// The checked configuration.
    pub config: Arc<Config>,
    /// The queue backend.
    pub source: Arc<dyn QueueSource>,
    /// The idempotency backend.
    pub store: Arc<dyn IdempotencyStore>,
    /// Loaded plugins.
    pub registry: Arc<Registry>,
    /// Counters.
    pub stats: Arc<Stats>,
    /// Caps messages in flight.
    pub in_flight: Arc<Semaphore>,
    /// Tracks message tasks, so shutdown can wait for them.
    pub tasks: TaskTracker,
    /// Cancelled when shutdown's grace period is over: unfinished work is released.
    pub abandon: CancellationToken,
    /// Coalesces completions into batched store calls.
    pub completer: Completer,
    /// Payload stores: pointers in, large outbox messages out.
    pub payloads: Arc<Payloads>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// One consumed queue's settings and ack batcher.
#[derive(Debug)]
pub struct QueueCtx {
    /// The queue's configuration.
    pub config: QueueConfig,
    /// Its ack batcher.
    pub acker: Acker,
}
