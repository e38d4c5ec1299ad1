//! One queue's pipeline on in-memory parts, for running messages outside a host: `qhost test`,
//! `qhost invoke` and `qhost replay` deliver each message through the same stages a host runs
//! (its format, routing, the flow gate, the lease, the handler's call, the commit) and read how
//! each run ended from the queue's tap ([`super::tap`]).
//!
//! The parts are the embedded queue with no file and an embedded store the caller keeps (the
//! state a test's messages share lives there); nothing is polled: [`Alone::deliver`] sends a
//! message, receives it as one batch and waits until it has met its fate. The pipeline's unit
//! tests stand on the same parts (`test_bed`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::acker::{AckTask, Acker};
use super::batch;
use super::completer::Completer;
use super::context::{QueueCtx, Shared};
use super::outbox_mark::OutboxMarks;
use super::putback::PutBacks;
use super::tap::{RunEnd, Tap};
use crate::config::{Config, QueueConfig};
use crate::format::Formats;
use crate::idempotency::Store;
use crate::idempotency::local::LocalStore;
use crate::message::{Outgoing, Received};
use crate::metrics::Metrics;
use crate::payload::Payloads;
use crate::plugin::Plugin;
use crate::plugin::registry::Registry;
use crate::progress::Progress;
use crate::source::QueueSource;
use crate::source::local::LocalQueue;
use crate::stats::Stats;

/// How long a delivery's deletes may take to go out once it has met its fate.
const SETTLE: Duration = Duration::from_secs(10);

impl Shared {
    /// The parts a host shares, for one plugin's messages outside a host: `config`'s limits,
    /// no payload stores, no traces.
    pub(crate) fn alone(
        config: Config,
        source: Arc<dyn QueueSource>,
        store: Arc<dyn Store>,
        plugin: Plugin,
    ) -> Shared {
        let config = Arc::new(config);
        let stats = Arc::new(Stats::default());
        let registry = Arc::new(Registry::new([plugin]));
        let fair = crate::flow::FairShares::new(config.max_in_flight);
        let in_flight = Arc::new(tokio::sync::Semaphore::new(config.max_in_flight));
        let (tasks, abandon) = (TaskTracker::new(), CancellationToken::new());
        let lines = super::WaitLines::new(super::LineParts {
            capacity: config.max_in_flight,
            store: store.clone(),
            fair: Arc::clone(&fair),
            in_flight: Arc::clone(&in_flight),
            abandon: abandon.clone(),
            tasks: tasks.clone(),
        });
        let metrics = Arc::new(Metrics::new(
            &config,
            Arc::clone(&stats),
            Arc::clone(&registry),
            Arc::clone(&fair),
        ));
        Shared {
            batches: super::batches::Batches::new(Arc::clone(&metrics), CancellationToken::new()),
            metrics,
            in_flight,
            fair,
            priorities: Default::default(),
            slot_releases: super::SlotReleases::spawn(
                store.clone(),
                Arc::clone(&stats),
                Arc::clone(&lines),
            ),
            lines,
            config,
            source,
            completer: Completer::spawn(store.clone()),
            store,
            registry,
            stats,
            tasks,
            abandon,
            payloads: Arc::new(Payloads::disabled()),
            tracer: None,
            outbox_marks: OutboxMarks::default(),
            recent: Arc::default(),
            fleet: Arc::default(),
        }
    }
}

impl QueueCtx {
    /// `queue` consumed from the embedded `source` with `shared`'s parts, its runs told to
    /// `tap` when given: the context, and its ack task.
    pub(crate) fn alone(
        source: &Arc<LocalQueue>,
        shared: Arc<Shared>,
        queue: &QueueConfig,
        tap: Option<Arc<Tap>>,
    ) -> (QueueCtx, AckTask) {
        let (acker, acks) = Acker::spawn(
            Arc::clone(source) as Arc<dyn QueueSource>,
            queue.name.clone(),
            Arc::clone(&shared.stats),
            Arc::new(Progress::new()),
        );
        let ctx = QueueCtx {
            put_backs: PutBacks::spawn(
                Arc::clone(source) as Arc<dyn QueueSource>,
                queue.name.clone(),
            ),
            format: crate::format::for_queue(&Formats::default(), queue),
            shared,
            config: queue.clone(),
            acker,
            capture: None,
            heartbeats: super::Heartbeats::default(),
            tap,
        };
        (ctx, acks)
    }
}

/// One queue's pipeline on in-memory parts, its runs told to a tap.
pub(crate) struct Alone {
    queue: Arc<QueueCtx>,
    source: Arc<LocalQueue>,
    tap: Arc<Tap>,
    /// The ack task, which ends once the queue's acker is dropped with the pipeline.
    _acks: AckTask,
    /// Sends so far, each a FIFO queue's deduplication id of its own.
    sent: std::sync::atomic::AtomicU64,
}

impl Alone {
    /// A pipeline consuming `queue` (as a `[[queue]]` of `qhost.toml` reads) for `plugin`,
    /// whose leases, completions and state live in `store`.
    pub(crate) fn new(
        queue: &QueueConfig,
        plugin: Plugin,
        store: Arc<LocalStore>,
    ) -> anyhow::Result<Alone> {
        let config = Config {
            queues: vec![queue.clone()],
            ..Config::default()
        };
        let source = Arc::new(LocalQueue::open(None, Default::default())?);
        let shared = Arc::new(Shared::alone(
            config,
            Arc::clone(&source) as Arc<dyn QueueSource>,
            store,
            plugin,
        ));
        let tap = Arc::new(Tap::default());
        let (ctx, acks) = QueueCtx::alone(&source, shared, queue, Some(Arc::clone(&tap)));
        Ok(Alone {
            queue: Arc::new(ctx),
            source,
            tap,
            _acks: acks,
            sent: Default::default(),
        })
    }

    /// Delivers `msg` as its queue would (its id, receive count and send time as it has them)
    /// and waits until it has met its fate: how each of its runs ended, in order.
    pub(crate) async fn deliver(&self, msg: &Received) -> anyhow::Result<Vec<RunEnd>> {
        let mut ends = self.deliver_all(std::slice::from_ref(msg)).await?;
        Ok(ends.pop().unwrap_or_default())
    }

    /// Delivers `msgs` together, received in batches as a poller receives them (a batch
    /// handler's calls gather them), and waits until each has met its fate: how each message's
    /// runs ended, in the order given.
    pub(crate) async fn deliver_all(&self, msgs: &[Received]) -> anyhow::Result<Vec<Vec<RunEnd>>> {
        let name = &self.queue.config.name;
        let mut sent = std::collections::HashMap::new();
        for (i, msg) in msgs.iter().enumerate() {
            let id = self.send(msg).await?;
            sent.insert(id, i);
        }
        let visibility = self.queue.config.visibility;
        let mut received = Vec::with_capacity(msgs.len());
        while received.len() < msgs.len() {
            let batch = (self
                .source
                .receive(name, 10, visibility, Duration::ZERO)
                .await)
                .context("the embedded queue")?;
            if batch.is_empty() {
                break;
            }
            received.extend(batch);
        }
        for got in &mut received {
            let Some(msg) = sent.get(&got.id).map(|&i| &msgs[i]) else {
                continue;
            };
            (got.id, got.delivery_count) = (msg.id.clone(), msg.delivery_count);
            got.sent_at_ms = msg.sent_at_ms;
        }
        self.run(received).await;
        self.source.purge(name).await?;
        let mut ends: Vec<Vec<RunEnd>> = msgs.iter().map(|_| Vec::new()).collect();
        for (id, end) in self.tap.take() {
            if let Some(at) = msgs.iter().position(|m| m.id == id) {
                ends[at].push(end);
            }
        }
        Ok(ends)
    }

    /// Puts `msg` on the queue as its producer would: the queue's id for it.
    async fn send(&self, msg: &Received) -> anyhow::Result<String> {
        let name = &self.queue.config.name;
        let n = (self.sent).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let fifo = name.ends_with(".fifo");
        let outgoing = Outgoing {
            queue: name.clone(),
            body: msg.body.clone(),
            attributes: msg.attributes.clone(),
            delay_seconds: 0,
            group_id: (msg.group_id.clone()).or_else(|| fifo.then(|| "qhost".to_string())),
            dedup_id: fifo.then(|| format!("qhost-{n}")),
        };
        let ids =
            (self.source.send(&[outgoing]).await).context("the message does not go on a queue")?;
        ids.into_iter()
            .next()
            .context("the embedded queue gave no id")
    }

    /// Runs `received` through the pipeline, ten at a time as a poller receives them, and
    /// waits for every task and delete they started.
    async fn run(&self, received: Vec<Received>) {
        let shared = &self.queue.shared;
        let mut received = received.into_iter().peekable();
        while received.peek().is_some() {
            let batch: Vec<Received> = received.by_ref().take(10).collect();
            let mut permits = Vec::with_capacity(batch.len());
            for _ in 0..batch.len() {
                if let Ok(permit) = Arc::clone(&shared.in_flight).acquire_owned().await {
                    permits.push(permit);
                }
            }
            batch::dispatch(&self.queue, batch, permits).await;
        }
        shared.tasks.close();
        shared.tasks.wait().await;
        shared.tasks.reopen();
        let deadline = tokio::time::Instant::now() + SETTLE;
        while self.queue.acker.pending() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
