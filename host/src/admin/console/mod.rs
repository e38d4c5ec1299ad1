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

pub(super) use actions::post;
pub(super) use page::POLICY;

use serde::Serialize;

use super::HostView;

/// The flow keys the console shows: this host's busiest.
const FLOW_KEYS: usize = 20;

/// A console answer: the content type and the body, or `None` for a path it does not serve.
pub(super) enum Answer {
    Html(String),
    Json(serde_json::Value),
    NotFound(String),
    /// An action without the admin token, or on a read-only console.
    Forbidden(String),
    /// An action whose backend failed.
    Unavailable(String),
}

/// What the console answers to a GET of `path` with `query`, if the path is the console's.
pub(super) fn get(host: &HostView, path: &str, query: Option<&str>) -> Option<Answer> {
    Some(match path {
        "/" => Answer::Html(page_of(host)),
        "/api/fleet" => json(&views::fleet(host)),
        "/api/queues" => json(&views::queues(host)),
        "/api/plugins" => json(&views::plugins(host)),
        "/api/schedules" => json(&host.schedules.snapshot()),
        "/api/flow" => json(&host.fair.busiest(FLOW_KEYS)),
        "/api/dead-letters" => {
            let queue = query_value(query, "queue").unwrap_or_default();
            match views::dead_letters(host, queue) {
                Some(letters) => json(&letters),
                None => Answer::NotFound(format!(
                    "no consumed queue `{queue}`: ask /api/dead-letters?queue=NAME with one of {}\n",
                    queue_names(host).join(", ")
                )),
            }
        }
        _ => return None,
    })
}

fn page_of(host: &HostView) -> String {
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

fn json(value: &impl Serialize) -> Answer {
    Answer::Json(serde_json::to_value(value).unwrap_or_default())
}

fn queue_names(host: &HostView) -> Vec<String> {
    host.config.queues.iter().map(|q| q.name.clone()).collect()
}

/// The value of `name` in a query string (queue names need no decoding: SQS allows only
/// letters, digits, `-`, `_` and a `.fifo` suffix).
fn query_value<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    (query?.split('&')).find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_value_is_found_by_its_name() {
        assert_eq!(query_value(Some("queue=jobs"), "queue"), Some("jobs"));
        assert_eq!(
            query_value(Some("x=1&queue=a.fifo"), "queue"),
            Some("a.fifo")
        );
        assert_eq!(query_value(Some("queues=a"), "queue"), None);
        assert_eq!(query_value(None, "queue"), None);
    }
}
