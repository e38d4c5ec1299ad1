//! Outbound HTTP for plugins, by grant: `wasi:http/outgoing-handler` with the host's rules on
//! every request.
//!
//! A plugin gets no network unless its manifest's `[capabilities] http` lists the origins it
//! may call ([`grant`]). Each request, in order:
//!
//! 1. is counted against the plugin's requests per message (`limits.http-requests`): over it,
//!    `connection-limit-reached`;
//! 2. must match the grant by scheme, host and port: otherwise `HTTP-request-denied`;
//! 3. gets `Idempotency-Key: PLUGIN:KEY/http/N` (N counts the message's requests from 0)
//!    unless the guest set one or the manifest renames or turns off the header, and
//!    `Qhost-Fencing-Token: TOKEN` (always the host's);
//! 4. is resolved, and every address checked ([`address`]): none left is
//!    `destination-IP-prohibited`;
//! 5. goes out on a fresh connection to a checked address (TLS with [`tls`]'s roots), with the
//!    handler's deadline as its timeout (and the guest's own request options where shorter),
//!    and its response body capped at `limits.http-response-bytes` ([`body`]).
//!
//! Every refusal is an error value inside the guest, never a trap: the handler decides
//! whether that is a retry or a reject. The keys make a re-run handler (a retry, a duplicate
//! that found its lease expired, a host killed mid-call) repeat the same keys in the same
//! order, so an API that honours idempotency keys applies the effect once. An API that ignores
//! them can see a request again after a crash; no host can prevent that.

mod address;
mod body;
mod counts;
mod grant;
pub mod record;
mod send;
mod tls;

use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use tokio::time::Instant;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::world::World;

pub use counts::HttpCounts;
pub use grant::HttpGrant;
pub use tls::{TlsClient, client as tls_client};

use counts::HttpResult;
use grant::Target;
use send::{Outbound, Sending};

/// The header the fencing token travels in.
const FENCING_HEADER: HeaderName = HeaderName::from_static("qhost-fencing-token");

/// One plugin version's HTTP rules.
#[derive(Debug)]
pub struct HttpPolicy {
    pub plugin: Arc<str>,
    pub grant: HttpGrant,
    /// Where the idempotency key goes; `None` when the manifest turns it off.
    pub key_header: Option<HeaderName>,
    pub max_requests: u32,
    pub max_response_bytes: u64,
    /// `None` for a plugin granted nothing (its requests never get as far as TLS).
    pub tls: Option<TlsClient>,
    pub counts: Arc<HttpCounts>,
    /// Set for a plugin loaded into a world (`qhost test`, `qhost replay`): admitted requests
    /// are written down there and answered by it, never sent ([`record`]).
    pub world: Option<Arc<World>>,
}

/// The message a call is for, as its requests need it.
#[derive(Clone, Debug)]
pub struct Call {
    /// The message's idempotency key.
    pub key: String,
    pub fencing_token: u64,
    /// When the handler's time is up.
    pub deadline: Instant,
}

/// The `wasi:http` hooks for one instance: the plugin's policy and the message in hand.
#[derive(Debug)]
pub struct OutboundHttp {
    policy: Arc<HttpPolicy>,
    call: Call,
    /// Requests made for this message so far.
    made: u32,
}

impl OutboundHttp {
    pub fn new(policy: Arc<HttpPolicy>, call: Call) -> Self {
        OutboundHttp {
            policy,
            call,
            made: 0,
        }
    }

    /// Starts the next message on a reused instance: its key, token, deadline and count.
    pub fn begin(&mut self, call: Call) {
        self.call = call;
        self.made = 0;
    }

    /// Requests made so far for the current message.
    pub fn made(&self) -> u32 {
        self.made
    }

    /// Switches to another message of a batch call, which has made `made` requests so far.
    pub fn switch(&mut self, call: Call, made: u32) {
        self.call = call;
        self.made = made;
    }

    /// Checks a request and stamps it, or says why it may not go.
    fn admit(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> Result<Outbound, (Error, HttpResult)> {
        let index = self.made;
        self.made = self.made.saturating_add(1);
        let policy = &self.policy;
        if index >= policy.max_requests {
            tracing::info!(
                target: "qhost::plugin",
                plugin = &*policy.plugin,
                "HTTP request refused: this message has made its {} (limits.http-requests)",
                policy.max_requests
            );
            return Err((Error::ConnectionLimitReached, HttpResult::TooMany));
        }
        let uri = request.uri();
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let (Some(host), true) = (
            uri.host(),
            https || uri.scheme() == Some(&http::uri::Scheme::HTTP),
        ) else {
            return Err((Error::HttpRequestUriInvalid, HttpResult::Denied));
        };
        let host = host.to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let target = Target {
            https,
            host: &host,
            port,
        };
        if !policy.grant.allows(target) {
            tracing::info!(
                target: "qhost::plugin",
                plugin = &*policy.plugin,
                request = %target,
                "HTTP request denied: the manifest's [capabilities] http does not grant it"
            );
            return Err((Error::HttpRequestDenied, HttpResult::Denied));
        }
        self.stamp(request.headers_mut(), index);
        Ok(Outbound {
            request,
            https,
            host,
            port,
            deadline: self.call.deadline,
            options,
            policy: Arc::clone(&self.policy),
        })
    }

    /// Adds the idempotency key (unless the guest set one) and the fencing token.
    fn stamp(&self, headers: &mut http::HeaderMap, index: u32) {
        if let Some(name) = &self.policy.key_header
            && !headers.contains_key(name)
        {
            let key = header_key(&self.policy.plugin, &self.call.key, index);
            headers.insert(name.clone(), key);
        }
        headers.insert(FENCING_HEADER, HeaderValue::from(self.call.fencing_token));
    }
}

/// The idempotency header a manifest names: `None` for `""` (none sent). The host's own
/// fencing header and the headers the guest may not set are refused.
pub fn key_header(name: &str) -> Result<Option<HeaderName>, String> {
    if name.is_empty() {
        return Ok(None);
    }
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`{name}` is not a header name"))?;
    if header == FENCING_HEADER || wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(&header) {
        return Err(format!("`{name}` is a header the host sets itself"));
    }
    Ok(Some(header))
}

/// `PLUGIN:KEY/http/N`, with any byte a header cannot carry (controls, non-ASCII, and `%`
/// itself) percent-encoded, so every key has a header form and two keys never share one.
pub fn header_key(plugin: &str, key: &str, index: u32) -> HeaderValue {
    let raw = format!("{plugin}:{key}/http/{index}");
    let mut text = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if (0x21..0x7f).contains(&b) && b != b'%' {
            text.push(char::from(b));
        } else {
            text.push_str(&format!("%{b:02X}"));
        }
    }
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

impl WasiHttpHooks for OutboundHttp {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Sending {
        match self.admit(request, options) {
            Ok(outbound) => match &self.policy.world {
                Some(world) => send::boxed(record::answer(outbound.request, Arc::clone(world))),
                None => send::boxed(send::send(outbound)),
            },
            Err((error, result)) => {
                self.policy.counts.count(result);
                send::boxed(async move { Err(error) })
            }
        }
    }

    // The defaults log these at warn, as if they were the host's fault: they are the remote
    // end's or the guest's, and the guest hears of them.
    fn p2_error_from_hyper(&mut self, err: &hyper::Error) -> ErrorCode {
        tracing::debug!(%err, "a plugin's HTTP exchange failed");
        if err.is_timeout() {
            return ErrorCode::ConnectionReadTimeout;
        }
        ErrorCode::HttpProtocolError
    }

    fn p2_error_from_connect(&mut self, err: &std::io::Error) -> ErrorCode {
        tracing::debug!(%err, "a plugin's HTTP connection failed");
        ErrorCode::ConnectionRefused
    }

    fn p2_error_from_tls(&mut self, err: &std::io::Error) -> ErrorCode {
        tracing::debug!(%err, "a plugin's TLS handshake failed");
        if err.to_string().contains("certificate") {
            return ErrorCode::TlsCertificateError;
        }
        ErrorCode::TlsProtocolError
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_plugin_key_and_index_and_always_a_header_value() {
        assert_eq!(header_key("mail", "job-7", 0), "mail:job-7/http/0");
        assert_eq!(header_key("mail", "job-7", 12), "mail:job-7/http/12");
        assert_eq!(header_key("mail", "a b%\n", 1), "mail:a%20b%25%0A/http/1");
        assert_eq!(header_key("mail", "é", 0), "mail:%C3%A9/http/0");
        assert_ne!(header_key("mail", "a%20", 0), header_key("mail", "a ", 0));
    }
}
