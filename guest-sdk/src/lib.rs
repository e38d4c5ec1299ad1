//! Write qhost queue message handlers in Rust.
//!
//! A handler is a WebAssembly component that implements the `qhost:handler` world (see `wit/`
//! at the root of the qhost repository). This crate generates the bindings for that world once,
//! so a plugin holds only its own logic:
//!
//! ```ignore
//! use qhost_guest::{Handler, Message, Outcome};
//!
//! struct Hello;
//!
//! impl Handler for Hello {
//!     fn handle(msg: Message) -> Outcome {
//!         qhost_guest::log::info(&format!("got {} bytes", msg.body.len()));
//!         Outcome::Ack
//!     }
//! }
//!
//! qhost_guest::export!(Hello);
//! ```
//!
//! Build it with `cargo build --target wasm32-wasip2 --release` as a `cdylib` and drop the
//! `.wasm` into the host's plugins directory.
//!
//! The host, not the handler, suppresses duplicates: `handle` runs once per idempotency key
//! while the key is remembered. Follow-up messages go through [`outbox`] so that they are
//! sent only when the handler acks, and only once. Calls to an API go through [`http`], where
//! the host grants them, and carry an idempotency key the host makes for each. State that
//! outlives a message goes in [`state`] buckets, committed with the run.
#![deny(missing_docs)]

// Lets the generated code and the export macro name this crate the same way from inside and
// outside of it.
extern crate self as qhost_guest;

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

/// The raw bindings generated from the WIT world. Prefer the re-exports and helpers.
#[allow(missing_docs)]
#[allow(clippy::too_many_arguments)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "handler-state",
        // The keyvalue interfaces are generated here, like qhost's own (wasi:http comes from
        // the `wasip2` crate).
        with: {
            "wasi:keyvalue/store@0.2.0-draft": generate,
            "wasi:keyvalue/atomics@0.2.0-draft": generate,
            "wasi:keyvalue/batch@0.2.0-draft": generate,
        },
        pub_export_macro: true,
        export_macro_name: "__export_handler",
        default_bindings_module: "qhost_guest::bindings",
        runtime_path: "qhost_guest::__wit_bindgen::rt",
    });
}

/// The raw bindings of the batch handler world (`handle-batch`), sharing [`bindings`]'
/// interfaces. Prefer [`batch`] and [`export_batch!`].
#[allow(missing_docs)]
#[allow(clippy::too_many_arguments)]
pub mod batch_bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "batch-handler-state",
        with: {
            "qhost:handler/types@0.1.2": crate::bindings::qhost::handler::types,
            "qhost:handler/log@0.1.2": crate::bindings::qhost::handler::log,
            "qhost:handler/config@0.1.2": crate::bindings::qhost::handler::config,
            "qhost:handler/outbox@0.1.2": crate::bindings::qhost::handler::outbox,
            "qhost:handler/result-value@0.1.2": crate::bindings::qhost::handler::result_value,
            "wasi:keyvalue/store@0.2.0-draft": crate::bindings::wasi::keyvalue::store,
            "wasi:keyvalue/atomics@0.2.0-draft": crate::bindings::wasi::keyvalue::atomics,
            "wasi:keyvalue/batch@0.2.0-draft": crate::bindings::wasi::keyvalue::batch,
        },
        pub_export_macro: true,
        export_macro_name: "__export_batch_handler",
        default_bindings_module: "qhost_guest::batch_bindings",
        runtime_path: "qhost_guest::__wit_bindgen::rt",
    });
}

pub mod batch;
#[cfg(feature = "celery")]
pub mod celery;
pub mod config;
pub mod http;
pub mod log;
mod message;
pub mod outbox;
pub mod state;

/// Sets this run's result value, as JSON text (the last call wins). The host keeps it only if
/// the handler acks, committed with the run: a Celery caller's `AsyncResult.get()` returns it,
/// and the task's callbacks and chain get it as their first argument. Refused (not a trap):
/// text that is not JSON, or longer than 512 KiB. With the `celery` feature,
/// [`celery::set_result`] takes any serializable value.
pub fn set_result(json: &str) -> Result<(), String> {
    bindings::qhost::handler::result_value::set(json)
}

pub use bindings::Guest as Handler;
pub use bindings::qhost::handler::types::{Attribute, AttributeValue, Message, Outcome};

/// Export a type implementing [`Handler`] as this component's `handle` function.
#[macro_export]
macro_rules! export {
    ($handler:ident) => {
        $crate::bindings::__export_handler!($handler);
    };
}

/// Export a type implementing [`BatchHandler`] as this component's `handle-batch` function: a
/// batch handler, called with up to its manifest's `batch.max-messages` messages at once.
#[macro_export]
macro_rules! export_batch {
    ($handler:ident) => {
        $crate::batch_bindings::__export_batch_handler!($handler);
    };
}

pub use batch_bindings::Guest as BatchHandler;
