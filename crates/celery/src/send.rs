//! Celery tasks a handler sends: an outbox message to a queue its manifest lists under
//! `[outbox] celery` is a task, written by the handler as
//! `{"task": NAME, "args": [...], "kwargs": {...}, "countdown": SECS | "eta": ISO, "expires": SECS | ISO}`
//! and sent by the host as a Celery producer on its broker would (protocol 2, JSON; in kombu's
//! envelope on SQS, as AMQP properties and headers on RabbitMQ), so the Celery workers that
//! remain can run it.
//!
//! The task id is derived from the outbox message's own derived key (the consumed message's key
//! and the message's place in the outbox): a re-send after a crash sends the same task id, and
//! a caller can know it. The envelope is built at `outbox.send`, so a body that is not a task is
//! refused to the handler there.
//!
//! A consumed task's callbacks and chain are sent through the same
//! [`Request`], so every task qhost sends is written one way.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use qhost_message::rules::Envelope;
use qhost_message::{Attribute, wire};

use super::task::iso8601;

/// A Celery task as it travels: its body, and the attributes that carry AMQP's properties and
/// headers (none in kombu's envelope, which holds them in the body).
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    /// The message body.
    pub body: Vec<u8>,
    /// The attributes to send beside it.
    pub attributes: Vec<Attribute>,
}

/// The task id for the outbox message whose derived key is `derived`: a UUID's form of its
/// sha256.
pub fn task_id(derived: &str) -> String {
    let d = Sha256::digest(derived.as_bytes());
    let hex = hex::encode(&d[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A task to send: what a handler's outbox message or a consumed task's callback describes.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The task's registered name.
    pub name: String,
    /// Positional arguments (a list).
    pub args: Value,
    /// Keyword arguments (a dict).
    pub kwargs: Value,
    /// Not to run before (ISO 8601).
    pub eta: Option<String>,
    /// Not to run after (ISO 8601).
    pub expires: Option<String>,
    /// The workflow's first task and the task that sent this one (none for a handler's own).
    pub root_id: Option<String>,
    pub parent_id: Option<String>,
    /// The rest of a chain, carried on to the next task as Celery carries it (`null` if none).
    pub chain: Value,
}

impl Request {
    /// The task a handler's outbox message `body` describes; the error is for the handler.
    pub fn from_handler(body: &[u8]) -> Result<Request, String> {
        let what: Value = serde_json::from_slice(body)
            .map_err(|e| format!("a Celery queue's outbox message is a task as JSON: {e}"))?;
        let Value::Object(mut what) = what else {
            return Err("a Celery task is a JSON object with `task`, `args` and `kwargs`".into());
        };
        let name = match what.remove("task") {
            Some(Value::String(name)) if !name.is_empty() => name,
            _ => return Err("a Celery task needs its name as `task`".into()),
        };
        let args = list_or_empty(what.remove("args"), "args")?;
        let kwargs = dict_or_empty(what.remove("kwargs"), "kwargs")?;
        let (eta, expires) = schedule(&mut what)?;
        if let Some(other) = what.keys().next() {
            return Err(format!(
                "a Celery task has no `{other}` (task, args, kwargs, countdown, eta, expires)"
            ));
        }
        Ok(Request {
            name,
            args,
            kwargs,
            eta,
            expires,
            root_id: None,
            parent_id: None,
            chain: Value::Null,
        })
    }

    /// Celery's message for this task, sent to `queue` as task `id` (protocol 2, JSON), laid
    /// out as `envelope` says.
    pub fn encode(&self, id: &str, queue: &str, envelope: Envelope) -> Encoded {
        match envelope {
            Envelope::Kombu => Encoded {
                body: self.message(id, queue),
                attributes: Vec::new(),
            },
            Envelope::Amqp => {
                let text = |name: &str, value: &str| Attribute::string(name, value);
                Encoded {
                    body: self.body().into_bytes(),
                    attributes: vec![
                        text(wire::AMQP_CONTENT_TYPE, "application/json"),
                        text(wire::AMQP_CONTENT_ENCODING, "utf-8"),
                        text(wire::AMQP_CORRELATION_ID, id),
                        text(wire::AMQP_HEADERS, &self.headers(id).to_string()),
                    ],
                }
            }
        }
    }

    /// Celery's message for this task, sent to `queue` as task `id` (protocol 2, JSON, in
    /// kombu's SQS envelope).
    pub fn message(&self, id: &str, queue: &str) -> Vec<u8> {
        let envelope = json!({
            "body": STANDARD.encode(self.body()),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": self.headers(id),
            "properties": {
                "correlation_id": id,
                "reply_to": "",
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": uuid::Uuid::new_v4().to_string(),
            },
        });
        STANDARD.encode(envelope.to_string()).into_bytes()
    }

    /// Protocol 2's headers of this task as task `id`.
    fn headers(&self, id: &str) -> Value {
        let root_id = self.root_id.as_deref().unwrap_or(id);
        json!({
            "lang": "py", "task": self.name, "id": id, "shadow": null, "eta": self.eta,
            "expires": self.expires, "group": null, "group_index": null, "retries": 0,
            "timelimit": [null, null], "root_id": root_id, "parent_id": self.parent_id,
            "argsrepr": self.args.to_string(), "kwargsrepr": self.kwargs.to_string(),
            "origin": "qhost", "ignore_result": false, "replaced_task_nesting": 0,
            "stamped_headers": null, "stamps": {},
        })
    }

    /// Protocol 2's body: `[args, kwargs, embed]`, as JSON.
    fn body(&self) -> String {
        let embed =
            json!({"callbacks": null, "errbacks": null, "chain": self.chain, "chord": null});
        json!([self.args, self.kwargs, embed]).to_string()
    }
}

/// Celery's message for the task a handler's outbox `body` describes, sent to `queue` as task
/// `id` and laid out as `envelope` says; the error is for the handler.
pub fn task_message(
    body: &[u8],
    id: &str,
    queue: &str,
    envelope: Envelope,
) -> Result<Encoded, String> {
    Ok(Request::from_handler(body)?.encode(id, queue, envelope))
}

/// `args`: a list; absent or null is empty.
pub(super) fn list_or_empty(value: Option<Value>, field: &str) -> Result<Value, String> {
    match value {
        None | Some(Value::Null) => Ok(Value::Array(Vec::new())),
        Some(args @ Value::Array(_)) => Ok(args),
        Some(_) => Err(format!("a Celery task's `{field}` is a list")),
    }
}

/// `kwargs`: a dict; absent or null is empty.
pub(super) fn dict_or_empty(value: Option<Value>, field: &str) -> Result<Value, String> {
    match value {
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(kwargs @ Value::Object(_)) => Ok(kwargs),
        Some(_) => Err(format!("a Celery task's `{field}` is a dict")),
    }
}

/// Takes `countdown` or `eta`, and `expires`, out of `from`: when the task is due and when it
/// expires, as ISO 8601.
pub(super) fn schedule(
    from: &mut Map<String, Value>,
) -> Result<(Option<String>, Option<String>), String> {
    let now = SystemTime::now();
    let countdown = from.remove("countdown").filter(|v| !v.is_null());
    let eta = match (countdown, from.remove("eta").filter(|v| !v.is_null())) {
        (Some(_), Some(_)) => {
            return Err("a Celery task takes `countdown` or `eta`, not both".into());
        }
        (Some(secs), None) => Some(later(now, &secs, "countdown")?),
        (None, Some(Value::String(at))) => Some(at),
        (None, Some(_)) => return Err("a Celery task's `eta` is an ISO 8601 time".into()),
        (None, None) => None,
    };
    let expires = match from.remove("expires") {
        None | Some(Value::Null) => None,
        Some(Value::String(at)) => Some(at),
        Some(secs) => Some(later(now, &secs, "expires")?),
    };
    Ok((eta, expires))
}

/// `now` plus `secs` seconds, as ISO 8601.
fn later(now: SystemTime, secs: &Value, field: &str) -> Result<String, String> {
    let secs = (secs.as_f64())
        .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 365.0 * 86_400.0)
        .ok_or_else(|| format!("a Celery task's `{field}` is seconds from now (0 to a year)"))?;
    Ok(iso8601(now + Duration::from_secs_f64(secs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContentType, decode};

    #[test]
    fn a_task_a_handler_sends_is_read_back_as_celery_sent_it() {
        let id = task_id("p:k/0");
        assert_eq!(id.len(), 36);
        assert_eq!(id, task_id("p:k/0"), "a re-sent outbox sends the same id");
        let body =
            br#"{"task": "proj.tasks.add", "args": [1, 2], "kwargs": {"x": "y"}, "countdown": 60}"#;
        let raw = task_message(body, &id, "celery", Envelope::Kombu).unwrap();
        assert!(raw.attributes.is_empty());
        let task = decode(&raw.body, &[ContentType::Json]).unwrap();
        assert_eq!(
            (task.name.as_str(), task.id.as_str()),
            ("proj.tasks.add", id.as_str())
        );
        assert_eq!(
            (&task.args, &task.kwargs),
            (&json!([1, 2]), &json!({"x": "y"}))
        );
        let due = task.due_in(SystemTime::now()).expect("due later");
        assert!(
            due > Duration::from_secs(50) && due <= Duration::from_secs(60),
            "{due:?}"
        );
    }

    #[test]
    fn on_amqp_a_task_is_its_body_with_properties_and_headers_beside_it() {
        let body = br#"{"task": "proj.tasks.add", "args": [1, 2], "kwargs": {"x": "y"}}"#;
        let sent = task_message(body, "id-7", "celery", Envelope::Amqp).unwrap();
        let attr = |name: &str| {
            let found = sent.attributes.iter().find(|a| a.name == name);
            found.and_then(Attribute::text).map(String::from)
        };
        assert_eq!(
            attr(wire::AMQP_CONTENT_TYPE).as_deref(),
            Some("application/json")
        );
        assert_eq!(attr(wire::AMQP_CORRELATION_ID).as_deref(), Some("id-7"));
        let headers: Value = serde_json::from_str(&attr(wire::AMQP_HEADERS).unwrap()).unwrap();
        let Value::Object(headers) = headers else {
            panic!("{headers}")
        };
        let task = crate::decode_amqp(
            &sent.body,
            "application/json",
            headers,
            &[ContentType::Json],
        )
        .unwrap();
        assert_eq!(
            (task.name.as_str(), task.id.as_str(), &task.args),
            ("proj.tasks.add", "id-7", &json!([1, 2]))
        );
        assert!(
            sent.attributes.len() <= 4,
            "four attributes, whatever the headers"
        );
    }

    #[test]
    fn what_is_not_a_task_is_refused_to_the_handler() {
        let cases: [(&[u8], &str); 6] = [
            (b"send it", "is a task as JSON"),
            (b"[1]", "is a JSON object"),
            (br#"{"args": []}"#, "needs its name as `task`"),
            (br#"{"task": "t", "args": {}}"#, "`args` is a list"),
            (br#"{"task": "t", "countdown": 1, "eta": "x"}"#, "not both"),
            (br#"{"task": "t", "queue": "q"}"#, "has no `queue`"),
        ];
        for (body, says) in cases {
            let err = task_message(body, "id", "q", Envelope::Kombu).unwrap_err();
            assert!(
                err.contains(says),
                "{}: {err}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
