//! Recorded, not sent: the HTTP requests a plugin would make, for `qhost replay`.
//!
//! A replay runs recorded messages through two versions of a plugin to show what each would
//! do, and must touch no network. A plugin loaded for it keeps its manifest's grant (a request
//! the grant refuses is refused as a host would refuse it), and every request the grant admits
//! is stamped as a host would stamp it, then written down here (method, URL, the body's length
//! and sha256) and answered at once with an empty `200 OK` carrying `qhost-replay: recorded`,
//! so the handler goes on down its success path: both versions meet the same answer, and what
//! they do next (their outboxes, their outcome) can be compared.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use wasmtime_wasi_http::{Error, WasiBody};

use super::send::{Io, Sent};

/// The header on every recorded request's answer.
pub(crate) const REPLAY_HEADER: &str = "qhost-replay";

/// One request a plugin would have sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method (`GET`, `POST`, …).
    pub method: String,
    /// The whole URL.
    pub url: String,
    /// The body's length in bytes.
    pub body_len: usize,
    /// The body's sha256, hex.
    pub body_sha256: String,
}

/// Where a plugin loaded for replay writes its requests down; drained after each message.
#[derive(Debug, Default)]
pub(crate) struct HttpRecorder(Mutex<Vec<RecordedRequest>>);

impl HttpRecorder {
    /// A new, empty recorder, to share with the plugin that writes to it.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(HttpRecorder::default())
    }

    /// The requests recorded since the last call, in the order they were made.
    pub(crate) fn take(&self) -> Vec<RecordedRequest> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn push(&self, request: RecordedRequest) {
        (self.0.lock().unwrap_or_else(|e| e.into_inner())).push(request);
    }
}

/// Reads the request's body, writes the request down, and answers `200 OK` with no body.
pub(super) async fn answer(request: http::Request<WasiBody>, recorder: Arc<HttpRecorder>) -> Sent {
    let (head, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    recorder.push(RecordedRequest {
        method: head.method.to_string(),
        url: head.uri.to_string(),
        body_len: body.len(),
        body_sha256: crate::digest::sha256_hex(&body),
    });
    let empty: WasiBody = Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync();
    let response = http::Response::builder()
        .status(http::StatusCode::OK)
        .header(REPLAY_HEADER, "recorded")
        .body(empty)
        .map_err(|e| Error::InternalError(Some(e.to_string())))?;
    let io: Io = Box::new(async { Ok::<(), Error>(()) });
    Ok((response, io))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[tokio::test]
    async fn a_request_is_written_down_and_answered_without_leaving_the_process() {
        let recorder = HttpRecorder::new();
        let body: WasiBody = Full::new(Bytes::from_static(b"abc"))
            .map_err(|never| match never {})
            .boxed_unsync();
        let request = http::Request::post("https://api.example.test/v1/send")
            .body(body)
            .unwrap();
        let (response, io) = answer(request, Arc::clone(&recorder)).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::OK);
        assert_eq!(response.headers()[REPLAY_HEADER], "recorded");
        assert!(Box::into_pin(io).await.is_ok());
        assert_eq!(
            recorder.take(),
            vec![RecordedRequest {
                method: "POST".into(),
                url: "https://api.example.test/v1/send".into(),
                body_len: 3,
                body_sha256: crate::digest::sha256_hex(b"abc"),
            }]
        );
        assert!(recorder.take().is_empty(), "taking drains it");
    }
}
