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

use serde::Serialize;

use super::super::HostView;
use super::Answer;
use super::text::escape;
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

    /// The action at `path` and whether it came through the API door.
    fn at(path: &str) -> Option<(Verb, bool)> {
        let (rest, api) = match (path.strip_prefix("/api/"), path.strip_prefix("/actions/")) {
            (Some(rest), _) => (rest, true),
            (None, Some(rest)) => (rest, false),
            (None, None) => return None,
        };
        Verb::ALL
            .into_iter()
            .find(|v| v.name() == rest)
            .map(|v| (v, api))
    }
}

/// What the form and the API name.
#[derive(Debug, Default)]
struct Request {
    queue: String,
    plugin: String,
    message: Option<String>,
    token: Option<String>,
}

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

/// The answer to a POST of `path`, if it is one of the console's.
pub(in super::super) async fn post(
    host: &HostView,
    path: &str,
    query: Option<&str>,
    bearer: Option<&str>,
    body: &[u8],
) -> Option<Answer> {
    let (verb, api) = Verb::at(path)?;
    let request = if api {
        Request {
            token: bearer.map(str::to_string),
            ..fields(query.unwrap_or_default().as_bytes())
        }
    } else {
        fields(body)
    };
    if let Some(refused) = refused(host, &request, api) {
        return Some(refused);
    }
    Some(match verb {
        Verb::Redrive => match consumed(host, &request.queue) {
            Ok(queue) => redrive_answer(host, queue, request.message.as_deref(), api).await,
            Err(not_found) => not_found,
        },
        _ => match act(host, verb, &request).await {
            Ok(done) => {
                tracing::info!(action = done.action, target = %done.target, changed = done.changed, "console: {}", done.message);
                if api {
                    Answer::Json(serde_json::to_value(&done).unwrap_or_default())
                } else {
                    Answer::Html(done_page(&escape(&done.message)))
                }
            }
            Err(answer) => answer,
        },
    })
}

/// Why the request may not act, if it may not: no token configured, or not the token.
fn refused(host: &HostView, request: &Request, api: bool) -> Option<Answer> {
    let Some(expected) = &host.config.admin_token else {
        return Some(Answer::Forbidden(
            "the console is read-only: set [admin] token in qhost.toml to allow its actions\n"
                .into(),
        ));
    };
    if (request.token.as_deref()).is_some_and(|t| expected.accepts(t)) {
        return None;
    }
    let how = if api {
        "Authorization: Bearer TOKEN"
    } else {
        "the form's token field"
    };
    Some(Answer::Forbidden(format!(
        "refused: this action needs the admin token ({how})\n"
    )))
}

/// The consumed queue `name`, or the answer that there is none.
fn consumed<'a>(host: &'a HostView, name: &str) -> Result<&'a QueueConfig, Answer> {
    (host.config.queues.iter())
        .find(|q| q.name == name)
        .ok_or_else(|| Answer::NotFound(format!("no consumed queue `{name}`\n")))
}

/// Pause, resume, purge, promote or roll back.
async fn act(host: &HostView, verb: Verb, request: &Request) -> Result<Done, Answer> {
    let failed = |e: anyhow::Error| Answer::Unavailable(format!("{} failed: {e:#}\n", verb.name()));
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
                .map_err(|e| Answer::NotFound(format!("{e:#}\n")))?;
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

/// The request's fields, from a form body or a query string.
fn fields(encoded: &[u8]) -> Request {
    let mut request = Request::default();
    for (name, value) in form_urlencoded::parse(encoded) {
        let value = value.into_owned();
        match &*name {
            "queue" => request.queue = value,
            "plugin" => request.plugin = value,
            "message" if !value.is_empty() => request.message = Some(value),
            "token" => request.token = Some(value),
            _ => {}
        }
    }
    request
}

async fn redrive_answer(
    host: &HostView,
    queue: &QueueConfig,
    message: Option<&str>,
    api: bool,
) -> Answer {
    let outcome = match redrive(host, queue, message).await {
        Ok(outcome) => outcome,
        Err(e) => return Answer::Unavailable(format!("the redrive failed: {e}\n")),
    };
    tracing::info!(
        queue = %outcome.queue, moved = outcome.moved.len(), left = outcome.left.len(),
        "console: redrove dead letters"
    );
    if api {
        return Answer::Json(serde_json::to_value(&outcome).unwrap_or_default());
    }
    let left: String = (outcome.left.iter())
        .map(|(id, why)| format!("<li><code>{}</code>: {}</li>", escape(id), escape(why)))
        .collect();
    Answer::Html(done_page(&format!(
        "<span id=\"redriven\">{} dead letter(s) of <code>{}</code> sent back to it.</span><ul>{left}</ul>",
        outcome.moved.len(),
        escape(&outcome.queue),
    )))
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

/// The page a form's action answers with: what happened (`html`, escaped by the caller), and
/// the way back.
fn done_page(html: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"3;url=/\"><title>qhost: done</title></head>\
         <body><p id=\"done\">{html}</p><p><a href=\"/\">Back to the console</a></p></body></html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_s_fields_are_decoded() {
        let r = fields(b"queue=jobs&message=&token=a%2Bb+c");
        assert_eq!(r.queue, "jobs");
        assert_eq!(r.message, None, "an empty message means all");
        assert_eq!(r.token.as_deref(), Some("a+b c"));
        assert_eq!(
            fields(b"queue=q&message=m-1").message.as_deref(),
            Some("m-1")
        );
        assert_eq!(fields(b"plugin=p").plugin, "p");
    }

    #[test]
    fn each_action_has_an_api_door_and_a_form_door() {
        assert_eq!(Verb::at("/api/pause"), Some((Verb::Pause, true)));
        assert_eq!(
            Verb::at("/actions/purge-dead-letters"),
            Some((Verb::PurgeDeadLetters, false))
        );
        assert_eq!(Verb::at("/api/explode"), None);
        assert_eq!(Verb::at("/pause"), None);
    }
}
