//! Invoking a WebAssembly plugin: a fresh instance per message, with a deadline and a cap.
//!
//! A fresh store per message means no state leaks from one message to the next, and a guest
//! that traps takes nothing down with it. `HandlerPre` has done the import resolution and type
//! checking once, at load, so instantiation from the pool is cheap for compiled guests (about
//! 0.2 ms for the Rust example).
//!
//! Interpreter guests (Python, JavaScript) start an interpreter per instance: 2 to 6 ms. A
//! plugin may opt in to reuse (`limits.reuse-instance = N`): an instance then handles up to N
//! messages, one at a time, before it is dropped. Each message still gets its own context,
//! outbox, deadline and memory cap, and an instance that fails in any way is never reused. What
//! is given up is isolation between messages of the same plugin: globals, caches and anything
//! else the guest keeps in memory carry over (its stderr capture does not: it is cleared for each
//! message). Off by default.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::{Engine, Store, Trap};

use super::bindings::{Handler, HandlerPre};
use super::convert;
use super::engine::{EPOCH_TICK, Runtime};
use super::idle::{IdleBudget, IdleSlot};
use super::manifest::Manifest;
use super::outbox::OutboxPolicy;
use super::state::{CallContext, HostState};
use crate::handler::{Failure, HandlerMessage, Invocation, Invoke};

/// Runs one component's `handle`.
pub(crate) struct WasmInvoker {
    engine: Engine,
    pre: HandlerPre<HostState>,
    plugin: Arc<str>,
    version: Arc<str>,
    config: Arc<BTreeMap<String, String>>,
    outbox: Arc<OutboxPolicy>,
    memory_bytes: u64,
    timeout: Duration,
    reuse: u32,
    idle: Mutex<Vec<(Warm, IdleSlot)>>,
    budget: IdleBudget,
}

/// Idle instances one reusing plugin keeps at most; all plugins together keep no more than
/// the engine's [`IdleBudget`].
const MAX_IDLE: usize = 4;

/// An instance kept for its next message.
struct Warm {
    store: Store<HostState>,
    handler: Handler,
    used: u32,
}

impl std::fmt::Debug for WasmInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmInvoker")
            .field("plugin", &self.plugin)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl WasmInvoker {
    /// An invoker for a checked component of `runtime`, under its manifest's limits and
    /// grants.
    pub(crate) fn new(
        pre: HandlerPre<HostState>,
        id: (&str, &str),
        manifest: &Manifest,
        runtime: &Runtime,
    ) -> Self {
        let (plugin, version) = id;
        WasmInvoker {
            engine: pre.engine().clone(),
            pre,
            plugin: plugin.into(),
            version: version.into(),
            config: Arc::new(manifest.config.clone()),
            outbox: Arc::new(OutboxPolicy {
                grant: manifest.outbox.clone(),
                shape: runtime.send_shape(),
            }),
            memory_bytes: manifest.limits.memory_mib << 20,
            timeout: manifest.timeout(),
            reuse: manifest.limits.reuse_instance.max(1),
            idle: Mutex::default(),
            budget: runtime.idle_budget(),
        }
    }

    /// Instantiates the component once, as a message would, and drops the instance: a
    /// component that compiles but cannot run is found at load, not at its first message.
    pub(crate) fn probe(&self) -> anyhow::Result<()> {
        let ctx = CallContext {
            plugin: Arc::clone(&self.plugin),
            version: Arc::clone(&self.version),
            message_id: "(load check)".into(),
            queue: String::new(),
            key: String::new(),
        };
        self.instantiate(ctx)
            .map(drop)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    fn take_idle(&self) -> Option<Warm> {
        if self.reuse <= 1 {
            return None;
        }
        let (warm, _slot) = self.idle.lock().ok()?.pop()?;
        Some(warm)
    }

    fn keep(&self, warm: Warm) {
        if warm.used >= self.reuse {
            return;
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
            && let Some(slot) = self.budget.take()
        {
            idle.push((warm, slot));
        }
    }

    fn instantiate(&self, ctx: CallContext) -> Result<Warm, Failure> {
        let config = Arc::clone(&self.config);
        let state = HostState::new(ctx, config, Arc::clone(&self.outbox), self.memory_bytes);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| s.limiter());
        store.set_epoch_deadline(self.deadline_ticks());
        match self.pre.instantiate(&mut store) {
            Ok(handler) => Ok(Warm {
                store,
                handler,
                used: 0,
            }),
            Err(e) if store.data().memory_limit_hit() => Err(self.classify(e, store.data())),
            Err(e) => Err(Failure::Instantiate(format!("{e:#}"))),
        }
    }

    fn deadline_ticks(&self) -> u64 {
        // One extra tick: the ticker's phase is arbitrary, so the first tick may come at once.
        self.timeout.as_millis().div_ceil(EPOCH_TICK.as_millis()) as u64 + 1
    }

    fn classify(&self, error: wasmtime::Error, state: &HostState) -> Failure {
        if state.memory_limit_hit() {
            return Failure::MemoryLimit(self.memory_bytes >> 20);
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => Failure::Timeout(self.timeout),
            Some(trap) => Failure::Trap(with_stderr(trap.to_string(), state)),
            None => Failure::Trap(with_stderr(format!("{error:#}"), state)),
        }
    }
}

/// Appends what the guest printed to stderr (a panic message, an exception) to a trap reason.
fn with_stderr(reason: String, state: &HostState) -> String {
    let stderr = state.stderr_text();
    if stderr.is_empty() {
        reason
    } else {
        format!("{reason}; stderr: {stderr}")
    }
}

impl Invoke for WasmInvoker {
    fn invoke(&self, msg: HandlerMessage) -> Result<Invocation, Failure> {
        let ctx = CallContext {
            plugin: Arc::clone(&self.plugin),
            version: Arc::clone(&self.version),
            message_id: msg.id.clone(),
            queue: msg.queue.clone(),
            key: msg.idempotency_key.clone(),
        };
        let guest_message = convert::message_to_guest(msg);
        let mut warm = match self.take_idle() {
            Some(mut warm) => {
                warm.store.data_mut().begin(ctx);
                warm.store.set_epoch_deadline(self.deadline_ticks());
                warm
            }
            None => self.instantiate(ctx)?,
        };
        warm.used += 1;
        match warm.handler.call_handle(&mut warm.store, &guest_message) {
            Ok(outcome) => {
                let invocation = Invocation {
                    outcome: convert::outcome_from_guest(outcome),
                    outbox: std::mem::take(&mut warm.store.data_mut().outbox),
                };
                self.keep(warm);
                Ok(invocation)
            }
            // A failed instance is dropped, never reused.
            Err(e) => Err(self.classify(e, warm.store.data())),
        }
    }
}
