//! How one WebAssembly call runs: engine and instance pool, bindings, the component's shape (a
//! handler or a batch handler, `pre`), per-message state (with what the outbox accepts, the
//! settings the guest reads, the guest's stderr, and a batch call's messages' effects kept
//! apart, `batch_items`), the compiled-code cache with the compiled functions kept under it
//! (`functions`), the idle-instance budget, per-plugin costs, and the capabilities a plugin is
//! granted: the outbox, outbound HTTP (`http`), state (`kv`, served to guests as
//! `wasi:keyvalue` by `keyvalue`) and secrets (`secrets`). `handler` is the invocation
//! contract the host's pipeline calls through.
//!
//! What is served, and loaded from where, is the host's plugin module's business: this crate
//! names no part of the host, only the message types, the store's contract (a run's state
//! commits), the embedded store (the in-memory state of a command with no store) and Celery's
//! task protocol (an outbox sends Celery tasks to the queues its grant says are Celery's).
mod batch_items;
mod bindings;
mod cache;
mod convert;
mod costs;
mod engine;
mod functions;
mod guest_error;
pub mod handler;
pub mod http;
mod idle;
mod keyvalue;
pub mod kv;
mod outbox;
mod pool;
mod pre;
mod secrets;
mod settings;
mod state;
mod stderr;
mod wasm;
pub mod world;

// What the host names: the engine it builds and loads components with, a loaded component's
// shape and sandbox, the grants a manifest gives, and the invocation contract, capabilities
// and canned world (modules of their own above, as they are groups of names).
pub use bindings::WIT_VERSION;
pub use costs::Costs;
pub use engine::{EngineSettings, Runtime};
pub use outbox::OutboxGrant;
pub use pre::Pre;
pub use secrets::SecretsGrant;
pub use settings::Settings;
pub use wasm::{Sandbox, WasmInvoker};

/// Whether the process logs JSON (set once by the host's logging set-up).
static LOGS_JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether log lines are JSON objects: there, a handler's line repeats its span's fields at the
/// top level, where log pipelines look for them; in text the span prefix already shows them.
pub fn logs_json() -> bool {
    LOGS_JSON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Says whether the process logs JSON (the host's logging set-up, once).
pub fn set_logs_json(json: bool) {
    LOGS_JSON.store(json, std::sync::atomic::Ordering::Relaxed);
}

/// The most memory a plugin may ask for; the engine's instance pool is sized for it.
pub const MAX_MEMORY_MIB: u64 = 4096;

/// The WIT package this host serves, as `qhost plugins check` and `qhost --version` name it.
pub const WIT_PACKAGE: &str = "qhost:handler@0.1.2";

/// The wasmtime release this host embeds (plugins are compiled by it).
pub const WASMTIME_VERSION: &str = wasmtime_environ::VERSION;
