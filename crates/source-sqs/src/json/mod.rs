//! A client of qhost's own for the calls on SQS's hot path (`ReceiveMessage`,
//! `DeleteMessageBatch`, `ChangeMessageVisibility[Batch]`, `SendMessageBatch`), speaking the
//! AWS JSON 1.0 protocol SQS speaks: a POST of a JSON body named by `x-amz-target`, signed
//! with SigV4, answered with JSON.
//!
//! Why not the SDK for these: `--bench sqs_client` measured the SDK's per-request machinery
//! (the runtime-components merge, interceptors, endpoint resolution per call, the retry
//! classifier chain) at about twice the CPU of the whole request here (docs/benchmarks.md).
//! The SDK still serves every other call, and this client takes from the SDK's configuration
//! what must stay the same: the credentials chain (cached and renewed here, `signer.rs`), the
//! region and the endpoint (resolved by the SDK's own rules, `endpoint.rs`). It keeps the
//! SDK's behaviour where qhost relies on it:
//!
//! - every attempt has a deadline (the connect, and the whole answer), and a call makes at
//!   most the attempts it is given, waiting the SDK's standard backoff between them;
//! - only what may pass is retried: the network, a deadline, a 5xx, throttling (`failure.rs`);
//! - errors carry SQS's codes as the SDK reads them, so the classification above this module
//!   (permanent refusals, expired receipts) is the same whichever client made the call.
//!
//! Left out, and why: the SDK's retry quota (qhost's pollers and batchers back off on their
//! own), clock-skew correction (SigV4 allows five minutes of skew; a host whose clock is off by
//! more is misconfigured, and SQS's refusal says so in the log),
//! and the MD5 digests in SQS's answers (aws-sdk-sqs at the pinned version does not check them
//! either; TLS already guards the bytes in transit).

mod endpoint;
mod failure;
pub(crate) mod shapes;
mod signer;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, HeaderValue};
use http_body_util::{BodyExt as _, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

pub(crate) use failure::CallError;
use signer::Signer;

/// Where calls go: the endpoint and the `host` header signed with it.
#[derive(Clone, Debug)]
struct Target {
    uri: http::Uri,
    host: HeaderValue,
}

/// The JSON client for one configuration.
#[derive(Debug)]
pub(crate) struct JsonClient {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// The endpoint, or why there is none (each call then fails with it).
    target: Result<Target, String>,
    /// Shared by a client's lanes, so credentials are cached once.
    signer: Arc<Signer>,
    /// How long opening a connection may take.
    connect: Duration,
}

impl JsonClient {
    /// A client for the SQS that `sdk` names, opening connections within `connect`.
    pub(crate) fn new(sdk: &aws_config::SdkConfig, connect: Duration) -> Self {
        let target = endpoint::resolve(sdk).and_then(|uri| {
            let host =
                (uri.authority()).ok_or_else(|| format!("the SQS endpoint `{uri}` has no host"))?;
            let host = HeaderValue::from_str(host.as_str()).map_err(|e| e.to_string())?;
            Ok(Target { uri, host })
        });
        let region = sdk.region().map(ToString::to_string).unwrap_or_default();
        JsonClient {
            http: http_client(connect),
            target,
            signer: Arc::new(Signer::new(sdk.credentials_provider(), region, "sqs")),
            connect,
        }
    }

    /// The same client with a connection pool of its own, for a lane: a pooled connection is
    /// driven by a task on the runtime that opened it.
    pub(crate) fn for_lane(&self) -> Self {
        JsonClient {
            http: http_client(self.connect),
            target: self.target.clone(),
            signer: Arc::clone(&self.signer),
            connect: self.connect,
        }
    }

    /// Calls `operation` with `input`: each attempt within `deadline`, at most `attempts` of
    /// them, another only after a failure that may pass.
    pub(crate) async fn call<I: serde::Serialize, O: serde::de::DeserializeOwned>(
        &self,
        operation: &'static str,
        input: &I,
        deadline: Duration,
        attempts: u32,
    ) -> Result<O, CallError> {
        let body = Bytes::from(
            serde_json::to_vec(input).map_err(|e| CallError::Setup(format!("{operation}: {e}")))?,
        );
        let mut attempt = 1;
        loop {
            let answered = tokio::time::timeout(deadline, self.attempt(operation, body.clone()))
                .await
                .unwrap_or(Err(CallError::TimedOut));
            match answered {
                Ok(answer) => {
                    return serde_json::from_slice(&answer)
                        .map_err(|e| CallError::Unreadable(format!("{operation}: {e}")));
                }
                Err(e) if e.is_retriable() && attempt < attempts => {
                    attempt += 1;
                    tokio::time::sleep(failure::backoff(attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt: the answer's body if SQS answered with success.
    async fn attempt(&self, operation: &'static str, body: Bytes) -> Result<Bytes, CallError> {
        let target = (self.target.as_ref()).map_err(|why| CallError::Setup(why.clone()))?;
        let identity = self.signer.identity().await?;
        let mut request = http::Request::post(target.uri.clone())
            .header(HOST, target.host.clone())
            .header(CONTENT_TYPE, "application/x-amz-json-1.0")
            .header("x-amz-target", format!("AmazonSQS.{operation}"))
            // Errors then carry the query API's codes (`x-amzn-query-error`), as the SDK asks.
            .header("x-amzn-query-mode", "true")
            .body(Full::new(body.clone()))
            .map_err(|e| CallError::Setup(format!("{operation}: {e}")))?;
        self.signer.sign(&identity, &mut request, &body)?;
        let response = self.http.request(request).await.map_err(dispatch_error)?;
        let (parts, body) = response.into_parts();
        let bytes = (body.collect().await)
            .map_err(|e| CallError::Unreadable(e.to_string()))?
            .to_bytes();
        if parts.status.is_success() {
            return Ok(bytes);
        }
        let query_error = (parts.headers.get("x-amzn-query-error")).and_then(|v| v.to_str().ok());
        Err(CallError::from_answer(
            parts.status.as_u16(),
            query_error,
            &bytes,
        ))
    }
}

/// Hyper's pooled HTTP/1.1 client over rustls (on *ring*, with the platform's roots, as the
/// SDK's client in `aws.rs`), connecting within `connect`.
fn http_client(connect: Duration) -> Client<HttpsConnector<HttpConnector>, Full<Bytes>> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect));
    http.set_nodelay(true);
    let ring = rustls::crypto::ring::default_provider();
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(ring)
    {
        Ok(with_roots) => with_roots,
        Err(e) => {
            tracing::warn!(error = %e, "no platform certificates to trust; HTTPS calls to SQS will fail");
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(empty_roots())
        }
    };
    let connector = builder.https_or_http().enable_http1().wrap_connector(http);
    // The timer lets idle pooled connections expire (hyper's 90 s default), as the SDK's client
    // does; without one they would be kept until the server closed them.
    Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector)
}

fn empty_roots() -> rustls::ClientConfig {
    let ring = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(ring)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

/// A request that got no answer: a connect that timed out, or a connection that failed.
fn dispatch_error(e: hyper_util::client::legacy::Error) -> CallError {
    let mut cause: &(dyn std::error::Error + 'static) = &e;
    while let Some(next) = cause.source() {
        if let Some(io) = next.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
            && e.is_connect()
        {
            return CallError::ConnectTimedOut;
        }
        cause = next;
    }
    CallError::Connection(cause.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use hyper_util::rt::TokioIo;

    use super::*;

    /// One scripted answer: a status, an `x-amzn-query-error` value, a body; or no answer.
    type Answer = Option<(u16, Option<&'static str>, &'static str)>;

    /// An HTTP server on loopback answering each request with the next of `script`; returns
    /// its address and the requests it has seen (their `x-amz-target` and whether signed).
    async fn scripted(script: Vec<Answer>) -> (String, Arc<Mutex<Vec<(String, bool)>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (script, log) = (Arc::clone(&script), Arc::clone(&log));
                let service = hyper::service::service_fn(move |req: http::Request<_>| {
                    let target = req
                        .headers()
                        .get("x-amz-target")
                        .map(|v| v.to_str().unwrap().to_string());
                    let signed = req.headers().contains_key("authorization");
                    log.lock()
                        .unwrap()
                        .push((target.unwrap_or_default(), signed));
                    let next = script.lock().unwrap().pop_front().flatten();
                    async move {
                        let Some((status, query_error, body)) = next else {
                            std::future::pending::<()>().await;
                            unreachable!()
                        };
                        let mut answer = http::Response::builder().status(status);
                        if let Some(code) = query_error {
                            answer = answer.header("x-amzn-query-error", code);
                        }
                        Ok::<_, Infallible>(answer.body(Full::new(Bytes::from(body))).unwrap())
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        (format!("http://{addr}"), seen)
    }

    fn client(endpoint: &str) -> JsonClient {
        let sdk = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(endpoint)
            .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
                aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "tests"),
            ))
            .build();
        JsonClient::new(&sdk, Duration::from_secs(1))
    }

    const RECEIVE: shapes::ReceiveMessage<'static> = shapes::ReceiveMessage {
        queue_url: "http://127.0.0.1/000000000000/q",
        max_number_of_messages: 10,
        visibility_timeout: 30,
        wait_time_seconds: 0,
        message_attribute_names: ["All"],
        message_system_attribute_names: [
            "ApproximateReceiveCount",
            "SentTimestamp",
            "MessageGroupId",
        ],
    };

    #[tokio::test]
    async fn a_5xx_is_tried_again_and_the_answer_read() {
        let ok = r#"{"Messages":[{"MessageId":"m","ReceiptHandle":"r","Body":"b"}]}"#;
        let (endpoint, seen) =
            scripted(vec![Some((503, None, "busy")), Some((200, None, ok))]).await;
        let got: shapes::Received = (client(&endpoint))
            .call("ReceiveMessage", &RECEIVE, Duration::from_secs(5), 2)
            .await
            .unwrap();
        assert_eq!(got.messages[0].body.as_deref(), Some("b"));
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "one more attempt after the 503");
        assert!(
            seen.iter()
                .all(|(target, signed)| target == "AmazonSQS.ReceiveMessage" && *signed)
        );
    }

    #[tokio::test]
    async fn a_refusal_is_not_tried_again_and_keeps_its_code() {
        let body = r#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"gone"}"#;
        let code = Some("AWS.SimpleQueueService.NonExistentQueue;Sender");
        let (endpoint, seen) =
            scripted(vec![Some((400, code, body)), Some((200, None, "{}"))]).await;
        let e = (client(&endpoint))
            .call::<_, shapes::Received>("ReceiveMessage", &RECEIVE, Duration::from_secs(5), 3)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some("AWS.SimpleQueueService.NonExistentQueue"));
        assert_eq!(seen.lock().unwrap().len(), 1, "a refusal is final");
    }

    #[tokio::test]
    async fn no_answer_ends_at_the_deadline() {
        let (endpoint, seen) = scripted(vec![None]).await;
        let client = client(&endpoint);
        let call = client.call::<_, shapes::Received>(
            "ReceiveMessage",
            &RECEIVE,
            Duration::from_millis(200),
            1,
        );
        // The server never answers: only the call's own deadline can end it with `TimedOut`.
        let e = (tokio::time::timeout(Duration::from_secs(30), call).await)
            .expect("the call ended by itself")
            .unwrap_err();
        assert_eq!(e, CallError::TimedOut);
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn an_answer_that_is_not_the_call_s_is_unreadable() {
        let (endpoint, _) = scripted(vec![Some((200, None, "<xml/>"))]).await;
        let e = (client(&endpoint))
            .call::<_, shapes::Received>("ReceiveMessage", &RECEIVE, Duration::from_secs(5), 1)
            .await
            .unwrap_err();
        assert!(matches!(e, CallError::Unreadable(_)), "{e:?}");
    }
}
