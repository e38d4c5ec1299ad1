//! The WebAssembly runtime: engine, bindings, per-message state, loading and the registry.

pub mod bindings;
mod convert;
pub mod engine;
pub mod inspect;
pub mod loader;
pub mod manifest;
pub mod registry;
pub mod state;
pub mod wasm;
