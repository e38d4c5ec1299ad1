//! What became of a plugin's HTTP requests, for `qhost_http_requests_total`.

use std::sync::atomic::{AtomicU64, Ordering};

/// How one request ended (a response whose body is then cut off counts twice: once as
/// `sent` when its head arrived, and again as why its body was cut).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpResult {
    /// A response arrived (any status).
    Sent,
    /// Its origin is not in the plugin's grant.
    Denied,
    /// Its name resolved only to addresses the host keeps out.
    Prohibited,
    /// Over the plugin's requests per message.
    TooMany,
    /// Its response body passed the plugin's cap.
    TooLarge,
    /// It passed the handler's deadline.
    Timeout,
    /// DNS, connection, TLS or protocol failure.
    Failed,
}

impl HttpResult {
    const ALL: [HttpResult; 7] = [
        HttpResult::Sent,
        HttpResult::Denied,
        HttpResult::Prohibited,
        HttpResult::TooMany,
        HttpResult::TooLarge,
        HttpResult::Timeout,
        HttpResult::Failed,
    ];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            HttpResult::Sent => "sent",
            HttpResult::Denied => "denied",
            HttpResult::Prohibited => "prohibited",
            HttpResult::TooMany => "too_many",
            HttpResult::TooLarge => "too_large",
            HttpResult::Timeout => "timeout",
            HttpResult::Failed => "failed",
        }
    }
}

/// Counters per result, for one plugin version.
#[derive(Debug, Default)]
pub struct HttpCounts([AtomicU64; 7]);

impl HttpCounts {
    pub fn count(&self, result: HttpResult) {
        self.0[result as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Every result with its count, zeros included (a dashboard's rate needs the series).
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        HttpResult::ALL
            .iter()
            .map(|r| (r.name(), self.0[*r as usize].load(Ordering::Relaxed)))
            .collect()
    }
}
