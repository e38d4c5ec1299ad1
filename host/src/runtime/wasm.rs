//! Invoking a WebAssembly plugin: a fresh instance per message, with a deadline and a cap.
//!
//! A fresh store per message means no state leaks from one message to the next, and a guest
//! that traps takes nothing down with it. `HandlerPre` has done the import resolution and type
//! checking once, at load, so instantiation from the pool is cheap.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::{Engine, Store, Trap};

use super::bindings::HandlerPre;
use super::convert;
use super::engine::EPOCH_TICK;
use super::state::{CallContext, HostState};
use crate::handler::{Failure, HandlerMessage, Invocation, Invoke};

/// Runs one component's `handle`.
pub struct WasmInvoker {
    engine: Engine,
    pre: HandlerPre<HostState>,
    plugin: Arc<str>,
    version: Arc<str>,
    config: Arc<BTreeMap<String, String>>,
    memory_bytes: u64,
    timeout: Duration,
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
    /// An invoker for a checked component.
    pub fn new(
        engine: Engine,
        pre: HandlerPre<HostState>,
        plugin: &str,
        version: &str,
        config: BTreeMap<String, String>,
        memory_mib: u64,
        timeout: Duration,
    ) -> Self {
        WasmInvoker {
            engine,
            pre,
            plugin: plugin.into(),
            version: version.into(),
            config: Arc::new(config),
            memory_bytes: memory_mib << 20,
            timeout,
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
        };
        let guest_message = convert::message_to_guest(msg);
        let state = HostState::new(ctx, Arc::clone(&self.config), self.memory_bytes);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| s.limiter());
        store.set_epoch_deadline(self.deadline_ticks());
        let handler = match self.pre.instantiate(&mut store) {
            Ok(h) => h,
            Err(e) if store.data().memory_limit_hit() => return Err(self.classify(e, store.data())),
            Err(e) => return Err(Failure::Instantiate(format!("{e:#}"))),
        };
        match handler.call_handle(&mut store, &guest_message) {
            Ok(outcome) => Ok(Invocation {
                outcome: convert::outcome_from_guest(outcome),
                outbox: std::mem::take(&mut store.data_mut().outbox),
            }),
            Err(e) => Err(self.classify(e, store.data())),
        }
    }
}
