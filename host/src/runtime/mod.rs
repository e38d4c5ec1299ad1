//! The WebAssembly runtime: engine, bindings, per-message state, loading, the compiled-code
//! cache, the registry and hot reload.

pub mod bindings;
pub mod cache;
mod convert;
pub mod engine;
pub mod inspect;
pub mod loader;
pub mod manifest;
pub mod registry;
pub mod reload;
pub mod state;
pub mod status;
pub mod wasm;
pub mod watch;
