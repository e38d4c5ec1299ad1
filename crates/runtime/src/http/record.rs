//! Written down, not sent: the HTTP requests a plugin makes in a [`World`] (`qhost test`,
//! `qhost replay`).
//!
//! A plugin loaded into a world keeps its manifest's grant (a request the grant refuses is
//! refused as a host would refuse it), and every request the grant admits is stamped as a
//! host would stamp it, then written down whole and answered by the world at once: for a
//! replay an empty `200 OK` carrying `qhost-replay: recorded`, so the handler goes on down its
//! success path and both versions meet the same answer; for a test the case's canned answer.
//! A request the world has no answer for fails in the guest as a refused connection.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use wasmtime_wasi_http::{Error, WasiBody};

use super::send::{Io, Sent};
use crate::world::{Exchange, World};

/// The header on every answer a world gives.
pub const REPLAY_HEADER: &str = "qhost-replay";

/// One request a plugin would have sent, as a replay compares it.
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

impl RecordedRequest {
    /// What a replay compares of `exchange`.
    pub fn of(exchange: &Exchange) -> Self {
        RecordedRequest {
            method: exchange.method.clone(),
            url: exchange.url.clone(),
            body_len: exchange.body.len(),
            body_sha256: qhost_message::digest::sha256_hex(&exchange.body),
        }
    }
}

/// Reads the request's body, writes the request down in `world`, and gives the world's answer.
pub(super) async fn answer(request: http::Request<WasiBody>, world: Arc<World>) -> Sent {
    let (head, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let headers = (head.headers.iter())
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_string(), value)
        })
        .collect();
    let exchange = Exchange {
        method: head.method.to_string(),
        url: head.uri.to_string(),
        headers,
        body: body.to_vec(),
        answered: false,
    };
    let Some(canned) = world.answer(exchange) else {
        return Err(Error::ConnectionRefused);
    };
    let full: WasiBody = Full::new(Bytes::from(canned.body))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = http::Response::builder()
        .status(canned.status)
        .header(REPLAY_HEADER, "recorded");
    for (name, value) in &canned.headers {
        response = response.header(name, value);
    }
    let response = response
        .body(full)
        .map_err(|e| Error::InternalError(Some(e.to_string())))?;
    let io: Io = Box::new(async { Ok::<(), Error>(()) });
    Ok((response, io))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_is_written_down_and_answered_without_leaving_the_process() {
        let world = World::replay();
        let body: WasiBody = Full::new(Bytes::from_static(b"abc"))
            .map_err(|never| match never {})
            .boxed_unsync();
        let request = http::Request::post("https://api.example.test/v1/send")
            .body(body)
            .unwrap();
        let (response, io) = answer(request, Arc::clone(&world)).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::OK);
        assert_eq!(response.headers()[REPLAY_HEADER], "recorded");
        assert!(Box::into_pin(io).await.is_ok());
        let met = world.take();
        let recorded: Vec<RecordedRequest> = met.http.iter().map(RecordedRequest::of).collect();
        assert_eq!(
            recorded,
            vec![RecordedRequest {
                method: "POST".into(),
                url: "https://api.example.test/v1/send".into(),
                body_len: 3,
                body_sha256: qhost_message::digest::sha256_hex(b"abc"),
            }]
        );
        assert!(met.http[0].answered);
    }
}
