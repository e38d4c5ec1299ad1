//! Batch calls: leased messages gathered for a batch handler (`handle-batch`), one call for
//! them all, and each message handed back its own answer.
//!
//! Batches are an invocation shape, not a fate. Each message reaches here as any other does —
//! read, routed, leased on its own key (duplicates and busy keys never get this far), its
//! heartbeat running — and waits for its answer in its own task, which then ends it by its
//! own outcome: acked with its own outbox and state, retried, or dead-lettered. So a batch
//! changes how many messages one guest call sees, and nothing about what happens to each.
//!
//! Gathering is per plugin version (a canary's messages are gathered apart from the serving
//! version's): the first message opens a call, which takes what else arrives within the
//! plugin's `batch.max-wait-ms`, up to `batch.max-messages`, and is then made in a task of
//! its own while the next call gathers. A message that has failed before (a retry, or a
//! batch call that trapped, timed out or ran out of memory) is called alone
//! ([`Gathering::Alone`]), so a message that poisons every call it is in takes no neighbour to
//! the dead-letter queue with it: its neighbours' next calls run without it.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::gather::gather;
use crate::handler::{Failure, HandlerMessage, Invocation};
use crate::metrics::Metrics;
use crate::plugin::Plugin;

/// How long a plugin version's gatherer waits for a message before it retires (a reloaded
/// plugin's old version stops gathering once its last messages are done).
const IDLE: Duration = Duration::from_secs(30);

/// How a message joins a batch handler's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gathering {
    /// With what else arrives for the plugin.
    Gathered,
    /// In a call of its own: it has failed before.
    Alone,
}

/// One message waiting for its call.
struct Item {
    input: HandlerMessage,
    reply: oneshot::Sender<Result<Invocation, Failure>>,
}

/// The open gatherers, by plugin name and version.
type Open = HashMap<(String, String), mpsc::UnboundedSender<Item>>;

/// Every batch plugin's gatherers on this host.
#[derive(Clone)]
pub(crate) struct Batches {
    open: Arc<Mutex<Open>>,
    metrics: Arc<Metrics>,
    abandon: CancellationToken,
}

impl std::fmt::Debug for Batches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches").finish_non_exhaustive()
    }
}

impl Batches {
    /// No gatherers yet; each call's size is observed in `metrics`, and calls still running
    /// when `abandon` is cancelled (the shutdown grace is over) are dropped, as a single
    /// message's call is: their messages have been put back already.
    pub(crate) fn new(metrics: Arc<Metrics>, abandon: CancellationToken) -> Self {
        Batches {
            open: Arc::default(),
            metrics,
            abandon,
        }
    }

    /// What a call needs: where it is counted, and when it is given up.
    fn caller(&self, plugin: &Arc<Plugin>) -> Caller {
        Caller {
            plugin: Arc::clone(plugin),
            metrics: Arc::clone(&self.metrics),
            abandon: self.abandon.clone(),
        }
    }

    /// Runs `input` on the batch plugin `plugin`, in a call gathered with others or alone: the
    /// message's own answer.
    pub(crate) async fn call(
        &self,
        plugin: &Arc<Plugin>,
        input: HandlerMessage,
        gathering: Gathering,
    ) -> Result<Invocation, Failure> {
        let (reply, answer) = oneshot::channel();
        let item = Item { input, reply };
        match gathering {
            Gathering::Alone => self.caller(plugin).call(vec![item]).await,
            Gathering::Gathered => self.submit(plugin, item),
        }
        answer.await.unwrap_or_else(|_| {
            Err(Failure::Trap(
                "the batch call ended without an answer".into(),
            ))
        })
    }

    /// Hands `item` to its plugin version's gatherer, opening one if there is none. Sends are
    /// made under the lock a retiring gatherer takes, so none lands in a closed channel.
    fn submit(&self, plugin: &Arc<Plugin>, item: Item) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let id = (plugin.name.clone(), plugin.version.clone());
        let item = match open.get(&id) {
            Some(tx) => match tx.send(item) {
                Ok(()) => return,
                Err(mpsc::error::SendError(item)) => item,
            },
            None => item,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(item);
        open.insert(id.clone(), tx);
        let gatherer = Gatherer {
            open: Arc::clone(&self.open),
            caller: self.caller(plugin),
            id,
        };
        tokio::spawn(gatherer.run(rx));
    }
}

/// One plugin version's gatherer.
struct Gatherer {
    open: Arc<Mutex<Open>>,
    caller: Caller,
    id: (String, String),
}

impl Gatherer {
    /// Gathers calls until idle for [`IDLE`], making each in a task of its own.
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Item>) {
        let shape = self.caller.plugin.manifest.batch_shape();
        let max = shape.max_messages as usize;
        while let Some(first) = self.next(&mut rx).await {
            let items = gather(first, &mut rx, max, shape.max_wait()).await;
            let caller = self.caller.clone();
            tokio::spawn(async move { caller.call(items).await });
        }
    }

    /// The next call's first message, or `None` once it has retired.
    async fn next(&self, rx: &mut mpsc::UnboundedReceiver<Item>) -> Option<Item> {
        if let Ok(item) = tokio::time::timeout(IDLE, rx.recv()).await {
            return item;
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(item) = rx.try_recv() {
            return Some(item);
        }
        open.remove(&self.id);
        None
    }
}

/// What a call needs.
#[derive(Clone)]
struct Caller {
    plugin: Arc<Plugin>,
    metrics: Arc<Metrics>,
    abandon: CancellationToken,
}

impl Caller {
    /// Calls the plugin with `items`' messages (under its concurrency limit, if it has one)
    /// and answers each: its own invocation, or the call's failure, which is every message's.
    async fn call(&self, items: Vec<Item>) {
        let (plugin, n) = (&self.plugin, items.len());
        self.metrics.observe_batch(&plugin.name, n);
        let slot = match plugin.slots() {
            Some(slots) => Arc::clone(slots).acquire_owned().await.ok(),
            None => None,
        };
        let (inputs, replies): (Vec<_>, Vec<_>) =
            items.into_iter().map(|i| (i.input, i.reply)).unzip();
        let span = tracing::info_span!("batch", plugin = %plugin.name, version = %plugin.version, messages = n);
        let called = AssertUnwindSafe(plugin.invoke_batch(inputs).instrument(span)).catch_unwind();
        let called = tokio::select! {
            called = called => called,
            // Dropping the call stops the guest at its next epoch yield.
            () = self.abandon.cancelled() => return,
        };
        drop(slot);
        // `Plugin::invoke_batch` answers one invocation per message or fails them all.
        let answers: Vec<Result<Invocation, Failure>> = match called {
            Ok(Ok(invocations)) => invocations.into_iter().map(Ok).collect(),
            Ok(Err(failure)) => vec![Err(failure); n],
            Err(_) => vec![Err(Failure::Trap("the batch handler panicked".into())); n],
        };
        for (reply, answer) in replies.into_iter().zip(answers) {
            // A message whose task is gone (the shutdown grace ended) has been put back already.
            let _ = reply.send(answer);
        }
    }
}
