//! An OTLP/HTTP trace receiver on loopback, as a collector would run it: it takes
//! `POST /v1/traces` in protobuf and answers 200. It keeps each export as it came and decodes
//! them only when asked, with the OpenTelemetry project's own message types, so that a
//! benchmark's figures hold the host's work and not the receiver's.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;

/// One span as received.
#[derive(Clone, Debug)]
pub struct Span {
    /// Its name.
    pub name: String,
    /// Its kind, as OTLP numbers it (1 internal, 5 consumer).
    pub kind: i32,
    /// Trace id, hex.
    pub trace_id: String,
    /// Span id, hex.
    pub span_id: String,
    /// Parent span id, hex; empty for a root.
    pub parent_span_id: String,
    /// Its attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// Status code (0 unset, 1 ok, 2 error).
    pub status_code: i32,
    /// Status message.
    pub status_message: String,
    /// The `service.name` of the resource that sent it.
    pub service: String,
}

impl Span {
    /// An attribute's value, if set.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attributes.get(name).map(String::as_str)
    }
}

/// The receiver: its address, and the exports it took.
#[derive(Debug)]
pub struct Receiver {
    addr: SocketAddr,
    exports: Arc<Mutex<Vec<Bytes>>>,
}

impl Receiver {
    /// Starts a receiver on a free loopback port, on the current tokio runtime.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the OTLP receiver");
        let addr = listener.local_addr().expect("its address");
        let exports = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&exports);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = Arc::clone(&kept);
                let service = hyper::service::service_fn(move |req| take(req, Arc::clone(&kept)));
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        Receiver { addr, exports }
    }

    /// The base URL to give as `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bytes of every export received so far.
    pub fn bytes(&self) -> usize {
        self.exports
            .lock()
            .expect("exports")
            .iter()
            .map(Bytes::len)
            .sum()
    }

    /// Every span received so far, decoded.
    pub fn spans(&self) -> Vec<Span> {
        let exports = self.exports.lock().expect("exports").clone();
        exports.into_iter().flat_map(decode).collect()
    }
}

async fn take(
    req: Request<Incoming>,
    kept: Arc<Mutex<Vec<Bytes>>>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let path_ok = req.uri().path() == "/v1/traces";
    let protobuf = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v == "application/x-protobuf");
    let body = req.into_body().collect().await?.to_bytes();
    let status = if path_ok && protobuf {
        kept.lock().expect("exports").push(body);
        hyper::StatusCode::OK
    } else {
        hyper::StatusCode::NOT_FOUND
    };
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    Ok(response)
}

/// The spans of one export.
fn decode(export: Bytes) -> Vec<Span> {
    let request = ExportTraceServiceRequest::decode(export).expect("an OTLP trace export");
    let mut spans = Vec::new();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(text_of)
            .unwrap_or_default();
        for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
            let status = span.status.unwrap_or_default();
            spans.push(Span {
                name: span.name,
                kind: span.kind,
                trace_id: hex::encode(span.trace_id),
                span_id: hex::encode(span.span_id),
                parent_span_id: hex::encode(span.parent_span_id),
                attributes: span
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), text_of(kv)))
                    .collect(),
                status_code: status.code,
                status_message: status.message,
                service: service.clone(),
            });
        }
    }
    spans
}

fn text_of(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v: &AnyValue| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}
