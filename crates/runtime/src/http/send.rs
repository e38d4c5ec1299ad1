//! Sending one granted request: resolve, check every address, connect to a checked one, TLS,
//! HTTP/1.1, and a bounded response.
//!
//! The connection goes to the address that was checked, so a name cannot resolve to a public
//! address for the check and to a private one for the connection (DNS rebinding). Redirects
//! are the guest's to follow or not: a 3xx comes back as it is, and a request to its
//! `Location` is a new request, checked against the grant like any other.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use super::HttpPolicy;
use super::address;
use super::body::Bounded;
use super::counts::HttpResult;
use super::grant::{Target, unbracketed};

/// The connection's remaining work once the response head has arrived.
pub(super) type Io = Box<dyn Future<Output = Result<(), Error>> + Send>;

/// What sending a request comes to: the response (body still arriving) and the connection.
pub(super) type Sent = Result<(http::Response<WasiBody>, Io), Error>;

/// The boxed future `wasi:http`'s hooks return.
pub(super) type Sending = Box<dyn Future<Output = Sent> + Send>;

/// A request that passed the grant, ready to go.
pub(super) struct Outbound {
    pub(super) request: Request<WasiBody>,
    pub(super) https: bool,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) deadline: Instant,
    pub(super) options: Option<RequestOptions>,
    pub(super) policy: Arc<HttpPolicy>,
}

/// Sends it, counting how it ended.
pub(super) async fn send(out: Outbound) -> Sent {
    let policy = Arc::clone(&out.policy);
    let result = exchange(out).await;
    policy.counts.count(match &result {
        Ok(_) => HttpResult::Sent,
        Err(Error::DestinationIpProhibited) => HttpResult::Prohibited,
        Err(Error::ConnectionTimeout | Error::ConnectionReadTimeout | Error::DnsTimeout) => {
            HttpResult::Timeout
        }
        Err(Error::HttpResponseBodySize(_)) => HttpResult::TooLarge,
        Err(_) => HttpResult::Failed,
    });
    if let Err(error) = &result {
        tracing::debug!(%error, "a plugin's HTTP request failed");
    }
    result
}

async fn exchange(out: Outbound) -> Sent {
    let limit = |guest: Option<Duration>| match guest {
        Some(d) => out.deadline.min(Instant::now() + d),
        None => out.deadline,
    };
    let connect_by = limit(out.options.and_then(|o| o.connect_timeout));
    let first_byte_by = limit(out.options.and_then(|o| o.first_byte_timeout));
    let target = Target {
        https: out.https,
        host: &out.host,
        port: out.port,
    };
    let addrs = timeout_at(connect_by, resolve(&out.host, out.port))
        .await
        .map_err(|_| Error::DnsTimeout)??;
    let allowed = checked(&out.policy, target, &addrs)?;
    let stream = timeout_at(connect_by, connect(&allowed))
        .await
        .map_err(|_| Error::ConnectionTimeout)??;
    let stream: Box<dyn Stream> = if out.https {
        let tls = timeout_at(connect_by, tls(&out.policy, &out.host, stream))
            .await
            .map_err(|_| Error::ConnectionTimeout)??;
        Box::new(tls)
    } else {
        Box::new(stream)
    };
    let (mut sender, conn) = timeout_at(
        connect_by,
        hyper::client::conn::http1::handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;
    let request = origin_form(out.request)?;
    let mut conn = Box::pin(conn);
    let mut finished = None;
    let response = timeout_at(first_byte_by, async {
        let send = sender.send_request(request);
        tokio::pin!(send);
        tokio::select! {
            response = &mut send => response,
            ended = &mut conn => {
                finished = Some(ended);
                send.await
            }
        }
    })
    .await
    .map_err(|_| Error::ConnectionReadTimeout)??;
    let max = out.policy.max_response_bytes;
    if response_length(&response).is_some_and(|n| n > max) {
        return Err(Error::HttpResponseBodySize(Some(max)));
    }
    let counts = Arc::clone(&out.policy.counts);
    let response =
        response.map(|body| Bounded::new(body, max, out.deadline, counts).boxed_unsync());
    let io: Io = Box::new(async move {
        match finished {
            Some(ended) => ended.map_err(Error::Hyper),
            None => conn.await.map_err(Error::Hyper),
        }
    });
    Ok((response, io))
}

/// The name's addresses, or the literal's one.
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, Error> {
    let bare = unbracketed(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let found = tokio::net::lookup_host((bare, port))
        .await
        .map_err(|e| Error::DnsError {
            rcode: Some(e.to_string()),
            info_code: None,
        })?;
    Ok(found.collect())
}

/// The addresses a connection may go to; none is `destination-IP-prohibited`.
fn checked(
    policy: &HttpPolicy,
    target: Target<'_>,
    addrs: &[SocketAddr],
) -> Result<Vec<SocketAddr>, Error> {
    let mut allowed = Vec::with_capacity(addrs.len());
    for addr in addrs {
        match address::restricted(addr.ip()) {
            Some(why) if !policy.grant.names_address(target, addr.ip()) => {
                tracing::info!(
                    target: "qhost::plugin",
                    plugin = &*policy.plugin,
                    request = %target,
                    address = %addr.ip(),
                    "HTTP request refused: the address is {why}, and the grant does not name it"
                );
            }
            _ => allowed.push(*addr),
        }
    }
    if allowed.is_empty() {
        return Err(Error::DestinationIpProhibited);
    }
    Ok(allowed)
}

/// The first checked address that accepts.
async fn connect(addrs: &[SocketAddr]) -> Result<TcpStream, Error> {
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Error::ConnectionRefused,
        Some(e) => Error::Connect(e),
        None => Error::DestinationUnavailable,
    })
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

async fn tls(
    policy: &HttpPolicy,
    host: &str,
    stream: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
    let bare = unbracketed(host);
    let name =
        rustls::pki_types::ServerName::try_from(bare.to_string()).map_err(|_| Error::DnsError {
            rcode: Some("not a valid TLS server name".into()),
            info_code: None,
        })?;
    let client = policy.tls.as_ref().ok_or(Error::HttpRequestDenied)?;
    tokio_rustls::TlsConnector::from(Arc::clone(client))
        .connect(name, stream)
        .await
        .map_err(Error::Tls)
}

/// The request as sent to an origin server: path and query only in the request line.
fn origin_form(mut request: Request<WasiBody>) -> Result<Request<WasiBody>, Error> {
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    *request.uri_mut() = path.parse().map_err(|_| Error::HttpRequestUriInvalid)?;
    Ok(request)
}

fn response_length<B>(response: &http::Response<B>) -> Option<u64> {
    response
        .headers()
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The boxed form the hooks return.
pub(super) fn boxed(future: impl Future<Output = Sent> + Send + 'static) -> Sending {
    Box::new(future)
}
