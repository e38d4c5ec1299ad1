//! Per-message guest state: the imports a handler may call, and nothing else.
//!
//! Each message gets a fresh store holding this state. WASI is present because components
//! built by standard toolchains import it (clocks, random, stdio), but with no preopened
//! directories, no environment, no arguments, no sockets and no inherited stdio. Stderr is kept
//! in a small buffer so a panic message can be reported with the trap ([`GuestStderr`]).
//! `wasi:http` is linked for every plugin, and every request goes through the plugin's
//! [`OutboundHttp`] rules: with no grant in its manifest, each one is denied.

use std::sync::Arc;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::batch_items::{BatchItems, Current, ItemCtx, ItemEffects, NOT_SELECTED};
use super::bindings::batch::qhost::handler::batch_item;
use super::bindings::qhost::handler::{config, log, outbox, result_value, types};
use super::convert;
use super::http::{Call, HttpPolicy, OutboundHttp};
use super::outbox::{OutboxPolicy, Sender};
use super::settings::Settings;
use super::stderr::GuestStderr;
use super::world::World;
use crate::kv::KvPolicy;
use crate::kv::run::RunState;
use qhost_message::Outgoing;

/// Stderr kept per message for trap reports.
const STDERR_CAPACITY: usize = 8 * 1024;
/// Longest log line kept from a guest.
const MAX_LOG_LINE: usize = 4096;
/// Longest result value a guest may set: what a caller waiting on a task's result reads back
/// from Redis, and what the completed record keeps until it is written.
pub(crate) const MAX_RESULT_BYTES: usize = 512 * 1024;

/// Who is running, for log lines.
#[derive(Clone, Debug)]
pub struct CallContext {
    /// Plugin name.
    pub plugin: Arc<str>,
    /// Plugin version.
    pub version: Arc<str>,
    /// Message id.
    pub message_id: String,
    /// Source queue.
    pub queue: String,
    /// The message's idempotency key, which outbox keys derive from.
    pub key: String,
    /// The lease's fencing token.
    pub fencing_token: u64,
    /// When the handler's time is up.
    pub deadline: tokio::time::Instant,
}

impl CallContext {
    fn http_call(&self) -> Call {
        Call {
            key: self.key.clone(),
            fencing_token: self.fencing_token,
            deadline: self.deadline,
        }
    }
}

/// What every instance of a plugin is granted, shared by each: its settings, its outbox, HTTP
/// and state policies, its memory limit, and the world it runs in (a test's; none on a host).
#[derive(Clone)]
pub struct Grants {
    pub config: Arc<Settings>,
    pub outbox: Arc<OutboxPolicy>,
    pub http: Arc<HttpPolicy>,
    pub kv: Arc<KvPolicy>,
    pub memory_bytes: u64,
    pub world: Option<Arc<World>>,
}

impl std::fmt::Debug for Grants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grants").finish_non_exhaustive()
    }
}

/// The store data for one invocation.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    stderr: GuestStderr,
    limiter: MemoryLimiter,
    config: Arc<Settings>,
    outbox_policy: Arc<OutboxPolicy>,
    http_ctx: WasiHttpCtx,
    http: OutboundHttp,
    ctx: CallContext,
    /// What the guest asked to send, stamped and checked.
    pub outbox: Vec<Outgoing>,
    /// The run's result value (JSON), if the guest set one.
    pub result: Option<String>,
    /// What the run read and wrote of its buckets.
    kv: RunState,
    /// The world it runs in, outside a host (`qhost test`, `qhost replay`).
    world: Option<Arc<World>>,
    /// A batch call's messages, whose effects are kept apart (`batch_items`).
    batch: Option<BatchItems>,
}

impl HostState {
    /// Fresh state for a call in `ctx`, with what `grants` gives and no ambient authority.
    pub fn new(ctx: CallContext, grants: &Grants) -> Self {
        let Grants {
            config,
            outbox: outbox_policy,
            http,
            kv,
            memory_bytes,
            world,
        } = grants.clone();
        let stderr = GuestStderr::new(STDERR_CAPACITY);
        let mut wasi = WasiCtx::builder();
        wasi.stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(clock) = world.as_ref().and_then(|w| w.clock()) {
            wasi.wall_clock(clock.clone())
                .monotonic_clock(clock.clone());
        }
        let wasi = wasi.build();
        HostState {
            wasi,
            table: ResourceTable::new(),
            stderr,
            limiter: MemoryLimiter::new(memory_bytes),
            config,
            outbox_policy,
            http_ctx: WasiHttpCtx::new(),
            http: OutboundHttp::new(http, ctx.http_call()),
            ctx,
            outbox: Vec::new(),
            result: None,
            kv: RunState::new(kv),
            world,
            batch: None,
        }
    }

    /// Starts a batch call of `items` on this state (fresh or just begun): no message
    /// selected, HTTP requests keyed by the whole batch until one is.
    pub fn begin_batch(&mut self, items: Vec<ItemCtx>) {
        let batch = BatchItems::new(items);
        self.ctx.message_id = String::new();
        self.ctx.key = batch.call_key();
        self.ctx.fencing_token = batch.call_token();
        self.http.begin(self.ctx.http_call());
        self.batch = Some(batch);
    }

    /// Selects message `index` of a batch call: the effects that follow are its.
    fn select_item(&mut self, index: u32) -> Result<(), String> {
        let Some(batch) = self.batch.as_mut() else {
            return Err("this call handles one message; there is nothing to select".into());
        };
        let mut made = self.http.made();
        let current = Current {
            outbox: &mut self.outbox,
            result: &mut self.result,
            kv: &mut self.kv,
            http_made: &mut made,
        };
        let item = batch.select(index, current)?;
        self.ctx.message_id = item.message_id.clone();
        self.ctx.key = item.key.clone();
        self.ctx.fencing_token = item.fencing_token;
        self.http.switch(self.ctx.http_call(), made);
        Ok(())
    }

    /// Ends a batch call: each message's effects, in order (`None`: not a batch call).
    pub fn finish_batch(&mut self) -> Option<Vec<ItemEffects>> {
        let batch = self.batch.take()?;
        let mut made = 0;
        let current = Current {
            outbox: &mut self.outbox,
            result: &mut self.result,
            kv: &mut self.kv,
            http_made: &mut made,
        };
        Some(batch.finish(current))
    }

    /// Refuses an effect that must belong to a message when a batch call has none selected.
    pub fn check_selected(&self) -> Result<(), String> {
        match &self.batch {
            Some(batch) if !batch.has_selection() => Err(NOT_SELECTED.to_string()),
            _ => Ok(()),
        }
    }

    /// Starts a new message on a reused instance: its context, an empty outbox, no result
    /// value and an empty stderr.
    pub fn begin(&mut self, ctx: CallContext) {
        self.http.begin(ctx.http_call());
        self.ctx = ctx;
        self.outbox.clear();
        self.result = None;
        self.kv.reset();
        self.stderr.clear();
        self.batch = None;
    }

    /// The run's view of its buckets.
    pub fn kv(&mut self) -> &mut RunState {
        &mut self.kv
    }

    /// The resources the guest holds.
    pub fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// The resource limiter to install on the store.
    pub fn limiter(&mut self) -> &mut MemoryLimiter {
        &mut self.limiter
    }

    /// Whether the guest hit its memory limit.
    pub fn memory_limit_hit(&self) -> bool {
        self.limiter.hit
    }

    /// What the guest wrote to stderr for this message, trimmed (and marked if cut).
    pub fn stderr_text(&self) -> String {
        self.stderr.text()
    }
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http_ctx,
            table: &mut self.table,
            hooks: &mut self.http,
        }
    }
}

impl types::Host for HostState {}

impl log::Host for HostState {
    fn write(&mut self, level: log::Level, message: String) {
        let mut message = message;
        if message.len() > MAX_LOG_LINE {
            let cut = (0..=MAX_LOG_LINE)
                .rev()
                .find(|i| message.is_char_boundary(*i));
            message.truncate(cut.unwrap_or(0));
        }
        // In text, the spans around this call show what they carry, when the filter enables
        // them: the invoke span (INFO) the plugin and version, inside the delivery span (always
        // on) the queue and message id. The line carries what no enabled span shows; in JSON it
        // carries all four at the top level, where log pipelines look.
        // In a world (a test, a replay) the line is the world's: kept for the run's report,
        // not logged by the host.
        if let Some(world) = &self.world {
            return world.log(level_name(level), &message);
        }
        let innermost = tracing::Span::current().metadata().map(|m| m.name());
        let c = &self.ctx;
        if !crate::logs_json() {
            match innermost {
                Some("invoke") => return log_plain(level, &message),
                Some("delivery") => return log_versioned(level, &c.plugin, &c.version, &message),
                _ => {}
            }
        }
        // A batch call logs before it selects a message: then no message id, not an empty one.
        let id = Some(c.message_id.as_str()).filter(|id| !id.is_empty());
        let (plugin, version, queue) = (&*c.plugin, &*c.version, &c.queue);
        match level {
            log::Level::Trace => {
                tracing::trace!(target: "qhost::plugin", plugin, version, message_id = id, queue, "{message}")
            }
            log::Level::Debug => {
                tracing::debug!(target: "qhost::plugin", plugin, version, message_id = id, queue, "{message}")
            }
            log::Level::Info => {
                tracing::info!(target: "qhost::plugin", plugin, version, message_id = id, queue, "{message}")
            }
            log::Level::Warn => {
                tracing::warn!(target: "qhost::plugin", plugin, version, message_id = id, queue, "{message}")
            }
            log::Level::Error => {
                tracing::error!(target: "qhost::plugin", plugin, version, message_id = id, queue, "{message}")
            }
        }
    }
}

/// The level's name, as a test matches it.
fn level_name(level: log::Level) -> &'static str {
    match level {
        log::Level::Trace => "trace",
        log::Level::Debug => "debug",
        log::Level::Info => "info",
        log::Level::Warn => "warn",
        log::Level::Error => "error",
    }
}

/// A handler's log line with its plugin and version (the delivery span shows the rest).
fn log_versioned(level: log::Level, plugin: &str, version: &str, message: &str) {
    match level {
        log::Level::Trace => tracing::trace!(target: "qhost::plugin", plugin, version, "{message}"),
        log::Level::Debug => tracing::debug!(target: "qhost::plugin", plugin, version, "{message}"),
        log::Level::Info => tracing::info!(target: "qhost::plugin", plugin, version, "{message}"),
        log::Level::Warn => tracing::warn!(target: "qhost::plugin", plugin, version, "{message}"),
        log::Level::Error => tracing::error!(target: "qhost::plugin", plugin, version, "{message}"),
    }
}

/// A handler's log line with no fields of its own.
fn log_plain(level: log::Level, message: &str) {
    match level {
        log::Level::Trace => tracing::trace!(target: "qhost::plugin", "{message}"),
        log::Level::Debug => tracing::debug!(target: "qhost::plugin", "{message}"),
        log::Level::Info => tracing::info!(target: "qhost::plugin", "{message}"),
        log::Level::Warn => tracing::warn!(target: "qhost::plugin", "{message}"),
        log::Level::Error => tracing::error!(target: "qhost::plugin", "{message}"),
    }
}

impl config::Host for HostState {
    fn get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).map(str::to_string)
    }
}

impl batch_item::Host for HostState {
    fn select(&mut self, index: u32) -> Result<(), String> {
        self.select_item(index)
    }
}

impl outbox::Host for HostState {
    fn send(&mut self, msg: outbox::Outgoing) -> Result<(), String> {
        self.check_selected()?;
        let c = &self.ctx;
        let producer = format!("{}@{}", c.plugin, c.version);
        let sender = Sender {
            plugin: &c.plugin,
            producer: &producer,
            key: &c.key,
        };
        let msg = convert::outgoing_from_guest(msg);
        let admitted = self.outbox_policy.admit(&self.outbox, sender, msg)?;
        self.outbox.push(admitted);
        Ok(())
    }
}

impl result_value::Host for HostState {
    fn set(&mut self, json: String) -> Result<(), String> {
        self.check_selected()?;
        self.result = Some(checked_result(json)?);
        Ok(())
    }
}

/// A result value as the guest gave it, if it is JSON of an allowed size.
fn checked_result(json: String) -> Result<String, String> {
    if json.len() > MAX_RESULT_BYTES {
        return Err(format!(
            "the result value is {} bytes; at most {MAX_RESULT_BYTES} are kept",
            json.len()
        ));
    }
    match serde_json::from_str::<serde::de::IgnoredAny>(&json) {
        Ok(_) => Ok(json),
        Err(e) => Err(format!("the result value is not JSON: {e}")),
    }
}

/// Caps linear memory and records the attempt to pass the cap, so that the resulting trap can
/// be reported as a memory-limit hit rather than a generic trap.
#[derive(Debug)]
pub struct MemoryLimiter {
    max_bytes: u64,
    hit: bool,
}

impl MemoryLimiter {
    fn new(max_bytes: u64) -> Self {
        MemoryLimiter {
            max_bytes,
            hit: false,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.max_bytes {
            self.hit = true;
            wasmtime::bail!("memory limit of {} MiB reached", self.max_bytes >> 20);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_value_is_json_of_a_kept_size() {
        assert_eq!(
            checked_result(r#"{"sent": 2}"#.into()),
            Ok(r#"{"sent": 2}"#.into())
        );
        assert_eq!(checked_result("null".into()), Ok("null".into()));
        let not_json = checked_result("sent two".into()).unwrap_err();
        assert!(
            not_json.starts_with("the result value is not JSON: "),
            "{not_json}"
        );
        let big = format!("\"{}\"", "x".repeat(MAX_RESULT_BYTES));
        let too_big = checked_result(big).unwrap_err();
        assert!(too_big.contains("at most 524288 are kept"), "{too_big}");
    }
}
