//! A pipeline on in-memory parts, for the pipeline's unit tests: the embedded queue and store
//! without files, a native plugin, and the same [`Shared`] and [`QueueCtx`] the host builds.
//! A test sends messages, lets one receive go through [`batch::dispatch`] (routing, one lease
//! call for the batch, the handler, the fate), and reads what happened from the queue, the store
//! and the counters.

use std::sync::Arc;
use std::time::Duration;

use super::acker::AckTask;
use super::batch;
use super::context::{QueueCtx, Shared};
use crate::config::Config;
use crate::handler::Invoke;
use crate::idempotency::key::scoped;
use crate::idempotency::local::LocalStore;
use crate::idempotency::{KeyStatus, Store};
use crate::message::{Attribute, Outgoing, Received};
use crate::plugin::Plugin;
use crate::plugin::manifest::Manifest;
use crate::source::local::LocalQueue;
use crate::source::{QueueDepth, QueueSource};
use crate::stats::Counts;

/// The queue the bed consumes, and where its plugin may send.
pub(crate) const JOBS: &str = "jobs";
pub(crate) const OUT: &str = "out";
/// The plugin's name.
pub(crate) const PLUGIN: &str = "p";

/// What a bed's queue and plugin are: the queue's `[[queue]]` lines beside its name and
/// visibility timeout, and the plugin's manifest.
struct Setup<'a> {
    queue: &'a str,
    visibility_secs: u64,
    manifest: &'a str,
}

impl<'a> Setup<'a> {
    /// `queue`'s lines with a 30 s visibility timeout, and `manifest`.
    fn new(queue: &'a str, manifest: &'a str) -> Setup<'a> {
        Setup {
            queue,
            visibility_secs: 30,
            manifest,
        }
    }
}

/// One consumed queue on in-memory parts.
pub(crate) struct TestBed {
    pub(crate) queue: Arc<QueueCtx>,
    pub(crate) source: Arc<LocalQueue>,
    /// The embedded store behind the pipeline's (which a test may wrap).
    pub(crate) local: Arc<LocalStore>,
    acks: Option<AckTask>,
}

impl TestBed {
    /// A bed whose plugin has `manifest` (a manifest file's text) and runs `handler`.
    pub(crate) fn new(manifest: &str, handler: impl Invoke) -> TestBed {
        TestBed::with_store(manifest, handler, |local| local)
    }

    /// As [`TestBed::new`], the pipeline seeing the embedded store through `wrap`.
    pub(crate) fn with_store(
        manifest: &str,
        handler: impl Invoke,
        wrap: impl FnOnce(Arc<LocalStore>) -> Arc<dyn Store>,
    ) -> TestBed {
        let queue = format!("plugin = \"{PLUGIN}\"\n");
        let setup = Setup::new(&queue, manifest);
        TestBed::build(setup, handler, (wrap, |q| q))
    }

    /// As [`TestBed::new`] with a visibility timeout of `visibility_secs`, the host's calls to
    /// the queue (heartbeats', sends) going through `wrap`; the bed's own receives and acks go
    /// to the embedded queue itself.
    pub(crate) fn with_source(
        visibility_secs: u64,
        handler: impl Invoke,
        wrap: impl FnOnce(Arc<LocalQueue>) -> Arc<dyn QueueSource>,
    ) -> TestBed {
        let queue = format!("plugin = \"{PLUGIN}\"\n");
        let setup = Setup {
            visibility_secs,
            ..Setup::new(&queue, "")
        };
        TestBed::build(setup, handler, (|local| local, wrap))
    }

    /// A bed whose queue has `queue` (its `[[queue]]` lines beside the name and visibility).
    pub(crate) fn with_queue(queue: &str, manifest: &str, handler: impl Invoke) -> TestBed {
        TestBed::build(Setup::new(queue, manifest), handler, (|local| local, |q| q))
    }

    fn build(
        setup: Setup<'_>,
        handler: impl Invoke,
        (wrap, wrap_source): (
            impl FnOnce(Arc<LocalStore>) -> Arc<dyn Store>,
            impl FnOnce(Arc<LocalQueue>) -> Arc<dyn QueueSource>,
        ),
    ) -> TestBed {
        let local = Arc::new(LocalStore::open(None).expect("an in-memory store"));
        let store = wrap(Arc::clone(&local));
        let Setup {
            queue,
            visibility_secs,
            manifest,
        } = setup;
        let config = Config::parse(&format!(
            "[retry]\nbase-secs = 1\nmax-secs = 60\n\
             [[queue]]\nname = \"{JOBS}\"\nvisibility-timeout-secs = {visibility_secs}\n{queue}"
        ))
        .expect("the bed's configuration");
        let manifest = Manifest::parse(manifest).expect("the bed's manifest");
        let plugin = Plugin::new(PLUGIN, "v1", manifest, Arc::new(handler));
        let source = Arc::new(LocalQueue::open(None, Default::default()).expect("a queue"));
        let queue_config = config.queues[0].clone();
        let shared = Arc::new(Shared::alone(
            config,
            wrap_source(Arc::clone(&source)),
            store,
            plugin,
        ));
        let (queue, acks) = QueueCtx::alone(&source, shared, &queue_config, None);
        let queue = Arc::new(queue);
        TestBed {
            queue,
            source,
            local,
            acks: Some(acks),
        }
    }

    /// Sends a job keyed `job` (the `job` attribute) with `body` to the bed's queue.
    pub(crate) async fn send(&self, job: &str, body: &str) {
        let msg = Outgoing::new(JOBS, body).with_attribute(Attribute::string("job", job));
        self.source.send(&[msg]).await.expect("sent");
    }

    /// Sends `body` as it is to the bed's queue.
    pub(crate) async fn send_body(&self, body: impl Into<Vec<u8>>) {
        let msg = Outgoing::new(JOBS, body);
        self.source.send(&[msg]).await.expect("sent");
    }

    /// Receives what is visible, as one batch through the pipeline, and waits until every
    /// message of it has met its fate and its delete (if any) is done. Returns how many.
    pub(crate) async fn deliver(&self) -> usize {
        let shared = &self.queue.shared;
        let visibility = self.queue.config.visibility;
        let batch = (self
            .source
            .receive(JOBS, 10, visibility, Duration::ZERO)
            .await)
            .expect("received");
        let n = batch.len();
        let mut permits = Vec::new();
        for _ in 0..n {
            let permit = Arc::clone(&shared.in_flight).acquire_owned().await;
            permits.push(permit.expect("a permit"));
        }
        batch::dispatch(&self.queue, batch, permits).await;
        shared.tasks.close();
        shared.tasks.wait().await;
        shared.tasks.reopen();
        for _ in 0..1000 {
            if self.queue.acker.pending() == 0 {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the deletes did not go out");
    }

    /// Stops the ack task, as a host does at shutdown; every delete must have gone out.
    pub(crate) async fn close(mut self) {
        if let Some(acks) = self.acks.take() {
            acks.close(Duration::from_secs(5))
                .await
                .expect("no delete left");
        }
    }

    /// The counters, all queues and plugins together.
    pub(crate) fn counts(&self) -> Counts {
        self.queue.shared.stats.total()
    }

    /// What `queue` holds.
    pub(crate) async fn depth(&self, queue: &str) -> QueueDepth {
        self.source.depth(queue).await.expect("a depth")
    }

    /// How many of `queue`'s messages are visible, and how many hidden.
    pub(crate) async fn split(&self, queue: &str) -> (u64, u64) {
        let depth = self.depth(queue).await;
        (depth.visible, depth.invisible)
    }

    /// Every message `queue` holds, received or not.
    pub(crate) async fn contents(&self, queue: &str) -> Vec<Received> {
        self.source.peek(queue, 100).await.expect("peeked")
    }

    /// What the store knows of `job`'s key.
    pub(crate) async fn status(&self, job: &str) -> KeyStatus {
        self.local
            .status(&self.scoped(job))
            .await
            .expect("a status")
    }

    /// `job`'s key as the store holds it.
    pub(crate) fn scoped(&self, job: &str) -> String {
        scoped(&self.queue.shared.config.namespace, PLUGIN, job)
    }
}
