//! Turning traces on: the standard `OTEL_*` variables decide, as for any OpenTelemetry SDK.
//!
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or `OTEL_EXPORTER_OTLP_ENDPOINT` (with
//!   `/v1/traces` appended) turns traces on; with neither, nothing is built.
//! - `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` keeps them off.
//! - `OTEL_EXPORTER_OTLP_PROTOCOL` may only be `http/protobuf`: qhost carries no gRPC stack.
//! - `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`, `OTEL_SERVICE_NAME`
//!   and `OTEL_RESOURCE_ATTRIBUTES` are read by the SDK itself.
//!
//! A setting qhost cannot honour is a start-up error naming the variable, never a silent
//! "no traces".

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use super::Tracer;
use super::client::OnRuntime;

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The path OTLP/HTTP receivers take traces on, below `OTEL_EXPORTER_OTLP_ENDPOINT`.
const TRACES_PATH: &str = "/v1/traces";
/// The protocol qhost exports with.
const PROTOBUF: &str = "http/protobuf";

/// Why traces could not be turned on as configured.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A variable names something qhost does not export.
    #[error("{var} is `{value}`: {why}")]
    Setting {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What it may be instead.
        why: &'static str,
    },
    /// The exporter could not be built.
    #[error("the OTLP trace exporter: {0}")]
    Exporter(String),
}

/// The trace exporter, while traces are on. [`Traces::shutdown`] sends what is still queued.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
    endpoint: String,
}

impl Traces {
    /// Traces as the environment configures them: `None` when off. Call within the tokio
    /// runtime the host runs on (exports run on it).
    pub fn from_env() -> Result<Option<Traces>, TraceError> {
        match endpoint(|name| std::env::var(name).ok())? {
            Some(endpoint) => Self::exporting_to(endpoint).map(Some),
            None => Ok(None),
        }
    }

    /// Traces exported to `endpoint`, the full URL of an OTLP/HTTP traces receiver
    /// (`…/v1/traces`). Call within the tokio runtime the host runs on.
    pub fn exporting_to(endpoint: String) -> Result<Traces, TraceError> {
        let client = OnRuntime::new(tokio::runtime::Handle::current(), EXPORT_TIMEOUT)
            .map_err(|e| TraceError::Exporter(format!("loading the platform's CA roots: {e}")))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TraceError::Exporter(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        Ok(Traces { provider, endpoint })
    }

    /// The tracer for a host whose spans go to this exporter.
    pub fn tracer(&self) -> Tracer {
        let scope = opentelemetry::InstrumentationScope::builder("qhost")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer_with_scope(&self.provider, scope);
        Tracer(std::sync::Arc::new(tracer))
    }

    /// Where spans go.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Exports the spans still queued, then stops the exporter. Call before the runtime ends.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match flushed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "traces: the last spans were not exported"),
            Err(e) => tracing::warn!(error = %e, "traces: the exporter did not shut down"),
        }
    }
}

/// `service.name` is `qhost` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` names one;
/// `service.version` is qhost's.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    let builder = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named {
        builder.build()
    } else {
        builder.with_service_name("qhost").build()
    }
}

/// The traces endpoint the variables `var` reads name, `None` when traces are off.
fn endpoint(var: impl Fn(&str) -> Option<String>) -> Result<Option<String>, TraceError> {
    let set = |name: &str| {
        var(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match set("OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(TraceError::Setting {
                var: "OTEL_TRACES_EXPORTER",
                value: other.to_string(),
                why: "qhost exports `otlp`, or `none` to turn traces off",
            });
        }
    }
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(value) = set(name).filter(|v| v != PROTOBUF) {
            return Err(TraceError::Setting {
                var: name,
                value,
                why: "qhost exports OTLP over HTTP as protobuf: set `http/protobuf` or leave it unset",
            });
        }
    }
    let (name, url) = if let Some(url) = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)
    } else if let Some(base) = set("OTEL_EXPORTER_OTLP_ENDPOINT") {
        let url = format!("{}{TRACES_PATH}", base.trim_end_matches('/'));
        ("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    } else {
        return Ok(None);
    };
    let parsed = url.parse::<hyper::Uri>().ok();
    let scheme_ok = parsed
        .as_ref()
        .is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    if !scheme_ok {
        return Err(TraceError::Setting {
            var: name,
            value: set(name).unwrap_or_default(),
            why: "it must be an http:// or https:// URL, such as http://127.0.0.1:4318",
        });
    }
    Ok(Some(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Option<String>, TraceError> {
        endpoint(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn traces_are_off_without_an_endpoint() {
        assert_eq!(with(&[]).unwrap(), None);
        assert_eq!(with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).unwrap(), None);
    }

    #[test]
    fn the_base_endpoint_gets_the_traces_path_and_the_traces_one_is_used_as_is() {
        let base = with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]);
        assert_eq!(
            base.unwrap().as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        let own = with(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://otel.example/in",
            ),
        ]);
        assert_eq!(own.unwrap().as_deref(), Some("https://otel.example/in"));
    }

    #[test]
    fn disabled_sdk_or_exporter_none_turns_traces_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(
            with(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]).unwrap(),
            None
        );
        assert_eq!(
            with(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]).unwrap(),
            None
        );
    }

    #[test]
    fn what_qhost_cannot_export_is_an_error_naming_the_variable() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317");
        let grpc = with(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap_err();
        assert!(
            grpc.to_string()
                .starts_with("OTEL_EXPORTER_OTLP_PROTOCOL is `grpc`: qhost exports OTLP over HTTP"),
            "{grpc}"
        );
        let zipkin = with(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")]).unwrap_err();
        assert!(
            zipkin
                .to_string()
                .contains("OTEL_TRACES_EXPORTER is `zipkin`"),
            "{zipkin}"
        );
        let bare = with(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "localhost:4318")]).unwrap_err();
        assert_eq!(
            bare.to_string(),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is `localhost:4318`: it must be an http:// or \
             https:// URL, such as http://127.0.0.1:4318"
        );
        let json = with(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        assert!(json.is_err());
        let protobuf = with(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]);
        assert!(protobuf.unwrap().is_some());
    }
}
