//! Celery's task protocol: version 2 (the task's name, id and schedule in the message headers,
//! the body `[args, kwargs, embed]`) and version 1 (everything in one body dict), read into one
//! [`Task`].

use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use serde_json::{Map, Value, json};

use super::DecodeError;
use qhost_message::Attribute;

/// A Celery task as qhost runs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    /// The task's registered name (`proj.tasks.send_reminder`).
    pub name: String,
    /// The task id: the same on every copy of one publish, and on its retries.
    pub id: String,
    /// Positional arguments.
    pub args: Value,
    /// Keyword arguments.
    pub kwargs: Value,
    /// How many times it was retried before this publish.
    pub retries: u64,
    /// Not to run before this time (`eta`, or `countdown` from the send).
    pub eta: Option<Stamp>,
    /// Not to run after this time.
    pub expires: Option<Stamp>,
    /// The hard and soft time limits, in seconds, when the sender set them.
    pub time_limit: (Option<f64>, Option<f64>),
    /// The workflow's first task, the task that sent this one, and its group.
    pub root_id: Option<String>,
    pub parent_id: Option<String>,
    pub group: Option<String>,
    /// Whether the sender wants no result stored.
    pub ignore_result: bool,
    /// The protocol version it came in (1 or 2).
    pub protocol: u8,
    /// What it asks to happen after it runs.
    pub links: Links,
}

/// What a task asks to happen after it runs: protocol 2's embed (`callbacks`, `errbacks`,
/// `chain`, `chord`), protocol 1's `callbacks`, `errbacks` and `chord`. The signatures are kept
/// as the producer wrote them, and read where the follow-ups are sent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Links {
    /// Signatures applied on success (`link=`).
    pub callbacks: Vec<Value>,
    /// The rest of the chain, the next task last.
    pub chain: Vec<Value>,
    /// Whether it has signatures to apply on failure (`link_error=`).
    pub errbacks: bool,
    /// Whether it is part of a chord.
    pub chord: bool,
}

impl Links {
    /// The links in `from` (an embed dict, or a protocol 1 body); what is not a list of them
    /// counts as none.
    fn of(from: Option<&Map<String, Value>>) -> Links {
        let list = |field: &str| match from.and_then(|f| f.get(field)) {
            Some(Value::Array(items)) => items.clone(),
            _ => Vec::new(),
        };
        let field = |name: &str| from.and_then(|f| f.get(name));
        Links {
            callbacks: list("callbacks"),
            chain: list("chain"),
            errbacks: matches!(field("errbacks"), Some(Value::Array(e)) if !e.is_empty()),
            chord: field("chord").is_some_and(|v| !v.is_null()),
        }
    }
}

/// A time as the message wrote it, and the instant it names.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamp {
    /// The ISO 8601 text.
    pub text: String,
    /// The instant (a time without an offset is UTC, Celery's default).
    pub at: Timestamp,
}

impl Task {
    /// The idempotency key: the task id, so every copy of a publish runs once. A retry that
    /// Celery republished (same id, `retries` one higher) is a publish of its own, so from the
    /// first retry on the key carries the count: `ID/retry-N`. Copies of the retry are still one
    /// run, and a retry is never taken for a duplicate of the run that asked for it.
    pub fn key(&self) -> String {
        match self.retries {
            0 => self.id.clone(),
            n => format!("{}/retry-{n}", self.id),
        }
    }

    /// How long until the task is due, if it is not yet.
    pub fn due_in(&self, now: SystemTime) -> Option<Duration> {
        let eta = self.eta.as_ref()?;
        let now = instant(now);
        (eta.at > now).then(|| eta.at.duration_since(now).unsigned_abs())
    }

    /// Whether the task expired before `now`.
    pub fn expired(&self, now: SystemTime) -> bool {
        self.expires.as_ref().is_some_and(|e| e.at <= instant(now))
    }

    /// The body the handler is given: the task as one JSON object.
    pub fn handler_body(&self) -> Vec<u8> {
        let stamp = |s: &Option<Stamp>| s.as_ref().map(|s| s.text.clone());
        let body = json!({
            "task": self.name,
            "id": self.id,
            "args": self.args,
            "kwargs": self.kwargs,
            "retries": self.retries,
            "eta": stamp(&self.eta),
            "expires": stamp(&self.expires),
            "root_id": self.root_id,
            "parent_id": self.parent_id,
            "group": self.group,
            "ignore_result": self.ignore_result,
            "protocol": self.protocol,
        });
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The attributes the handler is given beside the message's own: the task's name, id and
    /// retries.
    pub fn attributes(&self) -> [Attribute; 3] {
        [
            Attribute::string("celery-task", &self.name),
            Attribute::string("celery-id", &self.id),
            Attribute::number("celery-retries", self.retries),
        ]
    }
}

/// `at` as Celery writes times: ISO 8601 in UTC with microseconds and the offset (`+00:00`).
pub fn iso8601(at: SystemTime) -> String {
    let at = instant(at).to_zoned(TimeZone::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}+00:00",
        at.year(),
        at.month(),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.subsec_nanosecond() / 1000
    )
}

/// A system time as an instant (one outside jiff's range, years -9999 to 9999, is the
/// nearest end).
fn instant(at: SystemTime) -> Timestamp {
    Timestamp::try_from(at).unwrap_or(match at < SystemTime::UNIX_EPOCH {
        true => Timestamp::MIN,
        false => Timestamp::MAX,
    })
}

/// Reads a task from kombu's headers and its decoded body.
pub(super) fn read(headers: Map<String, Value>, body: Value) -> Result<Task, DecodeError> {
    if headers.contains_key("task") {
        version_2(headers, body)
    } else {
        version_1(body)
    }
}

/// Protocol 2: the headers name and schedule the task; the body is `[args, kwargs, embed]`.
fn version_2(headers: Map<String, Value>, body: Value) -> Result<Task, DecodeError> {
    let Value::Array(parts) = body else {
        return Err(protocol("a protocol 2 body is [args, kwargs, embed]"));
    };
    let mut parts = parts.into_iter();
    let args = arguments(parts.next(), "args")?;
    let kwargs = arguments(parts.next(), "kwargs")?;
    let links = Links::of(parts.next().as_ref().and_then(Value::as_object));
    fields(
        &headers,
        Call {
            args,
            kwargs,
            links,
        },
        2,
    )
}

/// Protocol 1: one body dict holds the task, its arguments and schedule.
fn version_1(body: Value) -> Result<Task, DecodeError> {
    let Value::Object(mut fields_of) = body else {
        return Err(protocol(
            "neither protocol 2 headers (no `task` header) nor a protocol 1 body dict",
        ));
    };
    let args = arguments(fields_of.remove("args"), "args")?;
    let kwargs = arguments(fields_of.remove("kwargs"), "kwargs")?;
    if let Some(group) = fields_of.remove("taskset") {
        fields_of.entry("group").or_insert(group);
    }
    let links = Links::of(Some(&fields_of));
    fields(
        &fields_of,
        Call {
            args,
            kwargs,
            links,
        },
        1,
    )
}

/// What a task is called with, read from its body: its arguments and what runs after it.
struct Call {
    args: Value,
    kwargs: Value,
    links: Links,
}

/// The task of protocol `version`, its fields from `from` (protocol 2's headers, or protocol
/// 1's body) and called with `call`.
fn fields(from: &Map<String, Value>, call: Call, version: u8) -> Result<Task, DecodeError> {
    let Call {
        args,
        kwargs,
        links,
    } = call;
    let name = text(from, "task")?.ok_or_else(|| protocol("no task name (`task`)"))?;
    let id = text(from, "id")?.ok_or_else(|| protocol("no task id (`id`)"))?;
    if name.is_empty() || id.is_empty() {
        return Err(protocol("the task name and id must not be empty"));
    }
    let retries = match from.get("retries") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| protocol("`retries` is not a count"))?,
    };
    Ok(Task {
        name,
        id,
        args,
        kwargs,
        retries,
        eta: stamp(from, "eta")?,
        expires: stamp(from, "expires")?,
        time_limit: time_limit(from.get("timelimit"))?,
        root_id: text(from, "root_id")?,
        parent_id: text(from, "parent_id")?,
        group: text(from, "group")?,
        ignore_result: from
            .get("ignore_result")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        protocol: version,
        links,
    })
}

/// `args` (a list) or `kwargs` (a dict); absent or null is empty.
fn arguments(value: Option<Value>, what: &str) -> Result<Value, DecodeError> {
    let positional = what == "args";
    match value {
        None | Some(Value::Null) if positional => Ok(Value::Array(Vec::new())),
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(v) if (positional && v.is_array()) || (!positional && v.is_object()) => Ok(v),
        Some(v) => Err(protocol(&format!("`{what}` is a {}", kind(&v)))),
    }
}

/// A field that is a string when present.
fn text(from: &Map<String, Value>, field: &str) -> Result<Option<String>, DecodeError> {
    match from.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(protocol(&format!(
            "`{field}` is a {}, not a string",
            kind(other)
        ))),
    }
}

/// An ISO 8601 time field.
fn stamp(from: &Map<String, Value>, field: &str) -> Result<Option<Stamp>, DecodeError> {
    let Some(text) = text(from, field)? else {
        return Ok(None);
    };
    let at = (text.parse::<Timestamp>())
        .or_else(|_| {
            let civil = text.parse::<DateTime>()?;
            civil.to_zoned(TimeZone::UTC).map(|t| t.timestamp())
        })
        .map_err(|e| protocol(&format!("`{field}` `{text}` is not an ISO 8601 time: {e}")))?;
    Ok(Some(Stamp { text, at }))
}

/// `timelimit`: `[hard, soft]` seconds, each null when unset.
fn time_limit(value: Option<&Value>) -> Result<(Option<f64>, Option<f64>), DecodeError> {
    let limit = |v: Option<&Value>| match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => (v.as_f64())
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Some)
            .ok_or_else(|| protocol("`timelimit` holds something other than positive seconds")),
    };
    match value {
        None | Some(Value::Null) => Ok((None, None)),
        Some(Value::Array(pair)) if pair.len() <= 2 => {
            Ok((limit(pair.first())?, limit(pair.get(1))?))
        }
        Some(_) => Err(protocol("`timelimit` is not [hard, soft]")),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

fn protocol(why: &str) -> DecodeError {
    DecodeError::Protocol(why.to_string())
}
