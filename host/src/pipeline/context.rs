//! What the stages share: the host's backends and limits ([`Shared`]), and one consumed queue's
//! settings and ack batcher ([`QueueCtx`]), which holds the host's part so that a delivery
//! carries one handle to everything it may need.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::acker::Acker;
use super::batches::Batches;
use super::completer::Completer;
use super::heartbeats::Heartbeats;
use super::outbox_mark::OutboxMarks;
use super::priority::Priorities;
use super::putback::PutBacks;
use super::slot_releases::SlotReleases;
use super::turns::WaitLines;
use crate::config::{Config, QueueConfig};
use crate::flow::FairShares;
use crate::format::Format;
use crate::idempotency::MessageStore;
use crate::metrics::Metrics;
use crate::payload::Payloads;
use crate::plugin::registry::Registry;
use crate::recent::RecentDeadLetters;
use crate::source::QueueSource;
use crate::stats::{Event, Stats};
use crate::traces::Tracer;

/// What every part of the pipeline shares.
pub(crate) struct Shared {
    /// The checked configuration.
    pub(crate) config: Arc<Config>,
    /// The queue backend.
    pub(crate) source: Arc<dyn QueueSource>,
    /// The idempotency backend, as far as a message needs it: leases, completions, the
    /// fleet-wide rate and flow slots.
    pub(crate) store: Arc<dyn MessageStore>,
    /// Loaded plugins.
    pub(crate) registry: Arc<Registry>,
    /// Counters.
    pub(crate) stats: Arc<Stats>,
    /// Metrics only the pipeline can take (durations, in flight).
    pub(crate) metrics: Arc<Metrics>,
    /// Caps messages in flight.
    pub(crate) in_flight: Arc<Semaphore>,
    /// The runs of each flow key on this host, for fair shares of the in-flight slots.
    pub(crate) fair: Arc<FairShares>,
    /// Which priorities' queues are busy, for the pollers of lower ones.
    pub(crate) priorities: Arc<Priorities>,
    /// Gives ended deliveries' flow slots back in batches.
    pub(crate) slot_releases: SlotReleases,
    /// Messages kept while their flow keys wait for their turn.
    pub(crate) lines: Arc<WaitLines>,
    /// Tracks message tasks, so shutdown can wait for them.
    pub(crate) tasks: TaskTracker,
    /// Cancelled when shutdown's grace period is over: unfinished work is released.
    pub(crate) abandon: CancellationToken,
    /// Coalesces completions into batched store calls.
    pub(crate) completer: Completer,
    /// Payload stores: pointers in, large outbox messages out.
    pub(crate) payloads: Arc<Payloads>,
    /// Starts each delivery's span, when traces are on.
    pub(crate) tracer: Option<Tracer>,
    /// Marks sent outboxes, retrying when the store does not answer.
    pub(crate) outbox_marks: OutboxMarks,
    /// The dead letters sent lately, for the console.
    pub(crate) recent: Arc<RecentDeadLetters>,
    /// The fleet: which queues are paused fleet-wide.
    pub(crate) fleet: Arc<crate::fleet::Fleet>,
    /// Batch handlers' gatherers.
    pub(crate) batches: Batches,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// One consumed queue: its settings, its ack batcher, and the host's shared parts.
#[derive(Debug)]
pub(crate) struct QueueCtx {
    /// The host's shared parts.
    pub(crate) shared: Arc<Shared>,
    /// The queue's configuration.
    pub(crate) config: QueueConfig,
    /// How its messages are read.
    pub(crate) format: Arc<dyn Format>,
    /// Its ack batcher.
    pub(crate) acker: Acker,
    /// Its put-back batcher.
    pub(crate) put_backs: PutBacks,
    /// Its capture, when its configuration asks for one.
    pub(crate) capture: Option<Arc<crate::capture::Capture>>,
    /// Its deliveries' heartbeats, extended by one sweeper.
    pub(crate) heartbeats: Heartbeats,
    /// Told how each run ended, when its messages are run outside a host (`alone`).
    pub(crate) tap: Option<Arc<super::tap::Tap>>,
}

impl QueueCtx {
    /// Counts `event` for `plugin` on this queue.
    pub(crate) fn record(&self, plugin: &str, event: Event) {
        self.shared.stats.record(&self.config.name, plugin, event);
    }
}
