//! The heartbeat: while a delivery holds a lease, extend the lease and the message's visibility
//! every third of the visibility timeout, so a long handler is neither redelivered nor
//! overtaken.
//!
//! A delivery's heartbeat is an entry in its queue's registry (`heartbeats`), not a task and a
//! timer of its own: one sweeper task per queue sleeps until the earliest entry is due and
//! starts the extensions that are. Most handlers end long before their first beat, so a task
//! per delivery was a spawn, two polls and a timer for nothing. While nothing beats, the
//! sweeper holds no timer.
//!
//! A [`Heartbeat`] is a guard. Dropping it stops the beats; [`Heartbeat::stop`] also waits for
//! an extension already under way, so that a put-back that follows cannot be overtaken by a
//! late `ChangeMessageVisibility` hiding the message again for a whole timeout. Each extension
//! runs under a lock that `stop` takes once after removing the entry, so an idle heartbeat (the
//! usual case) is stopped without waiting for anything.
//!
//! The lease and the broker's hold are extended apart, each under its own lock, and a beat
//! skips only the call whose last one is still under way. A broker slower than a beat's period
//! (an SQS-compatible server passing over a deep queue) must not hold the lease's extension
//! back: the lease would lapse behind it, and the host that receives the message once its
//! visibility lapses too would lease it and run it again while this one still runs it. With the
//! lease kept, that host finds it in progress and puts it back.
//!
//! A [`Hold`] does the same for messages received but not started yet (a FIFO group's later
//! messages while an earlier one runs), so they are not delivered again while they wait.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::context::QueueCtx;
use super::heartbeats::{Beat, Registry, Sweeper};
use crate::faults::Operation;
use crate::idempotency::slots::Slot;
use crate::idempotency::{IdempotencyError, Lease};

/// Shortest period between beats, however short the visibility timeout.
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// A running heartbeat for one delivery.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    registry: Arc<Registry>,
    id: u64,
    beat: Arc<Beat>,
}

impl Heartbeat {
    /// Starts beating for the delivery `receipt` under `lease` (and `slot`, a flow slot it
    /// holds), if the queue wants heartbeats; the first beat is a period from now.
    pub(crate) fn start(
        queue: &Arc<QueueCtx>,
        receipt: &str,
        lease: &Lease,
        slot: Option<&Slot>,
    ) -> Option<Self> {
        if !queue.config.heartbeat {
            return None;
        }
        let beat = Arc::new(Beat::new(receipt, lease, slot));
        let registry = queue.heartbeats.registry();
        let period = period(queue);
        let (id, sweeper) = registry.add(Instant::now() + period, Arc::clone(&beat));
        match sweeper {
            Sweeper::Start => {
                let sweep = sweep(Arc::clone(registry), Arc::downgrade(queue), period);
                tokio::spawn(sweep);
            }
            Sweeper::Wake => registry.wake(),
            Sweeper::Running => {}
        }
        let registry = Arc::clone(registry);
        Some(Heartbeat { registry, id, beat })
    }

    /// Stops beating and waits for an extension under way to land.
    pub(crate) async fn stop(self) {
        let beat = Arc::clone(&self.beat);
        drop(self);
        let _leased = beat.leasing.lock().await;
        let _held = beat.holding.lock().await;
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.beat.stopped.store(true, Ordering::SeqCst);
        self.registry.remove(self.id);
    }
}

/// The queue's sweeper: sleeps until the next beat is due (or, with none, until one starts),
/// and starts each due extension in a task of its own, so a slow one delays no other.
async fn sweep(registry: Arc<Registry>, queue: Weak<QueueCtx>, period: Duration) {
    loop {
        match registry.next_due() {
            Some(due) => {
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    () = registry.woken() => {}
                }
            }
            None => registry.woken().await,
        }
        if registry.is_closed() {
            return;
        }
        let Some(queue) = queue.upgrade() else {
            return;
        };
        for beat in registry.take_due(Instant::now(), period) {
            tokio::spawn(extend_beat(Arc::clone(&queue), beat));
        }
    }
}

/// One beat's extensions of the lease (with its flow slot) and of the broker's hold, side by
/// side: each unless the beat stopped first or that part's last extension is still under way (a
/// store or queue slower than a period: extensions never pile up behind it, and a slow one
/// holds back only itself); once started, each finishes even if a stop arrives meanwhile
/// (`stop` waits for both locks).
async fn extend_beat(queue: Arc<QueueCtx>, beat: Arc<Beat>) {
    tokio::join!(extend_lease(&queue, &beat), extend_hold(&queue, &beat));
}

async fn extend_lease(queue: &QueueCtx, beat: &Beat) {
    let Ok(_leasing) = beat.leasing.try_lock() else {
        return;
    };
    if beat.stopped.load(Ordering::SeqCst) {
        return;
    }
    extend(queue, &beat.lease).await;
    if let Some(slot) = &beat.slot {
        extend_slot(queue, slot).await;
    }
}

async fn extend_hold(queue: &QueueCtx, beat: &Beat) {
    let Ok(_holding) = beat.holding.try_lock() else {
        return;
    };
    if beat.stopped.load(Ordering::SeqCst) {
        return;
    }
    hold(queue, &beat.receipt).await;
}

/// Every third of the queue's visibility timeout, never shorter than [`MIN_PERIOD`].
fn period(queue: &QueueCtx) -> Duration {
    (queue.config.visibility / 3).max(MIN_PERIOD)
}

/// Ticks every [`period`], the first tick one period from now.
fn ticker(queue: &QueueCtx) -> tokio::time::Interval {
    let period = period(queue);
    tokio::time::interval_at(Instant::now() + period, period)
}

async fn extend(queue: &QueueCtx, lease: &Lease) {
    let shared = &queue.shared;
    let visibility = queue.config.visibility;
    match shared.store.extend(lease, visibility).await {
        Ok(()) => {}
        Err(IdempotencyError::LeaseLost(key)) => {
            tracing::warn!(%key, "lease lost while the handler runs; its result will be discarded")
        }
        Err(e) => {
            if let Some(held_back) = shared
                .stats
                .record_failure(Operation::Extend, e.is_timeout())
            {
                tracing::warn!(key = %lease.key, error = %e, held_back, "could not extend lease")
            }
        }
    }
}

/// Extends the message's hold at the broker (its visibility) by the queue's timeout.
async fn hold(queue: &QueueCtx, receipt: &str) {
    let (shared, visibility) = (&queue.shared, queue.config.visibility);
    let queue_name = &queue.config.name;
    if let Err(e) = shared.source.hold(queue_name, receipt, visibility).await {
        let op = Operation::ChangeVisibility;
        if let Some(held_back) = shared.stats.record_failure(op, e.is_timeout()) {
            tracing::warn!(queue = %queue_name, operation = op.name(), error = %e, held_back, "could not extend visibility");
        }
    }
}

/// Extends a flow slot with the lease, so a long run keeps its slot and a dead host's lapses.
async fn extend_slot(queue: &QueueCtx, slot: &Slot) {
    let shared = &queue.shared;
    match shared
        .store
        .extend_slot(slot, queue.config.visibility)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(key = %slot.key, "flow slot lapsed while the handler runs; the key may briefly run one over its limit")
        }
        Err(e) => {
            if let Some(held_back) = shared
                .stats
                .record_failure(Operation::Extend, e.is_timeout())
            {
                tracing::warn!(key = %slot.key, error = %e, held_back, "could not extend a flow slot")
            }
        }
    }
}

/// Keeps received messages hidden while they wait their turn: a FIFO group's later messages
/// behind a running one. Their visibility is extended every third of the timeout until each
/// is let go (it starts, with a heartbeat of its own) or the hold is dropped.
#[derive(Debug)]
pub(crate) struct Hold {
    waiting: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
}

impl Hold {
    /// Holds the deliveries `receipts` of `queue`.
    pub(crate) fn start(queue: &Arc<QueueCtx>, receipts: Vec<String>) -> Self {
        let hold = Hold {
            waiting: Arc::new(Mutex::new(receipts)),
            stop: CancellationToken::new(),
        };
        tokio::spawn(keep_hidden(
            Arc::clone(queue),
            Arc::clone(&hold.waiting),
            hold.stop.clone(),
        ));
        hold
    }

    /// Stops extending `receipt`; an extension under way lands first.
    pub(crate) async fn let_go(&self, receipt: &str) {
        self.waiting.lock().await.retain(|r| r != receipt);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn keep_hidden(
    queue: Arc<QueueCtx>,
    waiting: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
) {
    let visibility = queue.config.visibility;
    let mut tick = ticker(&queue);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let waiting = waiting.lock().await;
        if stop.is_cancelled() || waiting.is_empty() {
            return;
        }
        for receipt in waiting.iter() {
            let name = &queue.config.name;
            if let Err(e) = queue.shared.source.hold(name, receipt, visibility).await {
                let op = Operation::ChangeVisibility;
                if let Some(held_back) = queue.shared.stats.record_failure(op, e.is_timeout()) {
                    tracing::warn!(queue = %name, operation = op.name(), error = %e, held_back, "could not keep a waiting message hidden");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_bed::TestBed;
    use super::*;
    use crate::handler::{HandlerMessage, Invocation, Outcome};
    use crate::idempotency::{Acquired, IdempotencyStore as _, LeaseRequest};
    use crate::source::SourceError;
    use crate::source::twisted::{Twist, Twisted};

    /// Visibility changes the heartbeats asked for. The receipts here are ones the queue never
    /// gave, so each change fails and is counted: what the sweeper did, seen from outside.
    fn visibility_changes(bed: &TestBed) -> u64 {
        let failures = bed.queue.shared.stats.failures_by_operation();
        let changes = failures
            .iter()
            .find(|(op, ..)| *op == Operation::ChangeVisibility);
        changes.map_or(0, |(_, timeouts, errors)| timeouts + errors)
    }

    async fn lease(bed: &TestBed, key: &str) -> Lease {
        let request = LeaseRequest {
            key: key.to_string(),
            ttl: Duration::from_secs(30),
            window: Duration::from_secs(600),
        };
        match bed.local.acquire(&[request]).await.unwrap().remove(0) {
            Ok(Acquired::Granted(lease)) => lease,
            other => panic!("a fresh key is granted: {other:?}"),
        }
    }

    /// Holds that take a minute (a broker passing over a deep queue).
    #[derive(Debug)]
    struct SlowHolds;

    #[async_trait::async_trait]
    impl Twist for SlowHolds {
        async fn hold(&self) -> Result<(), SourceError> {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(())
        }
    }

    /// A broker whose visibility change takes longer than the lease does not let the lease
    /// lapse: each beat still extends it. On real time, as the embedded store keeps the wall
    /// clock's: a 2 s visibility (and lease) beats every 667 ms; the first beat's visibility
    /// change hangs for a minute; 5 s on, the lease is still held, so another host that
    /// receives the message finds its key busy instead of leasing it and running it again. (With
    /// the lease's extension behind the hold, it lapsed at 2.7 s.)
    #[tokio::test(flavor = "multi_thread")]
    async fn a_slow_broker_hold_does_not_hold_back_the_lease() {
        let bed = TestBed::with_source(
            2,
            |_: HandlerMessage| Ok(Invocation::new(Outcome::Ack)),
            |queue| {
                Arc::new(Twisted {
                    inner: queue,
                    twist: SlowHolds,
                })
            },
        );
        let request = LeaseRequest {
            key: "slow".to_string(),
            ttl: Duration::from_secs(2),
            window: Duration::from_secs(600),
        };
        let lease = match bed.local.acquire(std::slice::from_ref(&request)).await {
            Ok(mut answers) => match answers.remove(0) {
                Ok(Acquired::Granted(lease)) => lease,
                other => panic!("a fresh key is granted: {other:?}"),
            },
            Err(e) => panic!("{e}"),
        };
        let beat = Heartbeat::start(&bed.queue, "receipt", &lease, None).expect("on by default");
        tokio::time::sleep(Duration::from_secs(5)).await;
        let second = bed.local.acquire(&[request]).await.unwrap().remove(0);
        assert!(
            matches!(second, Ok(Acquired::Busy { .. })),
            "the lease was kept while the hold was slow: {second:?}"
        );
        drop(beat);
    }

    /// With a 30 s visibility each beat is due every 10 s from its start; a stopped one is
    /// never extended again, and with none left the sweeper waits with no timer.
    #[tokio::test(start_paused = true)]
    async fn the_sweeper_extends_each_beat_when_due_and_idles_when_none_run() {
        let bed = TestBed::new("", |_: HandlerMessage| Ok(Invocation::new(Outcome::Ack)));
        let first = lease(&bed, "a").await;
        let a = Heartbeat::start(&bed.queue, "receipt-a", &first, None).expect("on by default");
        tokio::time::sleep(Duration::from_secs(5)).await;
        let second = lease(&bed, "b").await;
        let b = Heartbeat::start(&bed.queue, "receipt-b", &second, None).expect("on");
        tokio::time::sleep(Duration::from_millis(5_100)).await;
        assert_eq!(
            visibility_changes(&bed),
            1,
            "a's first beat at 10 s, b's not yet"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(visibility_changes(&bed), 2, "b's first beat at 15 s");
        a.stop().await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(visibility_changes(&bed), 3, "b's second beat; a stopped");
        drop(b);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            visibility_changes(&bed),
            3,
            "nothing beats after both stopped"
        );
        assert!(
            bed.queue.heartbeats.registry().is_idle(),
            "no beats, the sweeper idle"
        );
    }
}
