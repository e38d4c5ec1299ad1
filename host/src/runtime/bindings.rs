//! Host-side bindings for the `qhost:handler` world, generated once from `wit/`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "handler",
});

pub use self::qhost::handler::types::{Attribute, AttributeValue};
