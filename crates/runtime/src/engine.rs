//! The one wasmtime engine and linker every plugin shares.
//!
//! - Component model on, Cranelift at speed.
//! - Pooling allocator: instance slots are reserved once, so a fresh instance per message costs
//!   a few microseconds, and the pool is a hard cap on live instances (sizes and the reset
//!   between messages: `pool`).
//! - Epoch interruption: a background thread ticks the engine's epoch; each store gets a
//!   deadline in ticks, so a guest that loops is trapped at its timeout without fuel's cost.
//! - The linker has WASI p2 (with an empty context: see `state`), `wasi:http`'s outgoing
//!   handler (every request under the plugin's grant: see `http`) and the qhost imports.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::Duration;

use anyhow::Context as _;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel};

use super::bindings::Handler;
use super::bindings::batch::qhost::handler::batch_item;
use super::cache::{CompileCounters, CompiledCache};
use super::functions::FunctionCache;
use super::http::{self, TlsClient};
use super::idle::IdleBudget;
use super::pool;
use super::state::HostState;
use crate::kv::StateAccess;
use crate::secrets::SecretsGrant;
use qhost_message::rules::SendShape;
use qhost_store::StateReads;
use qhost_store_local::LocalStore;

/// How often the epoch advances; timeouts are enforced to within about this much.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Sizes for the engine's instance pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineSettings {
    /// Component instances alive at once (in-flight messages plus headroom for checks).
    pub max_instances: u32,
    /// The largest linear memory any plugin may have, in MiB.
    pub max_memory_mib: u64,
    /// How the host sends what an outbox holds, so each message is checked as it will go.
    pub send: SendShape,
    /// Instances all plugins together may keep idle for reuse (within the pool's spare).
    pub idle_instances: u32,
}

/// The shared engine and linker.
#[derive(Clone)]
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    cache: Option<CompiledCache>,
    /// Compiled functions, kept in the cache's directory once there is one.
    functions: Arc<FunctionCache>,
    counters: Arc<CompileCounters>,
    send: SendShape,
    idle: IdleBudget,
    max_memory_mib: u64,
    secrets: SecretsGrant,
    /// The TLS client for plugins' HTTPS requests: built when first needed (reading the
    /// platform's roots costs milliseconds a host without HTTP plugins need not spend), or at
    /// start when `[http] ca-file` names a CA, so a bad file stops the start.
    http_tls: Arc<OnceLock<TlsClient>>,
    /// Where plugins' state lives (see `crate::kv`).
    state: Arc<StateAccess>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

impl Runtime {
    /// Builds the engine, starts its epoch ticker, and prepares the linker.
    pub fn new(settings: EngineSettings) -> anyhow::Result<Self> {
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .cranelift_opt_level(OptLevel::Speed)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool::config(
                settings.max_instances,
                settings.max_memory_mib,
            )));
        // Stores nothing until `with_cache` names a checked directory.
        let functions = Arc::new(FunctionCache::default());
        config
            .enable_incremental_compilation(functions.clone())
            .map_err(anyhow::Error::from)?;
        let engine = Engine::new(&config)
            .map_err(anyhow::Error::from)
            .context("creating the wasmtime engine")?;
        start_epoch_ticker(&engine);
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(anyhow::Error::from)
            .context("linking WASI")?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(anyhow::Error::from)
            .context("linking WASI HTTP")?;
        Handler::add_to_linker::<_, HasSelf<_>>(&mut linker, |state: &mut HostState| state)
            .map_err(anyhow::Error::from)
            .context("linking the qhost imports")?;
        batch_item::add_to_linker::<_, HasSelf<_>>(&mut linker, |state: &mut HostState| state)
            .map_err(anyhow::Error::from)
            .context("linking the batch handler's imports")?;
        super::keyvalue::add_to_linker(&mut linker).context("linking WASI key-value")?;
        Ok(Runtime {
            engine,
            linker,
            cache: None,
            functions,
            counters: Arc::default(),
            send: settings.send,
            idle: IdleBudget::new(settings.idle_instances as usize),
            max_memory_mib: settings.max_memory_mib,
            secrets: SecretsGrant::default(),
            http_tls: Arc::default(),
            state: Arc::new(StateAccess::new(open_memory)),
        })
    }

    /// Lets plugins' `[config]` read the secrets `grant` names (none by default).
    pub fn with_secrets(mut self, grant: SecretsGrant) -> Self {
        self.secrets = grant;
        self
    }

    /// Trusts the CA certificates in `ca_file` (PEM) for plugins' HTTPS requests, besides the
    /// platform's roots.
    pub fn with_http_ca(self, ca_file: &Path) -> anyhow::Result<Self> {
        let client = http::tls_client(Some(ca_file))?;
        let _ = self.http_tls.set(client);
        Ok(self)
    }

    /// The TLS client plugins' HTTPS requests use.
    pub fn http_tls(&self) -> anyhow::Result<TlsClient> {
        if let Some(client) = self.http_tls.get() {
            return Ok(Arc::clone(client));
        }
        let client = http::tls_client(None)?;
        Ok(Arc::clone(self.http_tls.get_or_init(|| client)))
    }

    /// Serves plugins' state from `store` under `namespace` (until then, and in a command that
    /// never calls this, from an in-memory store).
    pub fn bind_state(&self, store: Arc<dyn StateReads>, namespace: &str) {
        self.state.bind(store, namespace);
    }

    /// Where plugins' state lives.
    pub fn state(&self) -> &Arc<StateAccess> {
        &self.state
    }

    /// What plugins may read from the host.
    pub fn secrets(&self) -> &SecretsGrant {
        &self.secrets
    }

    /// Keeps compiled components in `dir`, so unchanged plugins are not compiled again.
    /// Cranelift keeps the functions it compiles under it too (`functions.rs`), so a plugin
    /// rebuilt after an edit compiles only what changed.
    pub fn with_cache(mut self, dir: &Path) -> anyhow::Result<Self> {
        self.cache = CompiledCache::open(dir, &self.engine)?;
        if self.cache.is_some() {
            self.functions.keep_in(dir.join("functions"));
        }
        Ok(self)
    }

    /// How many components were compiled, and how many came from the cache.
    pub fn counters(&self) -> &CompileCounters {
        &self.counters
    }

    /// How the host sends what an outbox holds.
    pub fn send_shape(&self) -> SendShape {
        self.send
    }

    /// The idle-instance budget all plugins of this engine share.
    pub fn idle_budget(&self) -> IdleBudget {
        self.idle.clone()
    }

    /// The largest linear memory a plugin may have, in MiB.
    pub fn max_memory_mib(&self) -> u64 {
        self.max_memory_mib
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The linker with every import a plugin may use.
    pub fn linker(&self) -> &Linker<HostState> {
        &self.linker
    }

    /// Compiles a component, or loads it from the compiled-code cache (CPU-heavy on a miss:
    /// call it off the async threads).
    pub fn compile(&self, bytes: &[u8]) -> anyhow::Result<Component> {
        match &self.cache {
            Some(cache) => cache.load_or_compile(&self.engine, &self.counters, bytes),
            None => {
                let component =
                    Component::from_binary(&self.engine, bytes).map_err(anyhow::Error::from)?;
                self.counters.count_compiled();
                Ok(component)
            }
        }
    }
}

/// Advances the epoch every tick for as long as the engine lives.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    thread::Builder::new()
        .name("qhost-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                thread::sleep(EPOCH_TICK);
            }
        })
        .map(drop)
        .unwrap_or_else(|e| tracing::error!("cannot start the epoch ticker: {e}"));
}

/// An empty in-memory store, for the state of plugins that no host's store serves.
fn open_memory() -> anyhow::Result<Arc<dyn StateReads>> {
    Ok(Arc::new(LocalStore::open(None)?))
}
