//! What the admin listener's routes share: the host they serve, once it is built, and the
//! extractor that hands it to a route ([`Serving`]), so no route checks for it by hand.

use std::sync::{Arc, OnceLock};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::HostView;

/// What every route reads: the host, once it is built.
pub(super) type Admin = Arc<OnceLock<HostView>>;

/// The host a route serves, or `503 starting` while its plugins load.
pub(super) struct Serving(pub(super) HostView);

impl FromRequestParts<Admin> for Serving {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(_: &mut Parts, host: &Admin) -> Result<Self, Self::Rejection> {
        match host.get() {
            Some(view) => Ok(Serving(view.clone())),
            None => Err((StatusCode::SERVICE_UNAVAILABLE, "starting\n")),
        }
    }
}

/// A JSON answer, a line of its own.
pub(super) fn answer(status: StatusCode, value: serde_json::Value) -> Response {
    let body = format!("{value}\n");
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
