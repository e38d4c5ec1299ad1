//! The operator's console on the admin listener: `GET /` is a page, and the JSON behind it is
//! an API for scripts (`/api/fleet`, `/api/queues`, `/api/plugins`, `/api/schedules`,
//! `/api/flow`, `/api/dead-letters?queue=NAME`).
//!
//! Both read the same views ([`views`]) of what the host keeps anyway, so neither calls a
//! backend: depths are the health checker's last answers, rates come from its samples, dead
//! letters are the ones this host sent lately; the fleet is the roster its follower read last
//! ([`crate::fleet`]). What changes state (pause, resume, redrive, purge, promote, roll back)
//! is a POST that needs the admin token ([`actions`]).

mod actions;
mod chart;
mod forms;
mod page;
mod text;
mod views;
mod work;

use axum::Router;
use axum::extract::Query;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use maud::Markup;
use serde::{Deserialize, Serialize};

use super::HostView;
use super::serving::{Admin, Serving, answer};

/// The flow keys the console shows: this host's busiest.
const FLOW_KEYS: usize = 20;

/// The console's routes: the page, its JSON, and the actions' two doors.
pub(super) fn routes() -> Router<Admin> {
    Router::new()
        .route(
            "/",
            get(|Serving(host): Serving| async move { Page(page_of(&host)) }),
        )
        .route(
            "/api/fleet",
            get(|Serving(h): Serving| async move { json(&views::fleet(&h)) }),
        )
        .route(
            "/api/queues",
            get(|Serving(h): Serving| async move { json(&views::queues(&h)) }),
        )
        .route(
            "/api/plugins",
            get(|Serving(h): Serving| async move { json(&views::plugins(&h)) }),
        )
        .route(
            "/api/schedules",
            get(|Serving(h): Serving| async move { json(&h.schedules.snapshot()) }),
        )
        .route(
            "/api/flow",
            get(|Serving(h): Serving| async move { json(&h.fair.busiest(FLOW_KEYS)) }),
        )
        .route("/api/dead-letters", get(dead_letters))
        .route("/api/{action}", post(actions::by_api))
        .route("/actions/{action}", post(actions::by_form))
}

/// A console page, served with the console's security headers ([`page::POLICY`]).
pub(super) struct Page(pub(super) Markup);

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        let mut response = (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            self.0.into_string(),
        )
            .into_response();
        let headers = response.headers_mut();
        if let Ok(policy) = HeaderValue::from_str(page::POLICY.as_str()) {
            headers.insert(header::CONTENT_SECURITY_POLICY, policy);
        }
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        response
    }
}

fn page_of(host: &HostView) -> Markup {
    let dead: Vec<(String, Vec<_>)> = (host.config.queues.iter())
        .map(|q| (q.name.clone(), host.recent.of(&q.name)))
        .collect();
    let actions = host.config.admin_token.is_some();
    let views = page::Views {
        fleet: &views::fleet(host),
        queues: &views::queues(host),
        plugins: &views::plugins(host),
        schedules: &host.schedules.snapshot(),
        flow: &host.fair.busiest(FLOW_KEYS),
        dead: &dead,
    };
    page::render(&views, actions)
}

/// Which queue's dead letters `/api/dead-letters` is asked for.
#[derive(Debug, Default, Deserialize)]
struct OfQueue {
    #[serde(default)]
    queue: String,
}

/// A consumed queue's recent dead letters, or which queues there are.
async fn dead_letters(Serving(host): Serving, Query(of): Query<OfQueue>) -> Response {
    match views::dead_letters(&host, &of.queue) {
        Some(letters) => json(&letters),
        None => (
            StatusCode::NOT_FOUND,
            format!(
                "no consumed queue `{}`: ask /api/dead-letters?queue=NAME with one of {}\n",
                of.queue,
                queue_names(&host).join(", ")
            ),
        )
            .into_response(),
    }
}

fn json(value: &impl Serialize) -> Response {
    answer(
        StatusCode::OK,
        serde_json::to_value(value).unwrap_or_default(),
    )
}

fn queue_names(host: &HostView) -> Vec<String> {
    host.config.queues.iter().map(|q| q.name.clone()).collect()
}
