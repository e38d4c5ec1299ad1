//! Host-side bindings for the `qhost:handler` worlds, generated once from `wit/`: `handler`
//! (one message per call) and, in [`batch`], `batch-handler` (many per call), which shares the
//! first's interfaces, so one set of host implementations serves both.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "handler",
    // `handle` is called with `call_async`, so a deadline can cancel it between epoch yields;
    // qhost's own imports never wait, and stay synchronous.
    exports: { default: async },
});

/// The batch handler world: `handle-batch` and the `batch-item` import.
pub(crate) mod batch {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "batch-handler",
        exports: { default: async },
        with: {
            "qhost:handler/types": super::qhost::handler::types,
            "qhost:handler/log": super::qhost::handler::log,
            "qhost:handler/config": super::qhost::handler::config,
            "qhost:handler/outbox": super::qhost::handler::outbox,
            "qhost:handler/result-value": super::qhost::handler::result_value,
        },
    });
}

pub(crate) use self::qhost::handler::types::{Attribute, AttributeValue};

/// The version of the `qhost:handler` package this host serves.
pub const WIT_VERSION: &str = "0.1.2";

#[cfg(test)]
mod tests {
    #[test]
    fn the_served_version_is_the_wit_files() {
        let wit = include_str!("../../../wit/handler.wit");
        let package = format!("package qhost:handler@{};", super::WIT_VERSION);
        assert!(
            wit.contains(&package),
            "wit/handler.wit does not say {package}"
        );
        assert_eq!(
            crate::WIT_PACKAGE,
            format!("qhost:handler@{}", super::WIT_VERSION)
        );
        // JavaScript names the version in each import; `qhost new --lang js` writes this file.
        let js = include_str!("../../../host/templates/js/app.js");
        let import = format!("\"qhost:handler/log@{}\"", super::WIT_VERSION);
        assert!(js.contains(&import), "templates/js/app.js imports {import}");
    }
}
