//! The admin listener's routes, one axum router: the probes (`/metrics`, `/healthz`,
//! `/readyz`) here, the console's pages, API and actions in `console`.
//!
//! The listener answers before the host is built ([`super::AdminServer::start`]); a route
//! that needs the host takes it through [`Serving`], which answers `503 starting` until then.

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::console;
use super::serving::{Admin, Serving, answer};

/// The largest body a request may carry (an action's form).
const MAX_FORM: usize = 16 * 1024;

/// Every route the listener serves.
pub(super) fn router(host: Admin) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(console::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(not_allowed)
        .layer(DefaultBodyLimit::max(MAX_FORM))
        .with_state(host)
}

/// The metrics in Prometheus's text format.
async fn metrics(Serving(host): Serving) -> Response {
    let content_type = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
    (
        [(header::CONTENT_TYPE, content_type)],
        host.metrics.encode(),
    )
        .into_response()
}

/// Live: the health checker ran lately (and while the host starts).
async fn healthz(State(host): State<Admin>) -> Response {
    match host.get().map_or(Ok(()), |h| h.health.liveness()) {
        Ok(()) => answer(StatusCode::OK, json!({ "status": "ok" })),
        Err(reason) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "status": "stalled", "reason": reason }),
        ),
    }
}

/// Ready to consume, or every reason it is not.
async fn readyz(State(host): State<Admin>) -> Response {
    let readiness = match host.get() {
        Some(h) => h.readiness(),
        None => Err(vec![
            "starting: loading plugins and opening the backends".into(),
        ]),
    };
    match readiness {
        Ok(()) => answer(StatusCode::OK, json!({ "ready": true, "reasons": [] })),
        Err(reasons) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "ready": false, "reasons": reasons }),
        ),
    }
}

async fn not_found() -> (StatusCode, &'static str) {
    (
        StatusCode::NOT_FOUND,
        "not found: /, /api/fleet, /api/queues, /api/plugins, /api/schedules, /api/flow, \
         /api/dead-letters?queue=NAME, /metrics, /healthz, /readyz; POST /api/ACTION or \
         /actions/ACTION\n",
    )
}

async fn not_allowed() -> (StatusCode, &'static str) {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        "GET, or POST for the console's actions\n",
    )
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::super::AdminServer;

    /// `method path` asked of the listener at `addr` over a real connection: status and body.
    async fn ask(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
        let mut stream = (tokio::net::TcpStream::connect(addr).await).expect("connected");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.expect("sent");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        let status = answer[9..12].parse().expect("a status");
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, body.to_string())
    }

    #[tokio::test]
    async fn before_the_host_is_built_it_is_live_not_ready_and_says_what_it_serves() {
        let admin = AdminServer::start("127.0.0.1:0".parse().expect("an address"))
            .await
            .expect("bound");
        let addr = admin.local_addr();
        assert_eq!(
            ask(addr, "GET", "/healthz").await,
            (200, "{\"status\":\"ok\"}\n".into())
        );
        let (status, ready) = ask(addr, "GET", "/readyz").await;
        assert_eq!(status, 503);
        assert!(
            ready.contains("\"ready\":false") && ready.contains("starting"),
            "{ready}"
        );
        for path in [
            "/",
            "/metrics",
            "/api/queues",
            "/api/dead-letters?queue=jobs",
        ] {
            assert_eq!(
                ask(addr, "GET", path).await,
                (503, "starting\n".into()),
                "{path}"
            );
        }
        assert_eq!(ask(addr, "POST", "/api/pause?queue=jobs").await.0, 503);
        let (status, body) = ask(addr, "GET", "/nowhere").await;
        assert_eq!(status, 404);
        assert!(
            body.contains("/api/queues") && body.contains("/readyz"),
            "{body}"
        );
        let (status, body) = ask(addr, "DELETE", "/metrics").await;
        assert_eq!(
            (status, body.as_str()),
            (405, "GET, or POST for the console's actions\n")
        );
        assert_eq!(
            ask(addr, "GET", "/api/pause").await.0,
            405,
            "an action is a POST"
        );
    }
}
