//! Calling an HTTP API from a handler, through `wasi:http`.
//!
//! The host allows only the origins the plugin's manifest grants (`[capabilities] http`);
//! anything else comes back as [`Error`] with the code `HTTP-request-denied`, never a trap.
//! Every request leaves with `Idempotency-Key: PLUGIN:KEY/http/N` (N counts the message's
//! requests from 0) unless the handler sets one, and with `Qhost-Fencing-Token`, so a handler
//! that runs again for the same message (a retry, a crash) repeats the same keys in the same
//! order, and an API that honours the header applies the effect once.
//!
//! ```ignore
//! let response = qhost_guest::http::Request::post("https://api.example.com/v3/mail/send")
//!     .header("authorization", &format!("Bearer {key}"))
//!     .header("content-type", "application/json")
//!     .body(payload)
//!     .send()?;
//! if response.status >= 500 {
//!     return Outcome::Retry(30);
//! }
//! ```
//!
//! The call blocks the handler (not the host) until the whole response has arrived; the
//! handler's deadline bounds it.

use std::fmt;
use std::time::Duration;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, FutureIncomingResponse, IncomingResponse, Method, OutgoingBody,
    OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

/// A request to send.
#[derive(Clone, Debug)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
}

/// A response, its body read whole.
#[derive(Clone, Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names in lower case.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Why a request got no response: the host's refusal or a failure on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The `wasi:http` error code, as its WIT name (`HTTP-request-denied`,
    /// `destination-IP-prohibited`, `connection-refused`, ...), or `invalid-url`.
    pub code: String,
    /// More about it, where there is more.
    pub detail: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            f.write_str(&self.code)
        } else {
            write!(f, "{}: {}", self.code, self.detail)
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// Whether the host refused the request before it left (not granted, an address it keeps
    /// out, too many requests): sending it again will not help.
    pub fn is_refused(&self) -> bool {
        matches!(
            self.code.as_str(),
            "HTTP-request-denied" | "destination-IP-prohibited" | "connection-limit-reached"
        )
    }
}

impl Request {
    /// A request with this method (`GET`, `POST`, ...) to `url` (`http` or `https`).
    pub fn new(method: &str, url: &str) -> Self {
        let method = match method.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "OPTIONS" => Method::Options,
            other => Method::Other(other.to_string()),
        };
        Request {
            method,
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        }
    }

    /// A `GET`.
    pub fn get(url: &str) -> Self {
        Request::new("GET", url)
    }

    /// A `POST`.
    pub fn post(url: &str) -> Self {
        Request::new("POST", url)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.as_bytes().to_vec()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Gives up on the response after this long (the handler's deadline applies anyway).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends it and reads the whole response.
    pub fn send(self) -> Result<Response, Error> {
        let (scheme, authority, path) = split_url(&self.url)?;
        // A known length, so the body goes with Content-Length rather than chunked (which
        // some APIs refuse).
        let mut headers = self.headers.clone();
        if !self.body.is_empty() && !headers.iter().any(|(name, _)| name == "content-length") {
            let length = self.body.len().to_string().into_bytes();
            headers.push(("content-length".into(), length));
        }
        let fields = Fields::from_list(&headers).map_err(|e| Error {
            code: "invalid-header".into(),
            detail: format!("{e:?}"),
        })?;
        let request = OutgoingRequest::new(fields);
        let invalid = |what: &str| Error {
            code: "invalid-url".into(),
            detail: format!("{what} in {}", self.url),
        };
        request
            .set_method(&self.method)
            .map_err(|()| invalid("the method"))?;
        request
            .set_scheme(Some(&scheme))
            .map_err(|()| invalid("the scheme"))?;
        request
            .set_authority(Some(authority))
            .map_err(|()| invalid("the authority"))?;
        request
            .set_path_with_query(Some(path))
            .map_err(|()| invalid("the path"))?;
        let body = request.body().map_err(|()| internal("no request body"))?;
        let options = self.timeout.map(|t| {
            let options = RequestOptions::new();
            let nanos = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            let _ = options.set_first_byte_timeout(Some(nanos));
            options
        });
        let future = outgoing_handler::handle(request, options).map_err(from_code)?;
        let written = write_body(body, &self.body);
        let response = wait(&future)?;
        written?;
        read(response)
    }
}

/// `SCHEME://AUTHORITY/PATH?QUERY`, split.
fn split_url(url: &str) -> Result<(Scheme, &str, &str), Error> {
    let bad = || Error {
        code: "invalid-url".into(),
        detail: format!("`{url}` is not http(s)://HOST[:PORT][/PATH]"),
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "https" => Scheme::Https,
        "http" => Scheme::Http,
        _ => return Err(bad()),
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.is_empty() {
        return Err(bad());
    }
    Ok((scheme, authority, if path.is_empty() { "/" } else { path }))
}

fn write_body(body: OutgoingBody, bytes: &[u8]) -> Result<(), Error> {
    {
        let stream = body.write().map_err(|()| internal("no body stream"))?;
        for chunk in bytes.chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| stream_error(e, "writing the request body"))?;
        }
    }
    OutgoingBody::finish(body, None).map_err(from_code)
}

fn wait(future: &FutureIncomingResponse) -> Result<IncomingResponse, Error> {
    loop {
        match future.get() {
            Some(Ok(Ok(response))) => return Ok(response),
            Some(Ok(Err(code))) => return Err(from_code(code)),
            Some(Err(())) => return Err(internal("the response was taken twice")),
            None => future.subscribe().block(),
        }
    }
}

fn read(response: IncomingResponse) -> Result<Response, Error> {
    let status = response.status();
    let headers = response.headers().entries();
    let body = response
        .consume()
        .map_err(|()| internal("no response body"))?;
    let mut bytes = Vec::new();
    {
        let stream = body.stream().map_err(|()| internal("no body stream"))?;
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(e) => return Err(stream_error(e, "reading the response body")),
            }
        }
    }
    Ok(Response {
        status,
        headers,
        body: bytes,
    })
}

fn stream_error(e: StreamError, doing: &str) -> Error {
    match e {
        StreamError::LastOperationFailed(io) => match wasip2::http::types::http_error_code(&io) {
            Some(code) => from_code(code),
            None => unclassified(&io.to_debug_string(), doing),
        },
        StreamError::Closed => Error {
            code: "connection-terminated".into(),
            detail: doing.to_string(),
        },
    }
}

/// A body stream's failure that came without a `wasi:http` code. The host's wasi:http (wasmtime
/// 48) hands a body's errors to the guest as plain I/O errors, so the two the host makes on
/// purpose, the response-size cap and the deadline, are recognised by their text and given
/// their codes; anything else is `internal-error` with the text.
fn unclassified(text: &str, doing: &str) -> Error {
    let code = if text.contains("body size exceeds limit") {
        "HTTP-response-body-size"
    } else if text.contains("read timeout") {
        "connection-read-timeout"
    } else {
        "internal-error"
    };
    Error {
        code: code.into(),
        detail: format!("{doing}: {text}"),
    }
}

fn from_code(code: ErrorCode) -> Error {
    let text = format!("{code:?}");
    // `Debug` of the generated enum is `ErrorCode::NAME(...)`; the WIT name is the code.
    let name = text
        .trim_start_matches("ErrorCode::")
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or("")
        .to_string();
    Error {
        code: wit_name(&name),
        detail: text,
    }
}

/// `HttpRequestDenied` → `HTTP-request-denied`, as the WIT spells the cases.
fn wit_name(rust: &str) -> String {
    match rust {
        "HttpRequestDenied" => "HTTP-request-denied".into(),
        "DestinationIpProhibited" => "destination-IP-prohibited".into(),
        "DestinationIpUnroutable" => "destination-IP-unroutable".into(),
        "HttpResponseBodySize" => "HTTP-response-body-size".into(),
        "HttpResponseTimeout" => "HTTP-response-timeout".into(),
        "DnsError" => "DNS-error".into(),
        "DnsTimeout" => "DNS-timeout".into(),
        "TlsProtocolError" => "TLS-protocol-error".into(),
        "TlsCertificateError" => "TLS-certificate-error".into(),
        other => {
            let mut out = String::new();
            for (i, c) in other.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    out.push('-');
                }
                out.push(c.to_ascii_lowercase());
            }
            out
        }
    }
}

fn internal(detail: &str) -> Error {
    Error {
        code: "internal-error".into(),
        detail: detail.to_string(),
    }
}
