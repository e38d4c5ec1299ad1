//! The admin listener: `/metrics` for Prometheus, `/healthz` and `/readyz` for an orchestrator,
//! and the operator's console (`/` and its JSON API, see `console`).
//!
//! It is bound before the host starts, so a port in use is one clear start-up error, and it
//! answers while plugins compile: live, not ready ("starting"). Once the host is built
//! ([`AdminServer::serve_host`]) it serves that host's metrics, readiness and console. It is
//! plain HTTP/1.1 on hyper, meant for loopback or a pod network. The one thing that changes
//! state is the console's redrive, a POST that needs the admin token.

mod console;
pub(crate) mod health;
mod history;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::plugin::registry::Registry;
use crate::recent::RecentDeadLetters;
use crate::source::QueueSource;
use crate::stats::Stats;

pub(crate) use health::Health;

/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest form body an action reads.
const MAX_FORM: usize = 16 * 1024;

/// The admin listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The address could not be bound (in use, not local, not permitted).
    #[error("admin.listen (--admin-listen): cannot listen on {addr}: {reason}{hint}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why not, as the system said it.
        reason: String,
        /// What to do about it, when that is known.
        hint: &'static str,
        /// Whether something else listens there already.
        in_use: bool,
    },
}

impl AdminError {
    /// Whether the address is in use by something else (another qhost, say).
    pub fn is_in_use(&self) -> bool {
        match self {
            AdminError::Bind { in_use, .. } => *in_use,
        }
    }

    fn bind(addr: SocketAddr, error: std::io::Error) -> Self {
        let hint = match error.kind() {
            std::io::ErrorKind::AddrInUse => {
                "; another qhost (or another program) may be serving there: give this one \
                 another address with --admin-listen 127.0.0.1:0 (a free port, logged at start) \
                 or [admin] listen, or \"\" for none"
            }
            _ => "",
        };
        AdminError::Bind {
            addr,
            in_use: error.kind() == std::io::ErrorKind::AddrInUse,
            reason: error.to_string(),
            hint,
        }
    }
}

/// What the listener reads from a running host.
#[derive(Clone, Debug)]
pub struct HostView {
    /// The host's metrics.
    pub(crate) metrics: Arc<Metrics>,
    /// Its health.
    pub(crate) health: Arc<Health>,
    /// Its configuration (the consumed queues).
    pub(crate) config: Arc<Config>,
    /// Its plugins.
    pub(crate) plugins: Arc<Registry>,
    /// Its counters.
    pub(crate) stats: Arc<Stats>,
    /// The dead letters it sent lately.
    pub(crate) recent: Arc<RecentDeadLetters>,
    /// Its queue backend, for the console's actions.
    pub(crate) source: Arc<dyn QueueSource>,
    /// Its schedules, as its scheduler last read them.
    pub(crate) schedules: Arc<crate::schedule::Board>,
    /// Its fleet, as its follower last read it.
    pub(crate) fleet: Arc<crate::fleet::Fleet>,
    /// Its idempotency store, for the console's fleet-wide actions.
    pub(crate) store: Arc<dyn crate::idempotency::Store>,
    /// Its flow keys' runs and put-backs.
    pub(crate) fair: Arc<crate::flow::FairShares>,
}

impl HostView {
    /// Whether the host is ready to consume (what `/readyz` answers), or every reason it is not.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        self.health.readiness(&self.config, &self.plugins)
    }
}

/// A bound, serving admin listener; it stops when dropped.
#[derive(Debug)]
pub struct AdminServer {
    addr: SocketAddr,
    host: Arc<OnceLock<HostView>>,
    stop: CancellationToken,
}

impl AdminServer {
    /// Binds `addr` (port 0 picks a free port) and starts serving.
    pub async fn start(addr: SocketAddr) -> Result<Self, AdminError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| AdminError::bind(addr, e))?;
        let bound = listener
            .local_addr()
            .map_err(|e| AdminError::bind(addr, e))?;
        let (host, stop) = (Arc::new(OnceLock::new()), CancellationToken::new());
        tokio::spawn(accept(listener, Arc::clone(&host), stop.clone()));
        tracing::info!(address = %bound, "admin listener serving the console (/), /metrics, /healthz and /readyz");
        Ok(AdminServer {
            addr: bound,
            host,
            stop,
        })
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves this host's metrics and readiness from now on (the first host given stays).
    pub fn serve_host(&self, view: HostView) {
        let _ = self.host.set(view);
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept(
    listener: tokio::net::TcpListener,
    host: Arc<OnceLock<HostView>>,
    stop: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: pause rather than spin.
                    tracing::warn!(error = %e, "admin listener could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let host = Arc::clone(&host);
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let host = Arc::clone(&host);
            async move {
                let response = if req.method() == Method::POST {
                    post(host.get(), req).await
                } else {
                    respond(host.get(), &req)
                };
                Ok::<_, Infallible>(response)
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = conn => {}
            }
        });
    }
}

/// A POST: one of the console's actions ([`console::post`]), its body read up to [`MAX_FORM`].
async fn post(host: Option<&HostView>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let Some(host) = host else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "starting\n");
    };
    let (parts, body) = req.into_parts();
    let bearer = (parts.headers.get(hyper::header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let body = match http_body_util::Limited::new(body, MAX_FORM).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "the form is too large\n"),
    };
    let (path, query) = (parts.uri.path(), parts.uri.query());
    match console::post(host, path, query, bearer, &body).await {
        Some(answer) => console_response(answer),
        None => text(
            StatusCode::NOT_FOUND,
            "not found: POST /api/redrive or /actions/redrive\n",
        ),
    }
}

fn respond(host: Option<&HostView>, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET, or POST for the console's actions\n",
        );
    }
    let (path, query) = (req.uri().path(), req.uri().query());
    if let Some(answer) = host.and_then(|h| console::get(h, path, query)) {
        return console_response(answer);
    }
    match (path, host) {
        ("/metrics", Some(host)) => {
            let mut response = text(StatusCode::OK, host.metrics.encode());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                ),
            );
            response
        }
        ("/metrics", None) => text(StatusCode::SERVICE_UNAVAILABLE, "starting\n"),
        ("/healthz", host) => match host.map_or(Ok(()), |h| h.health.liveness()) {
            Ok(()) => json(StatusCode::OK, &serde_json::json!({ "status": "ok" })),
            Err(reason) => json(
                StatusCode::SERVICE_UNAVAILABLE,
                &serde_json::json!({ "status": "stalled", "reason": reason }),
            ),
        },
        ("/readyz", host) => {
            let readiness = match host {
                Some(h) => h.readiness(),
                None => Err(vec![
                    "starting: loading plugins and opening the backends".into(),
                ]),
            };
            match readiness {
                Ok(()) => json(
                    StatusCode::OK,
                    &serde_json::json!({ "ready": true, "reasons": [] }),
                ),
                Err(reasons) => json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &serde_json::json!({ "ready": false, "reasons": reasons }),
                ),
            }
        }
        ("/", None) => text(StatusCode::SERVICE_UNAVAILABLE, "starting\n"),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: /, /api/queues, /api/plugins, /api/schedules, /api/dead-letters?queue=NAME, /metrics, /healthz, /readyz\n",
        ),
    }
}

/// A console answer as a response; pages carry the console's security headers.
fn console_response(answer: console::Answer) -> Response<Full<Bytes>> {
    use hyper::header::{HeaderName, HeaderValue};
    match answer {
        console::Answer::Html(page) => {
            let mut response = with_type(text(StatusCode::OK, page), "text/html; charset=utf-8");
            let headers = response.headers_mut();
            if let Ok(policy) = HeaderValue::from_str(console::POLICY.as_str()) {
                headers.insert(hyper::header::CONTENT_SECURITY_POLICY, policy);
            }
            headers.insert(
                HeaderName::from_static("x-content-type-options"),
                HeaderValue::from_static("nosniff"),
            );
            headers.insert(
                hyper::header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            );
            response
        }
        console::Answer::Json(value) => json(StatusCode::OK, &value),
        console::Answer::NotFound(why) => text(StatusCode::NOT_FOUND, why),
        console::Answer::Forbidden(why) => text(StatusCode::FORBIDDEN, why),
        console::Answer::Unavailable(why) => text(StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Full<Bytes>> {
    with_type(text(status, format!("{value}\n")), "application/json")
}

fn with_type(mut response: Response<Full<Bytes>>, kind: &'static str) -> Response<Full<Bytes>> {
    (response.headers_mut()).insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(kind),
    );
    response
}
