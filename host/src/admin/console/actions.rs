//! The console's actions. Each changes state, so each needs the admin token (`[admin] token`;
//! without one the console is read-only and every action is refused), and each goes through
//! the same code as its command:
//!
//! | action               | target            | as                                         |
//! |----------------------|-------------------|--------------------------------------------|
//! | `redrive`            | `queue[&message]` | `qhost dlq redrive` (a letter is deleted only once its copy is sent) |
//! | `purge-dead-letters` | `queue`           | `qhost purge` of the queue's dead-letter queue |
//! | `pause`, `resume`    | `queue`           | `qhost fleet pause|resume`: every host within a second |
//! | `promote`, `rollback`| `plugin`          | `qhost plugins promote|rollback`: every host within a second |
//!
//! Two doors, one action:
//! - `POST /api/ACTION?queue=NAME` (or `plugin=NAME`) with `Authorization: Bearer TOKEN`, for
//!   scripts; it answers JSON.
//! - `POST /actions/ACTION`, the page's forms: the same fields, and `token`, as form fields
//!   (the operator types the token into the page). The token travels in the request itself,
//!   never in a cookie, so a page elsewhere cannot forge the POST: it cannot know the token.

use axum::extract::{Form, Path, Query};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::{Deserialize, Serialize};

use super::super::HostView;
use super::super::serving::Serving;
use super::{Page, json};
use crate::config::QueueConfig;
use crate::dlq;

/// Dead letters one "redrive all" moves at most.
const REDRIVE_ALL_LIMIT: usize = 1000;

/// What an action is called in its paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Redrive,
    PurgeDeadLetters,
    Pause,
    Resume,
    Promote,
    Rollback,
}

impl Verb {
    const ALL: [Verb; 6] = [
        Verb::Redrive,
        Verb::PurgeDeadLetters,
        Verb::Pause,
        Verb::Resume,
        Verb::Promote,
        Verb::Rollback,
    ];

    fn name(self) -> &'static str {
        match self {
            Verb::Redrive => "redrive",
            Verb::PurgeDeadLetters => "purge-dead-letters",
            Verb::Pause => "pause",
            Verb::Resume => "resume",
            Verb::Promote => "promote",
            Verb::Rollback => "rollback",
        }
    }

    /// The action called `name` in a path.
    fn named(name: &str) -> Option<Verb> {
        Verb::ALL.into_iter().find(|v| v.name() == name)
    }
}

/// What the form and the API name: the form's fields, or the API's query string.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Request {
    queue: String,
    plugin: String,
    /// One dead letter to redrive; none (or empty) for all of them.
    message: Option<String>,
    /// The admin token (the API's comes in its `Authorization` header instead).
    token: Option<String>,
}

impl Request {
    /// The one dead letter it names, if it names one (an empty field names none).
    fn message(&self) -> Option<&str> {
        self.message.as_deref().filter(|m| !m.is_empty())
    }
}

/// A failed action's answer: its status and what to do, in words.
type Refusal = (StatusCode, String);

/// A redrive's outcome, as the API answers it.
#[derive(Debug, Serialize)]
struct Redriven {
    queue: String,
    moved: Vec<String>,
    left: Vec<(String, String)>,
}

/// Any other action's outcome, as the API answers it.
#[derive(Debug, Serialize)]
struct Done {
    action: &'static str,
    target: String,
    /// Whether it changed anything (pausing a paused queue does not).
    changed: bool,
    /// What happened, in words.
    message: String,
}

/// `POST /api/ACTION?queue=NAME` (or `plugin=NAME`), the token as a bearer: answers JSON.
pub(super) async fn by_api(
    Serving(host): Serving,
    Path(action): Path<String>,
    headers: HeaderMap,
    Query(request): Query<Request>,
) -> Response {
    let bearer = (headers.get(header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string());
    let request = Request {
        token: bearer,
        ..request
    };
    match acted(&host, &action, request, Door::Api).await {
        Ok(Acted::Done(done)) => json(&done),
        Ok(Acted::Redriven(outcome)) => json(&outcome),
        Err(refusal) => refusal.into_response(),
    }
}

/// `POST /actions/ACTION`, a form of the page's: answers a page that says what happened.
pub(super) async fn by_form(
    Serving(host): Serving,
    Path(action): Path<String>,
    Form(request): Form<Request>,
) -> Response {
    match acted(&host, &action, request, Door::Form).await {
        Ok(Acted::Done(done)) => Page(done_page(html! { (done.message) })).into_response(),
        Ok(Acted::Redriven(outcome)) => Page(done_page(redriven(&outcome))).into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

/// Which door a request came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Door {
    Api,
    Form,
}

/// What an action did.
enum Acted {
    Done(Done),
    Redriven(Redriven),
}

/// Does `action` as `request` asks, if its token is the admin token.
async fn acted(
    host: &HostView,
    action: &str,
    request: Request,
    door: Door,
) -> Result<Acted, Refusal> {
    let verb = Verb::named(action).ok_or_else(|| {
        let all: Vec<&str> = Verb::ALL.iter().map(|v| v.name()).collect();
        (
            StatusCode::NOT_FOUND,
            format!("not found: the actions are {}\n", all.join(", ")),
        )
    })?;
    refused(host, &request, door)?;
    if verb == Verb::Redrive {
        let queue = consumed(host, &request.queue)?;
        let outcome = redrive(host, queue, request.message()).await.map_err(|e| {
            let why = format!("the redrive failed: {e}\n");
            (StatusCode::SERVICE_UNAVAILABLE, why)
        })?;
        tracing::info!(
            queue = %outcome.queue, moved = outcome.moved.len(), left = outcome.left.len(),
            "console: redrove dead letters"
        );
        return Ok(Acted::Redriven(outcome));
    }
    let done = act(host, verb, &request).await?;
    tracing::info!(action = done.action, target = %done.target, changed = done.changed, "console: {}", done.message);
    Ok(Acted::Done(done))
}

/// Why the request may not act, if it may not: no token configured, or not the token.
fn refused(host: &HostView, request: &Request, door: Door) -> Result<(), Refusal> {
    let Some(expected) = &host.config.admin_token else {
        let why =
            "the console is read-only: set [admin] token in qhost.toml to allow its actions\n";
        return Err((StatusCode::FORBIDDEN, why.into()));
    };
    if (request.token.as_deref()).is_some_and(|t| expected.accepts(t)) {
        return Ok(());
    }
    let how = match door {
        Door::Api => "Authorization: Bearer TOKEN",
        Door::Form => "the form's token field",
    };
    let why = format!("refused: this action needs the admin token ({how})\n");
    Err((StatusCode::FORBIDDEN, why))
}

/// The consumed queue `name`, or the answer that there is none.
fn consumed<'a>(host: &'a HostView, name: &str) -> Result<&'a QueueConfig, Refusal> {
    (host.config.queues.iter())
        .find(|q| q.name == name)
        .ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                format!("no consumed queue `{name}`\n"),
            )
        })
}

/// Pause, resume, purge, promote or roll back.
async fn act(host: &HostView, verb: Verb, request: &Request) -> Result<Done, Refusal> {
    let failed = |e: anyhow::Error| {
        let why = format!("{} failed: {e:#}\n", verb.name());
        (StatusCode::SERVICE_UNAVAILABLE, why)
    };
    let (namespace, store) = (&host.config.namespace, host.store.as_ref());
    let (target, changed, message) = match verb {
        Verb::Pause | Verb::Resume => {
            let queue = &consumed(host, &request.queue)?.name;
            let pause = verb == Verb::Pause;
            let changed =
                crate::fleet::follow::set_paused(store, namespace, queue, pause, "console")
                    .await
                    .map_err(|e| failed(e.into()))?;
            let message = match (pause, changed) {
                (true, true) => {
                    format!("{queue} paused: every host stops receiving it within a second")
                }
                (true, false) => format!("{queue} was already paused"),
                (false, true) => {
                    format!("{queue} resumed: every host receives it again within a second")
                }
                (false, false) => format!("{queue} was not paused"),
            };
            (queue.clone(), changed, message)
        }
        Verb::PurgeDeadLetters => {
            let queue = consumed(host, &request.queue)?;
            let dlq = queue.dead_letter.as_str();
            let queues = crate::queues::Queues::open(&host.config, &[dlq])
                .await
                .map_err(failed)?;
            let purged = match queues.purge(dlq).await.map_err(failed)? {
                crate::source::Purged::Deleted(n) => format!("{n} dead letter(s) deleted"),
                crate::source::Purged::Requested => {
                    "purge requested (SQS deletes them within a minute)".to_string()
                }
            };
            let ids: Vec<String> = (host.recent.of(&queue.name).into_iter())
                .filter_map(|d| d.dead_letter_id)
                .collect();
            host.recent.forget(&queue.name, &ids);
            (dlq.to_string(), true, format!("{dlq}: {purged}"))
        }
        Verb::Promote | Verb::Rollback => {
            let plugin = request.plugin.as_str();
            let promote = verb == Verb::Promote;
            let after = crate::rollout::by_hand::decide_in(store, namespace, plugin, promote)
                .await
                .map_err(|e| (StatusCode::NOT_FOUND, format!("{e:#}\n")))?;
            let message = format!(
                "{plugin}: {} ({}); every host follows within a second",
                after.state.name(),
                after.reason
            );
            (plugin.to_string(), true, message)
        }
        Verb::Redrive => unreachable!("redrive answers on its own"),
    };
    Ok(Done {
        action: verb.name(),
        target,
        changed,
        message,
    })
}

async fn redrive(
    host: &HostView,
    queue: &QueueConfig,
    message: Option<&str>,
) -> Result<Redriven, crate::source::SourceError> {
    let source = host.source.as_ref();
    let (dlq, to) = (&queue.dead_letter, Some(queue.name.as_str()));
    let done = match message {
        Some(id) => dlq::redrive_message(source, dlq, to, id).await?,
        None => dlq::redrive(source, dlq, to, REDRIVE_ALL_LIMIT).await?,
    };
    let moved: Vec<String> = done.moved.into_iter().map(|(id, _)| id).collect();
    host.recent.forget(&queue.name, &moved);
    Ok(Redriven {
        queue: queue.name.clone(),
        moved,
        left: done.left,
    })
}

/// What a redrive did, as its page says it.
fn redriven(outcome: &Redriven) -> Markup {
    html! {
        span #redriven {
            (outcome.moved.len()) " dead letter(s) of " code { (outcome.queue) } " sent back to it."
        }
        ul {
            @for (id, why) in &outcome.left {
                li { code { (id) } ": " (why) }
            }
        }
    }
}

/// The page a form's action answers with: what happened, and the way back.
fn done_page(what: Markup) -> Markup {
    html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content="3;url=/";
                title { "qhost: done" }
            }
            body {
                p #done { (what) }
                p { a href="/" { "Back to the console" } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::extract::FromRequest as _;

    use super::*;

    async fn form(body: &'static str) -> Request {
        let request = axum::http::Request::post("/actions/redrive")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(body))
            .expect("a request");
        let Form(fields) = (Form::<Request>::from_request(request, &()).await).expect("decoded");
        fields
    }

    #[tokio::test]
    async fn a_form_s_fields_are_decoded() {
        let r = form("queue=jobs&message=&token=a%2Bb+c").await;
        assert_eq!(r.queue, "jobs");
        assert_eq!(r.message(), None, "an empty message means all");
        assert_eq!(r.token.as_deref(), Some("a+b c"));
        assert_eq!(form("queue=q&message=m-1").await.message(), Some("m-1"));
        assert_eq!(form("plugin=p&other=x").await.plugin, "p");
    }

    #[test]
    fn each_action_is_named_as_its_path_says() {
        assert_eq!(Verb::named("pause"), Some(Verb::Pause));
        assert_eq!(
            Verb::named("purge-dead-letters"),
            Some(Verb::PurgeDeadLetters)
        );
        assert_eq!(Verb::named("explode"), None);
        for verb in Verb::ALL {
            assert_eq!(Verb::named(verb.name()), Some(verb));
        }
    }

    #[test]
    fn a_redrive_s_page_escapes_what_it_shows() {
        let outcome = Redriven {
            queue: "jobs".into(),
            moved: vec!["a".into()],
            left: vec![("m<1>".into(), "gone & <b>".into())],
        };
        let page = done_page(redriven(&outcome)).into_string();
        assert!(
            page.contains("<span id=\"redriven\">1 dead letter(s) of <code>jobs</code>"),
            "{page}"
        );
        assert!(
            page.contains("<li><code>m&lt;1&gt;</code>: gone &amp; &lt;b&gt;</li>"),
            "{page}"
        );
        assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    }
}
