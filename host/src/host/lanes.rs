//! Lanes: the data path on several threads, each a runtime of its own, so a message never
//! crosses cores.
//!
//! On tokio's multi-threaded runtime, the tasks of one message (its run, the ack and put-back
//! batchers, the connections' tasks) move between worker threads: one worker spawns, the other
//! steals, an I/O event wakes whichever is parked. Each move is a wakeup across cores and a
//! message's working set pulled from the other core's cache. On two cores that made every
//! message cost a third more CPU than on one (`cargo bench --bench sqs_client`, docs/benchmarks.md).
//!
//! With `lanes = N`, the host runs its data path N times over, each on a thread with a
//! current-thread runtime: per lane, each queue's pollers, its batchers, its heartbeat sweeper
//! and every message task, with a connection of its own to the idempotency store and a pool of
//! its own for SQS's hot calls, opened on the lane's thread (a connection is driven by a task of
//! the runtime that opened it). A message is received, leased, run and acked on one thread.
//!
//! What the lanes share is what the host promises as a whole: `max-in-flight` (one semaphore;
//! a lane whose messages are slow holds its permits, so the idle lane's pollers take the rest,
//! which is how work spreads), queue priorities, each queue's progress and capture, the plugins,
//! metrics and stats. The rest of the host (the admin server, health checks, the fleet
//! follower, schedules, the plugin watcher) stays on the runtime the host was started on.
//! A batch handler's batches gather per lane.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Host;
use crate::capture::Capture;
use crate::idempotency::Store;
use crate::pipeline::priority::Priorities;
use crate::progress::Progress;
use crate::source::QueueSource;

/// What every lane of a host shares (a host of one lane has one of these too).
pub(super) struct Common {
    /// `max-in-flight`, across lanes and queues.
    pub(super) in_flight: Arc<Semaphore>,
    /// Which priorities' queues are busy, across lanes.
    pub(super) priorities: Arc<Priorities>,
    /// Per configured queue, in order: its progress (readiness reads it) and its capture.
    pub(super) queues: Vec<(Arc<Progress>, Option<Arc<Capture>>)>,
}

impl Host {
    /// The parts its lanes share; each queue's progress is tracked for readiness.
    pub(super) fn common(&self) -> Common {
        let queues = (self.config.queues.iter())
            .map(|q| {
                let progress = Arc::new(Progress::new());
                self.health.track(&q.name, Arc::clone(&progress));
                (progress, self.capture(q).map(Arc::new))
            })
            .collect();
        Common {
            in_flight: Arc::new(Semaphore::new(self.config.max_in_flight)),
            priorities: Arc::default(),
            queues,
        }
    }

    /// Consumes on `lanes` threads until `shutdown`, each lane draining its own messages; the
    /// first lane's error, if any, once all have ended. A lane that cannot start, fails or
    /// panics stops the others.
    pub(super) async fn consume_in_lanes(
        &self,
        lanes: usize,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let common = Arc::new(self.common());
        let stop = shutdown.child_token();
        let mut ends = Vec::with_capacity(lanes);
        for lane in 0..lanes {
            match self.start_lane(lane, Arc::clone(&common), stop.clone()) {
                Ok(end) => ends.push(end),
                Err(e) => {
                    stop.cancel();
                    ends.push(ended_with(Err(e)));
                    break;
                }
            }
        }
        // A lane that fails or panics stops the others, so the host ends with its error rather
        // than running on fewer lanes. (A panic in a message's task ends only that task, as on
        // any runtime; what reaches here is the lane's own loop.)
        let ended = ends.into_iter().map(|end| {
            let stop = stop.clone();
            async move {
                let ended = end.await.unwrap_or_else(|_| {
                    Err(anyhow::anyhow!(
                        "a lane's thread ended without finishing (a panic; see the log)"
                    ))
                });
                if ended.is_err() {
                    stop.cancel();
                }
                ended
            }
        });
        let results = futures_util::future::join_all(ended).await;
        results
            .into_iter()
            .collect::<anyhow::Result<Vec<()>>>()
            .map(drop)
    }

    /// Starts lane `lane` on a thread of its own; its end, with its result.
    fn start_lane(
        &self,
        lane: usize,
        common: Arc<Common>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<tokio::sync::oneshot::Receiver<anyhow::Result<()>>> {
        let (ended, end) = tokio::sync::oneshot::channel();
        let host = self.with_clients(Arc::clone(&self.source), self.store.clone());
        std::thread::Builder::new()
            .name(format!("qhost-lane-{lane}"))
            .spawn(move || {
                let result = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(host.run_lane(lane, &common, shutdown)),
                    Err(e) => Err(anyhow::Error::from(e).context("starting a lane's runtime")),
                };
                let _ = ended.send(result);
            })
            .context("starting a lane's thread")?;
        Ok(end)
    }

    /// On the lane's thread: its connections, then its pollers until `shutdown`, then its drain.
    async fn run_lane(
        &self,
        lane: usize,
        common: &Common,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let source = (self.source.for_lane()).unwrap_or_else(|| Arc::clone(&self.source));
        let host = self.with_clients(source, self.lane_store(lane).await);
        tracing::debug!(lane, "lane started");
        host.consume(shutdown, common).await
    }

    /// This host with `source` and `store` for its clients, sharing everything else: a lane's
    /// view of it. (Not `Clone`: two hosts sharing one's stats and health would each run.)
    fn with_clients(&self, source: Arc<dyn QueueSource>, store: Arc<dyn Store>) -> Host {
        Host {
            config: Arc::clone(&self.config),
            source,
            store,
            registry: Arc::clone(&self.registry),
            plugins: self.plugins.clone(),
            payloads: Arc::clone(&self.payloads),
            stats: Arc::clone(&self.stats),
            metrics: Arc::clone(&self.metrics),
            health: Arc::clone(&self.health),
            recent: Arc::clone(&self.recent),
            schedules: Arc::clone(&self.schedules),
            fleet: Arc::clone(&self.fleet),
            fair: Arc::clone(&self.fair),
            abandon: self.abandon.clone(),
            tracer: self.tracer.clone(),
        }
    }

    /// The lane's own store connection; the host's, shared, when the store cannot open one now
    /// (an outage at start): the lane then still runs, as a host without lanes survives an
    /// outage, its calls crossing to the thread that drives the host's connection.
    async fn lane_store(&self, lane: usize) -> Arc<dyn Store> {
        match self.store.for_lane().await {
            Ok(Some(own)) => own,
            Ok(None) => self.store.clone(),
            Err(e) => {
                tracing::warn!(lane, error = %e, "a lane could not open its own connection to the idempotency store; it shares the host's");
                self.store.clone()
            }
        }
    }
}

/// A lane's end that is already known.
fn ended_with(result: anyhow::Result<()>) -> tokio::sync::oneshot::Receiver<anyhow::Result<()>> {
    let (ended, end) = tokio::sync::oneshot::channel();
    let _ = ended.send(result);
    end
}
