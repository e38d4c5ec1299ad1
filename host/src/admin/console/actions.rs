//! The console's actions: redrive a queue's dead letters, or one of them. They change state,
//! so each needs the admin token (`[admin] token`; without one the console is read-only and
//! every action is refused), and goes through the same code as `qhost dlq redrive`: a dead
//! letter is deleted only once its copy is sent.
//!
//! Two doors, one action:
//! - `POST /api/redrive?queue=NAME[&message=ID]` with `Authorization: Bearer TOKEN`, for scripts;
//!   it answers JSON.
//! - `POST /actions/redrive`, the page's form: `queue`, `message` and `token` as form fields
//!   (the operator types the token into the page). The token travels in the request itself,
//!   never in a cookie, so a page elsewhere cannot forge the POST: it cannot know the token.

use serde::Serialize;

use super::super::HostView;
use super::Answer;
use super::page::escape;
use crate::config::QueueConfig;
use crate::dlq;

/// Dead letters one "redrive all" moves at most.
const REDRIVE_ALL_LIMIT: usize = 1000;

/// What the form and the API name.
#[derive(Debug, Default)]
struct Request {
    queue: String,
    message: Option<String>,
    token: Option<String>,
}

/// A redrive's outcome, as the API answers it.
#[derive(Debug, Serialize)]
struct Outcome {
    queue: String,
    moved: Vec<String>,
    left: Vec<(String, String)>,
}

/// The answer to a POST of `path`, if it is one of the console's.
pub(in super::super) async fn post(
    host: &HostView,
    path: &str,
    query: Option<&str>,
    bearer: Option<&str>,
    body: &[u8],
) -> Option<Answer> {
    let (request, api) = match path {
        "/api/redrive" => {
            let mut request = fields(query.unwrap_or_default().as_bytes());
            request.token = bearer.map(str::to_string);
            (request, true)
        }
        "/actions/redrive" => (fields(body), false),
        _ => return None,
    };
    let Some(expected) = &host.config.admin_token else {
        return Some(Answer::Forbidden(
            "the console is read-only: set [admin] token in qhost.toml to allow its actions\n"
                .into(),
        ));
    };
    if !request
        .token
        .as_deref()
        .is_some_and(|t| expected.accepts(t))
    {
        let how = if api {
            "Authorization: Bearer TOKEN"
        } else {
            "the form's token field"
        };
        return Some(Answer::Forbidden(format!(
            "refused: this action needs the admin token ({how})\n"
        )));
    }
    let Some(queue) = host.config.queues.iter().find(|q| q.name == request.queue) else {
        return Some(Answer::NotFound(format!(
            "no consumed queue `{}`\n",
            request.queue
        )));
    };
    let outcome = match redrive(host, queue, request.message.as_deref()).await {
        Ok(outcome) => outcome,
        Err(e) => return Some(Answer::Unavailable(format!("the redrive failed: {e}\n"))),
    };
    tracing::info!(
        queue = %outcome.queue, moved = outcome.moved.len(), left = outcome.left.len(),
        "console: redrove dead letters"
    );
    Some(if api {
        Answer::Json(serde_json::to_value(&outcome).unwrap_or_default())
    } else {
        Answer::Html(done_page(&outcome))
    })
}

/// The request's fields, from a form body or a query string.
fn fields(encoded: &[u8]) -> Request {
    let mut request = Request::default();
    for (name, value) in form_urlencoded::parse(encoded) {
        let value = value.into_owned();
        match &*name {
            "queue" => request.queue = value,
            "message" if !value.is_empty() => request.message = Some(value),
            "token" => request.token = Some(value),
            _ => {}
        }
    }
    request
}

async fn redrive(
    host: &HostView,
    queue: &QueueConfig,
    message: Option<&str>,
) -> Result<Outcome, crate::source::SourceError> {
    let source = host.source.as_ref();
    let (dlq, to) = (&queue.dead_letter, Some(queue.name.as_str()));
    let done = match message {
        Some(id) => dlq::redrive_message(source, dlq, to, id).await?,
        None => dlq::redrive(source, dlq, to, REDRIVE_ALL_LIMIT).await?,
    };
    let moved: Vec<String> = done.moved.into_iter().map(|(id, _)| id).collect();
    host.recent.forget(&queue.name, &moved);
    Ok(Outcome {
        queue: queue.name.clone(),
        moved,
        left: done.left,
    })
}

fn done_page(outcome: &Outcome) -> String {
    let left: String = (outcome.left.iter())
        .map(|(id, why)| format!("<li><code>{}</code>: {}</li>", escape(id), escape(why)))
        .collect();
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"3;url=/\"><title>qhost: redrive</title></head>\
         <body><p id=\"redriven\">{} dead letter(s) of <code>{}</code> sent back to it.</p>\
         <ul>{left}</ul><p><a href=\"/\">Back to the console</a></p></body></html>\n",
        outcome.moved.len(),
        escape(&outcome.queue),
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
    }
}
