//! Invoking a WebAssembly plugin: a fresh instance per message, with a deadline and a cap.
//!
//! The call is async (`instantiate_async`, `call_handle` through `call_async`, WASI p2 linked
//! async), and the guest yields to the executor at every epoch tick. `timeout-ms` is therefore a
//! wall-clock deadline for the whole call (instantiation, guest code and host calls alike,
//! such as a WASI sleep): when it passes, the call's future is dropped, which stops the guest at
//! its next yield and drops its instance. No thread is held for a guest that sleeps.
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
//!
//! A batch handler (`handle-batch`) is called the same way with many messages: one instance,
//! one deadline (`timeout-ms` is the whole call's, not each message's), and each message's
//! effects kept apart (`batch_items`), to be committed with its own completion.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::{Engine, Store, Trap, UpdateDeadline};

use super::batch_items::ItemCtx;
use super::convert;
use super::costs::{CostCounters, Costs};
use super::engine::{EPOCH_TICK, Runtime};
use super::guest_error::{for_the_log, guest_error};
use super::http::HttpGrant;
use super::http::{HttpCounts, HttpPolicy, key_header};
use super::idle::{IdleBudget, IdleSlot};
use super::outbox::{OutboxGrant, OutboxPolicy};
use super::pre::{Exports, Pre};
use super::settings::Settings;
use super::state::{CallContext, Grants, HostState};
use super::world::World;
use crate::handler::{Failure, HandlerMessage, Invocation, Invoke, one_of, outcome_count};
use crate::kv::{KvCounts, KvGrant, KvLimits, KvPolicy};

/// What a plugin's calls may do and use: the runtime's part of its manifest.
#[derive(Clone, Debug)]
pub struct Sandbox {
    /// Where its outbox may send, and how much.
    pub outbox: OutboxGrant,
    /// The origins it may call.
    pub http: HttpGrant,
    /// Whether it may call out at all (only then are the platform's roots read).
    pub calls_out: bool,
    /// The header the host puts its idempotency key in (`""`: none).
    pub idempotency_header: String,
    /// Requests one call may make.
    pub http_requests: u32,
    /// Bytes of one response it may read.
    pub http_response_bytes: u64,
    /// Its memory limit.
    pub memory_mib: u64,
    /// Its wall-clock deadline per call.
    pub timeout: Duration,
    /// Messages one instance may handle.
    pub reuse_instance: u32,
    /// For `qhost test` and `qhost replay`: the world its calls meet instead of the network
    /// and the real clock.
    pub world: Option<Arc<World>>,
    /// The buckets it may open.
    pub kv: KvGrant,
    /// How much one run may write to them.
    pub kv_limits: KvLimits,
    /// What its runs do with state, counted.
    pub kv_counts: Arc<KvCounts>,
}

/// Runs one component's `handle`, or its `handle-batch`.
pub struct WasmInvoker {
    engine: Engine,
    pre: Pre,
    plugin: Arc<str>,
    version: Arc<str>,
    grants: Grants,
    timeout: Duration,
    reuse: u32,
    idle: Mutex<Vec<(Warm, IdleSlot)>>,
    budget: IdleBudget,
    costs: CostCounters,
}

/// Idle instances one reusing plugin keeps at most; all plugins together keep no more than
/// the engine's [`IdleBudget`].
const MAX_IDLE: usize = 4;

/// An instance kept for its next message.
struct Warm {
    store: Store<HostState>,
    handler: Exports,
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
    /// An invoker for a checked component of `runtime`, within `sandbox`.
    pub fn new(
        pre: Pre,
        id: (&str, &str),
        sandbox: Sandbox,
        settings: Settings,
        runtime: &Runtime,
    ) -> anyhow::Result<Self> {
        let (plugin, version) = id;
        let plugin: Arc<str> = plugin.into();
        let http = HttpPolicy {
            plugin: Arc::clone(&plugin),
            grant: sandbox.http,
            key_header: key_header(&sandbox.idempotency_header).map_err(anyhow::Error::msg)?,
            max_requests: sandbox.http_requests,
            max_response_bytes: sandbox.http_response_bytes,
            // Reading the platform's roots is for plugins that may call out at all.
            tls: if sandbox.calls_out && sandbox.world.is_none() {
                Some(runtime.http_tls()?)
            } else {
                None
            },
            counts: Arc::new(HttpCounts::default()),
            world: sandbox.world.clone(),
        };
        let kv = Arc::new(KvPolicy {
            plugin: Arc::clone(&plugin),
            grant: sandbox.kv,
            limits: sandbox.kv_limits,
            counts: sandbox.kv_counts,
            access: Arc::clone(runtime.state()),
        });
        let grants = Grants {
            config: Arc::new(settings),
            outbox: Arc::new(OutboxPolicy {
                grant: sandbox.outbox,
                shape: runtime.send_shape(),
            }),
            http: Arc::new(http),
            kv,
            memory_bytes: sandbox.memory_mib << 20,
            world: sandbox.world,
        };
        Ok(WasmInvoker {
            engine: pre.engine().clone(),
            pre,
            plugin,
            version: version.into(),
            grants,
            timeout: sandbox.timeout,
            reuse: sandbox.reuse_instance.max(1),
            idle: Mutex::default(),
            budget: runtime.idle_budget(),
            costs: CostCounters::default(),
        })
    }

    /// Instantiates the component once, as a message would, and drops the instance: a
    /// component that compiles but cannot run is found at load, not at its first message.
    pub fn probe(&self) -> anyhow::Result<()> {
        let ctx = CallContext {
            plugin: Arc::clone(&self.plugin),
            version: Arc::clone(&self.version),
            message_id: "(load check)".into(),
            queue: String::new(),
            key: String::new(),
            fencing_token: 0,
            deadline: tokio::time::Instant::now() + self.timeout,
        };
        block_on(self.instantiate(ctx, false))
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

    /// Keeps an instance that may serve more messages, or drops it.
    fn keep(&self, warm: Warm) {
        if warm.used >= self.reuse {
            return self.drop_instance(warm);
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
            && let Some(slot) = self.budget.take()
        {
            return idle.push((warm, slot));
        }
        self.drop_instance(warm);
    }

    /// Drops an instance, which returns its slot to the pool and resets it there.
    fn drop_instance(&self, warm: Warm) {
        let started = Instant::now();
        drop(warm);
        self.costs.dropped(started);
    }

    /// A new instance for `ctx`; `for_call` is false for the check at load, which runs outside
    /// the executor.
    async fn instantiate(&self, ctx: CallContext, for_call: bool) -> Result<Warm, Failure> {
        let state = HostState::new(ctx, &self.grants);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| s.limiter());
        store.set_epoch_deadline(1);
        let virtual_time = for_call
            && self
                .grants
                .world
                .as_ref()
                .is_some_and(|w| w.clock().is_some());
        if virtual_time {
            // On a world's paused clock, time passes only when the executor is idle; a guest
            // that computes never leaves it idle, so each tick it computes moves the clock by a
            // tick, and its deadline comes as on a host.
            store.epoch_deadline_callback(|_| {
                Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(tokio::time::advance(EPOCH_TICK)),
                ))
            });
        } else {
            // Yield to the executor at every tick: the deadline is the caller's timer, not a
            // trap. Tokio's `yield_now` lets the runtime poll its timers and I/O before this
            // task runs again; a bare yield would put the task straight back, and with every
            // worker running guests that spin, timers (this call's deadline among them) would
            // fire hundreds of milliseconds late.
            store.epoch_deadline_callback(|_| {
                Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(tokio::task::yield_now()),
                ))
            });
        }
        let started = Instant::now();
        let instance = self.pre.instantiate(&mut store).await;
        self.costs.instantiated(started);
        match instance {
            Ok(handler) => Ok(Warm {
                store,
                handler,
                used: 0,
            }),
            Err(e) if store.data().memory_limit_hit() => Err(self.classify(e, store.data_mut())),
            Err(e) => Err(Failure::Instantiate(format!("{e:#}"))),
        }
    }

    fn classify(&self, error: wasmtime::Error, state: &mut HostState) -> Failure {
        if state.memory_limit_hit() {
            return Failure::MemoryLimit(self.grants.memory_bytes >> 20);
        }
        if let Some(reason) = state.kv().unavailable() {
            return Failure::StateUnavailable(reason.to_string());
        }
        // Timeouts never arrive here: the store yields at its epoch deadline instead of
        // trapping, and the call's own timer ends it (see `invoke`).
        let trap = match error.downcast_ref::<Trap>() {
            Some(trap) => trap.to_string(),
            None => format!("{error:#}"),
        };
        let stderr = state.stderr_text();
        if stderr.is_empty() {
            return Failure::Trap(trap);
        }
        // The whole of what the guest printed goes to the log; the reason (which dead letters
        // carry) is the guest's own error when its shape is known.
        let (plugin, version) = (&*self.plugin, &*self.version);
        let printed = for_the_log(&stderr);
        tracing::warn!(plugin, version, %trap, "the handler trapped; what it printed:\n{printed}");
        match guest_error(&stderr) {
            Some(error) => Failure::Trap(error),
            None => Failure::Trap(format!("{trap}; stderr: {stderr}")),
        }
    }
}

#[async_trait::async_trait]
impl Invoke for WasmInvoker {
    async fn invoke(&self, msg: HandlerMessage) -> Result<Invocation, Failure> {
        one_of(self.invoke_many(vec![msg]).await)
    }

    fn is_batch(&self) -> bool {
        self.pre.is_batch()
    }

    async fn invoke_batch(&self, msgs: Vec<HandlerMessage>) -> Result<Vec<Invocation>, Failure> {
        if !self.pre.is_batch() {
            return Err(Failure::Instantiate(
                "this plugin exports `handle`, one message per call".into(),
            ));
        }
        self.invoke_many(msgs).await
    }

    fn costs(&self) -> Option<Costs> {
        Some(self.costs.snapshot())
    }

    fn http_requests(&self) -> Vec<(&'static str, u64)> {
        self.grants.http.counts.snapshot()
    }
}

impl WasmInvoker {
    /// One call, under its deadline: the plugin's `timeout-ms`, or a message's lower limit.
    async fn invoke_many(&self, msgs: Vec<HandlerMessage>) -> Result<Vec<Invocation>, Failure> {
        // The deadline is checked first whenever the task wakes: once it has passed, the guest
        // is not given another slice. Its HTTP requests time out by it too.
        let limit = (msgs.iter().filter_map(|m| m.time_limit)).fold(self.timeout, Duration::min);
        let deadline = tokio::time::Instant::now() + limit;
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(deadline) => Err(Failure::Timeout(limit)),
            result = self.call(msgs, deadline) => result,
        }
    }

    /// One call, instantiation included, without its deadline.
    async fn call(
        &self,
        msgs: Vec<HandlerMessage>,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<Invocation>, Failure> {
        let first = msgs.first();
        let ctx = CallContext {
            plugin: Arc::clone(&self.plugin),
            version: Arc::clone(&self.version),
            message_id: first.map(|m| m.id.clone()).unwrap_or_default(),
            queue: first.map(|m| m.queue.clone()).unwrap_or_default(),
            key: first.map(|m| m.idempotency_key.clone()).unwrap_or_default(),
            fencing_token: first.map_or(0, |m| m.fencing_token),
            deadline,
        };
        let items = self.pre.is_batch().then(|| {
            (msgs.iter())
                .map(|m| ItemCtx {
                    message_id: m.id.clone(),
                    key: m.idempotency_key.clone(),
                    fencing_token: m.fencing_token,
                })
                .collect()
        });
        let guest_messages: Vec<_> = msgs.into_iter().map(convert::message_to_guest).collect();
        let mut warm = match self.take_idle() {
            Some(mut warm) => {
                warm.store.data_mut().begin(ctx);
                warm.store.set_epoch_deadline(1);
                warm
            }
            None => self.instantiate(ctx, true).await?,
        };
        if let Some(items) = items {
            warm.store.data_mut().begin_batch(items);
        }
        warm.used += 1;
        let started = Instant::now();
        let result = warm.handler.call(&mut warm.store, &guest_messages).await;
        self.costs.called(started);
        match result {
            Ok(outcomes) => {
                let invocations = self.invocations(warm.store.data_mut(), outcomes);
                if invocations.is_ok() {
                    self.keep(warm);
                } else {
                    self.drop_instance(warm);
                }
                invocations
            }
            // A failed instance is dropped, never reused.
            Err(e) => {
                let failure = self.classify(e, warm.store.data_mut());
                self.drop_instance(warm);
                Err(failure)
            }
        }
    }

    /// Each message's invocation: its outcome and the effects it made.
    fn invocations(
        &self,
        data: &mut HostState,
        outcomes: Vec<super::bindings::qhost::handler::types::Outcome>,
    ) -> Result<Vec<Invocation>, Failure> {
        let Some(effects) = data.finish_batch() else {
            let outcome = outcomes.into_iter().next().map(convert::outcome_from_guest);
            return Ok(vec![Invocation {
                outcome: outcome.ok_or_else(|| Failure::Trap("no outcome".into()))?,
                outbox: std::mem::take(&mut data.outbox),
                result: data.result.take(),
                state: data.kv().take(),
            }]);
        };
        outcome_count(effects.len(), outcomes.len())?;
        let invocations = outcomes.into_iter().zip(effects);
        Ok(invocations
            .map(|(outcome, effects)| Invocation {
                outcome: convert::outcome_from_guest(outcome),
                outbox: effects.outbox,
                result: effects.result,
                state: effects.state,
            })
            .collect())
    }
}

/// Runs an instantiation to completion on this thread, for the one check at load, which runs
/// outside the async executor (on its blocking pool, or in a command). The future only waits on
/// epoch yields, so polling it again at once is all it needs.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}
