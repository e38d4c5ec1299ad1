//! The WebAssembly runtime: engine and instance pool, bindings, per-message state (with what the
//! outbox accepts and the guest's stderr), loading (settings and the secrets they name), the
//! compiled-code cache, the idle-instance budget, per-plugin costs, outbound HTTP by grant, the
//! registry and hot reload.

pub(crate) mod bindings;
pub(crate) mod cache;
mod convert;
pub mod costs;
pub mod engine;
mod guest_error;
pub(crate) mod http;
mod idle;
pub mod inspect;
pub mod loader;
pub mod manifest;
mod outbox;
mod pool;
pub mod registry;
pub mod reload;
pub mod secrets;
pub(crate) mod state;
pub mod status;
mod stderr;
pub(crate) mod wasm;
pub mod watch;

pub use cache::CompileCounters;
pub use costs::Costs;

/// The WIT package this host serves, as `qhost plugins check` and `qhost --version` name it.
pub const WIT_PACKAGE: &str = "qhost:handler@0.1.0";

/// The wasmtime release this host embeds (plugins are compiled by it).
pub const WASMTIME_VERSION: &str = wasmtime_environ::VERSION;
