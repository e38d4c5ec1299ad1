//! How one WebAssembly call runs: engine and instance pool, bindings, the component's shape (a
//! handler or a batch handler, `pre`), per-message state (with what the outbox accepts, the
//! settings the guest reads, the guest's stderr, and a batch call's messages' effects kept
//! apart, `batch_items`), the compiled-code cache with the compiled functions kept under it
//! (`functions`), the idle-instance budget, per-plugin costs and outbound HTTP by grant. What
//! is served, and loaded from where, is the plugin module's business; nothing here imports it.
mod batch_items;
pub(crate) mod bindings;
pub(crate) mod cache;
mod convert;
pub(crate) mod costs;
pub(crate) mod engine;
mod functions;
mod guest_error;
pub(crate) mod http;
mod idle;
mod kv;
mod outbox;
mod pool;
pub(crate) mod pre;
pub(crate) mod settings;
pub(crate) mod state;
mod stderr;
pub(crate) mod wasm;
pub(crate) mod world;

pub(crate) use costs::Costs;
pub(crate) use outbox::OutboxGrant;

/// The most memory a plugin may ask for; the engine's instance pool is sized for it.
pub(crate) const MAX_MEMORY_MIB: u64 = 4096;

/// The WIT package this host serves, as `qhost plugins check` and `qhost --version` name it.
pub const WIT_PACKAGE: &str = "qhost:handler@0.1.2";

/// The wasmtime release this host embeds (plugins are compiled by it).
pub const WASMTIME_VERSION: &str = wasmtime_environ::VERSION;
