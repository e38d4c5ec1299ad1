//! What the host serves: a [`Plugin`] (a named, versioned build with its policy and the code to
//! run), and how plugins get there and are kept current: manifests and the secrets they name,
//! loading a file (the one place that reaches into [`crate::runtime`]), the registry of what
//! serves, hot reload from the plugins directory, and the status the CLI reads.
//!
//! The arrows run one way: `plugin` uses `runtime` to build an invoker; `runtime` knows nothing
//! of manifests, registries or files.

pub(crate) mod canary;
pub(crate) mod inspect;
pub(crate) mod kept;
pub(crate) mod loader;
pub(crate) mod manifest;
pub(crate) mod registry;
pub(crate) mod reload;
pub(crate) mod secrets;
pub(crate) mod status;
pub(crate) mod watch;

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::handler::{Failure, HandlerMessage, Invocation, Invoke};
use crate::idempotency::StateReads;
use crate::kv::{KvCounts, StateAccess};
use crate::runtime::Costs;
use manifest::Manifest;

/// A loaded plugin: name, version, policy and the code to run.
#[derive(Clone)]
pub struct Plugin {
    /// The name messages are routed by (the file stem for `.wasm` plugins).
    pub name: String,
    /// A short content hash for wasm plugins; what the embedder says for native ones.
    pub version: String,
    /// Limits, idempotency policy and config.
    pub(crate) manifest: Manifest,
    invoker: Arc<dyn Invoke>,
    slots: Option<Arc<Semaphore>>,
    kv: Arc<KvCounts>,
    kv_access: Option<Arc<StateAccess>>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// The queues its manifest lets it send to, as written (`*` for every queue), its Celery
    /// queues after them: what `qhost check` compares with the queues a host consumes.
    pub fn outbox_queues(&self) -> Vec<&str> {
        let grant = &self.manifest.outbox;
        (grant.queues.iter().chain(&grant.celery))
            .map(String::as_str)
            .collect()
    }

    /// A plugin from any invoker.
    pub fn new(
        name: impl Into<String>,
        version: impl Into<String>,
        manifest: Manifest,
        invoker: Arc<dyn Invoke>,
    ) -> Self {
        let slots = manifest
            .limits
            .concurrency
            .map(|n| Arc::new(Semaphore::new(n as usize)));
        Plugin {
            name: name.into(),
            version: version.into(),
            manifest,
            invoker,
            slots,
            kv: Arc::default(),
            kv_access: None,
        }
    }

    /// Counts its runs' state in `counts` (the ones its wasm invoker keeps), read from
    /// `access` (its engine's).
    pub(crate) fn with_kv(mut self, counts: Arc<KvCounts>, access: Arc<StateAccess>) -> Self {
        self.kv = counts;
        self.kv_access = Some(access);
        self
    }

    /// Serves its state from `store` (a host built from parts binds its plugins' engines).
    pub(crate) fn bind_state(&self, store: Arc<dyn StateReads>, namespace: &str) {
        if let Some(access) = &self.kv_access {
            access.bind(store, namespace);
        }
    }

    /// What this version's runs did with state.
    pub(crate) fn kv_counts(&self) -> &Arc<KvCounts> {
        &self.kv
    }

    /// The plugin's concurrency limit, if its manifest sets one: a call holds a permit.
    pub(crate) fn slots(&self) -> Option<&Arc<Semaphore>> {
        self.slots.as_ref()
    }

    /// Takes over the permits of the version this one replaces (when the limit is the same),
    /// so calls finishing on the old version still count against the limit during a reload.
    pub(crate) fn share_slots_with(&mut self, old: &Plugin) {
        if self.manifest.limits.concurrency == old.manifest.limits.concurrency {
            self.slots = old.slots.clone();
        }
    }

    /// Handles one message.
    pub async fn invoke(&self, msg: HandlerMessage) -> Result<Invocation, Failure> {
        self.invoker.invoke(msg).await
    }

    /// Whether it handles batches (exports `handle-batch`).
    pub fn is_batch(&self) -> bool {
        self.invoker.is_batch()
    }

    /// Handles a batch: one invocation per message, in order (batch plugins only). An answer
    /// of another length is a failure of every message.
    pub async fn invoke_batch(
        &self,
        msgs: Vec<HandlerMessage>,
    ) -> Result<Vec<Invocation>, Failure> {
        let n = msgs.len();
        let invocations = self.invoker.invoke_batch(msgs).await?;
        crate::handler::outcome_count(n, invocations.len())?;
        Ok(invocations)
    }

    /// Time spent instantiating and calling this plugin so far (`None` for native handlers).
    pub fn costs(&self) -> Option<Costs> {
        self.invoker.costs()
    }

    /// This version's outbound HTTP requests by result.
    pub(crate) fn http_requests(&self) -> Vec<(&'static str, u64)> {
        self.invoker.http_requests()
    }
}
