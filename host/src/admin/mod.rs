//! The admin listener: `/metrics` for Prometheus, `/healthz` and `/readyz` for an orchestrator.
//!
//! It is bound before the host starts, so a port in use is one clear start-up error, and it
//! answers while plugins compile: live, not ready ("starting"). Once the host is built
//! ([`AdminServer::serve_host`]) it serves that host's metrics and readiness. It is plain
//! HTTP/1.1 on hyper, meant for loopback or a pod network; nothing it serves changes state.

pub(crate) mod health;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::plugin::registry::Registry;

pub(crate) use health::Health;

/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

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
    },
}

impl AdminError {
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
        tracing::info!(address = %bound, "admin listener serving /metrics, /healthz and /readyz");
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
        let service = hyper::service::service_fn(move |req| {
            let host = Arc::clone(&host);
            async move { Ok::<_, Infallible>(respond(host.get(), &req)) }
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

fn respond(host: Option<&HostView>, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    match (req.uri().path(), host) {
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
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: /metrics, /healthz, /readyz\n",
        ),
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = text(status, format!("{value}\n"));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
