//! The admin listener: `/metrics` for Prometheus, `/healthz` and `/readyz` for an orchestrator,
//! and the operator's console (`/` and its JSON API, see `console`).
//!
//! It is bound before the host starts, so a port in use is one clear start-up error, and it
//! answers while plugins compile: live, not ready ("starting"). Once the host is built
//! ([`AdminServer::serve_host`]) it serves that host's metrics, readiness and console. It is
//! plain HTTP/1.1, an axum router ([`routes`]) on hyper's connection, meant for loopback or a
//! pod network. What changes state is the console's actions, POSTs that need the admin token.

mod console;
pub(crate) mod health;
mod history;
mod routes;
mod serving;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
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
    let router = routes::router(host);
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
        // hyper's own connection rather than `axum::serve`: it bounds how long a client may
        // take over its request headers, so a slow one cannot hold a connection open.
        let service = TowerToHyperService::new(router.clone());
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
