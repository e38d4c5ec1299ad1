//! What a step must come to, and how what it came to is compared: each difference is one line
//! naming the field (`outcome`, `outbox[0].json/to`, `state.reminded/alice…`, `http[1]`), what
//! was expected and what came, so a failing case reads as a diff.
//!
//! Matching rules, chosen so a test says what matters and no more:
//! - `outcome` is exact; `retry-secs` and `reason` (a regular expression) narrow it.
//! - `outbox` and `http`, when given, are the whole list in order; each entry's `json` is a
//!   subset (every field it names must be there and equal; arrays whole), `body` exact,
//!   `attributes` and `headers` a subset (header names in any case).
//! - `state`, when given, is every write the run would commit (`{}`: none).
//! - `result` is the result value as JSON, exact.
//! - `logs` are regular expressions, each matching some line `LEVEL message`.
//! - A request the world had no canned answer for is always a difference.

use std::collections::BTreeMap;

use regex_lite::Regex;
use serde::Deserialize;

use crate::kv::{Op, StateCommit};
use crate::message::{Attribute, AttributeValue, Outgoing};
use crate::runtime::world::{Exchange, GuestLog};

/// What a step must come to, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct ExpectRaw {
    outcome: Option<String>,
    retry_secs: Option<u32>,
    reason: Option<String>,
    outbox: Option<Vec<OutgoingRaw>>,
    state: Option<BTreeMap<String, BTreeMap<String, toml::Value>>>,
    http: Option<Vec<RequestRaw>>,
    result: Option<toml::Value>,
    logs: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct OutgoingRaw {
    queue: Option<String>,
    body: Option<String>,
    json: Option<toml::Value>,
    #[serde(default)]
    attributes: BTreeMap<String, String>,
    delay_seconds: Option<u32>,
    group: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RequestRaw {
    method: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
    json: Option<toml::Value>,
}

/// The outcomes a step can come to, as a test names them.
pub(crate) const OUTCOMES: [&str; 11] = [
    "ack",
    "retry",
    "reject",
    "trap",
    "timeout",
    "memory-limit",
    "duplicate",
    "dead-letter",
    "put-back",
    "expired",
    "error",
];

/// What a step must come to, checked.
#[derive(Debug)]
pub(crate) struct Expect {
    outcome: String,
    retry_secs: Option<u32>,
    reason: Option<Regex>,
    outbox: Option<Vec<ExpectedOutgoing>>,
    state: Option<BTreeMap<(String, String), Op>>,
    http: Option<Vec<ExpectedRequest>>,
    result: Option<serde_json::Value>,
    logs: Vec<Regex>,
}

#[derive(Debug)]
struct ExpectedOutgoing {
    queue: Option<String>,
    body: Option<Body>,
    attributes: BTreeMap<String, String>,
    delay_seconds: Option<u32>,
    group: Option<String>,
}

#[derive(Debug)]
struct ExpectedRequest {
    method: Option<String>,
    url: Option<String>,
    headers: BTreeMap<String, String>,
    body: Option<Body>,
}

#[derive(Debug)]
enum Body {
    Exact(String),
    Json(serde_json::Value),
}

/// What a step came to.
#[derive(Debug, Default)]
pub(crate) struct Got {
    /// The outcome, as a test names it.
    pub(crate) outcome: String,
    /// Its retry delay, for a retry.
    pub(crate) retry_secs: Option<u32>,
    /// Its reason, for a reject, a failure or a host's refusal.
    pub(crate) reason: Option<String>,
    /// What it would send.
    pub(crate) outbox: Vec<Outgoing>,
    /// The writes it would commit, by bucket (the plugin's name for it) and key.
    pub(crate) state: BTreeMap<(String, String), Op>,
    /// Its HTTP requests.
    pub(crate) http: Vec<Exchange>,
    /// Its result value.
    pub(crate) result: Option<String>,
    /// What it logged.
    pub(crate) logs: Vec<GuestLog>,
}

impl Got {
    /// The writes of `state` by the plugin's own bucket names (`NS:kv:{PLUGIN/BUCKET}`).
    pub(crate) fn writes_of(state: &StateCommit) -> BTreeMap<(String, String), Op> {
        let mut writes = BTreeMap::new();
        for bucket in &state.buckets {
            let name = (bucket.bucket.rsplit_once('/'))
                .map_or(bucket.bucket.as_str(), |(_, b)| b.trim_end_matches('}'));
            for (key, op) in &bucket.writes {
                writes.insert((name.to_string(), key.clone()), op.clone());
            }
        }
        writes
    }
}

impl Expect {
    /// Checks what was written; an error names the field under `expect`.
    pub(crate) fn check(raw: ExpectRaw) -> Result<Expect, String> {
        let outcome = raw
            .outcome
            .ok_or("outcome: say what the step comes to (ack, retry, …)")?;
        if !OUTCOMES.contains(&outcome.as_str()) {
            return Err(format!(
                "outcome: `{outcome}` is not one of {}",
                OUTCOMES.join(", ")
            ));
        }
        if raw.retry_secs.is_some() && outcome != "retry" {
            return Err(format!(
                "retry-secs: the outcome is `{outcome}`, not `retry`"
            ));
        }
        let reason = (raw.reason.as_deref())
            .map(|r| pattern(r).map_err(|e| format!("reason: {e}")))
            .transpose()?;
        let mut outbox = None;
        if let Some(list) = raw.outbox {
            let mut checked = Vec::new();
            for (i, o) in list.into_iter().enumerate() {
                let body = body(o.body, o.json).map_err(|e| format!("outbox[{i}]: {e}"))?;
                checked.push(ExpectedOutgoing {
                    queue: o.queue,
                    body,
                    attributes: o.attributes,
                    delay_seconds: o.delay_seconds,
                    group: o.group,
                });
            }
            outbox = Some(checked);
        }
        let state = raw.state.map(state).transpose()?;
        let mut http = None;
        if let Some(list) = raw.http {
            let mut checked = Vec::new();
            for (i, r) in list.into_iter().enumerate() {
                let body = body(r.body, r.json).map_err(|e| format!("http[{i}]: {e}"))?;
                checked.push(ExpectedRequest {
                    method: r.method.map(|m| m.to_ascii_uppercase()),
                    url: r.url,
                    headers: (r.headers.into_iter())
                        .map(|(k, v)| (k.to_ascii_lowercase(), v))
                        .collect(),
                    body,
                });
            }
            http = Some(checked);
        }
        let mut logs = Vec::new();
        for (i, log) in raw.logs.unwrap_or_default().iter().enumerate() {
            logs.push(pattern(log).map_err(|e| format!("logs[{i}]: {e}"))?);
        }
        Ok(Expect {
            outcome,
            retry_secs: raw.retry_secs,
            reason,
            outbox,
            state,
            http,
            result: raw.result.as_ref().map(json_of),
            logs,
        })
    }

    /// Every way `got` differs from this, one line each; none: it passed.
    pub(crate) fn compare(&self, got: &Got) -> Vec<String> {
        let mut diffs = Vec::new();
        self.compare_outcome(got, &mut diffs);
        for (i, request) in got.http.iter().enumerate() {
            if !request.answered {
                diffs.push(format!(
                    "http[{i}]: {} {} has no canned answer (add it to [[world.http]])",
                    request.method, request.url
                ));
            }
        }
        if let Some(outbox) = &self.outbox {
            compare_outbox(outbox, &got.outbox, &mut diffs);
        }
        if let Some(state) = &self.state {
            compare_state(state, &got.state, &mut diffs);
        }
        if let Some(http) = &self.http {
            compare_http(http, &got.http, &mut diffs);
        }
        if let Some(expected) = &self.result {
            let got_value = (got.result.as_deref()).map(serde_json::from_str::<serde_json::Value>);
            match got_value {
                Some(Ok(value)) if &value == expected => {}
                Some(Ok(value)) => diffs.push(format!("result: expected {expected}, got {value}")),
                Some(Err(_)) | None => diffs.push(format!("result: expected {expected}, got none")),
            }
        }
        for pattern in &self.logs {
            let lines = got
                .logs
                .iter()
                .map(|l| format!("{} {}", l.level, l.message));
            if !lines.into_iter().any(|line| pattern.is_match(&line)) {
                let logged = (got.logs.iter())
                    .map(|l| format!("{} {}", l.level, l.message))
                    .collect::<Vec<_>>();
                diffs.push(format!(
                    "logs: no line matches /{pattern}/ (logged: {})",
                    if logged.is_empty() {
                        "nothing".to_string()
                    } else {
                        format!("{logged:?}")
                    }
                ));
            }
        }
        diffs
    }

    fn compare_outcome(&self, got: &Got, diffs: &mut Vec<String>) {
        let shown = match &got.reason {
            Some(reason) => format!("{}: {reason}", got.outcome),
            None => match got.retry_secs {
                Some(secs) => format!("retry after {secs} s"),
                None => got.outcome.clone(),
            },
        };
        if got.outcome != self.outcome {
            diffs.push(format!("outcome: expected {}, got {shown}", self.outcome));
            return;
        }
        if let Some(secs) = self.retry_secs
            && got.retry_secs != Some(secs)
        {
            diffs.push(format!("retry-secs: expected {secs}, got {shown}"));
        }
        if let Some(pattern) = &self.reason {
            let reason = got.reason.as_deref().unwrap_or("");
            if !pattern.is_match(reason) {
                diffs.push(format!("reason: expected /{pattern}/, got {reason:?}"));
            }
        }
    }
}

fn compare_outbox(expected: &[ExpectedOutgoing], got: &[Outgoing], diffs: &mut Vec<String>) {
    if expected.len() != got.len() {
        let queues: Vec<&str> = got.iter().map(|m| m.queue.as_str()).collect();
        diffs.push(format!(
            "outbox: expected {} message(s), got {} {queues:?}",
            expected.len(),
            got.len()
        ));
    }
    for (i, (want, msg)) in expected.iter().zip(got).enumerate() {
        let at = format!("outbox[{i}]");
        if let Some(queue) = &want.queue
            && queue != &msg.queue
        {
            diffs.push(format!(
                "{at}.queue: expected {queue:?}, got {:?}",
                msg.queue
            ));
        }
        if let Some(body) = &want.body {
            compare_body(&at, body, &msg.body, diffs);
        }
        for (name, value) in &want.attributes {
            let found = (msg.attributes.iter()).find(|a| &a.name == name);
            match found.map(attribute_text) {
                Some(text) if &text == value => {}
                Some(text) => diffs.push(format!(
                    "{at}.attributes.{name}: expected {value:?}, got {text:?}"
                )),
                None => diffs.push(format!(
                    "{at}.attributes.{name}: expected {value:?}, got none"
                )),
            }
        }
        if let Some(delay) = want.delay_seconds
            && delay != msg.delay_seconds
        {
            diffs.push(format!(
                "{at}.delay-seconds: expected {delay}, got {}",
                msg.delay_seconds
            ));
        }
        if want.group.is_some() && want.group != msg.group_id {
            diffs.push(format!(
                "{at}.group: expected {:?}, got {:?}",
                want.group, msg.group_id
            ));
        }
    }
}

fn attribute_text(attribute: &Attribute) -> String {
    match &attribute.value {
        AttributeValue::String(text) | AttributeValue::Number(text) => text.clone(),
        AttributeValue::Binary(bytes) => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(bytes)
        }
    }
}

fn compare_state(
    expected: &BTreeMap<(String, String), Op>,
    got: &BTreeMap<(String, String), Op>,
    diffs: &mut Vec<String>,
) {
    for ((bucket, key), op) in expected {
        let at = format!("state.{bucket}/{key}");
        match got.get(&(bucket.clone(), key.clone())) {
            Some(written) if written == op => {}
            Some(written) => diffs.push(format!(
                "{at}: expected {}, got {}",
                shown_op(op),
                shown_op(written)
            )),
            None => diffs.push(format!("{at}: expected {}, not written", shown_op(op))),
        }
    }
    for ((bucket, key), op) in got {
        if !expected.contains_key(&(bucket.clone(), key.clone())) {
            diffs.push(format!(
                "state.{bucket}/{key}: not expected, written {}",
                shown_op(op)
            ));
        }
    }
}

fn shown_op(op: &Op) -> String {
    match op {
        Op::Set { value } => format!("{:?}", String::from_utf8_lossy(value)),
        Op::Delete => "a delete".into(),
        Op::Add { delta } => format!("an increment by {delta}"),
    }
}

fn compare_http(expected: &[ExpectedRequest], got: &[Exchange], diffs: &mut Vec<String>) {
    if expected.len() != got.len() {
        let made: Vec<String> = got
            .iter()
            .map(|r| format!("{} {}", r.method, r.url))
            .collect();
        diffs.push(format!(
            "http: expected {} request(s), got {} {made:?}",
            expected.len(),
            got.len()
        ));
    }
    for (i, (want, request)) in expected.iter().zip(got).enumerate() {
        let at = format!("http[{i}]");
        if let Some(method) = &want.method
            && method != &request.method
        {
            diffs.push(format!(
                "{at}.method: expected {method}, got {}",
                request.method
            ));
        }
        if let Some(url) = &want.url
            && url != &request.url
        {
            diffs.push(format!("{at}.url: expected {url}, got {}", request.url));
        }
        for (name, value) in &want.headers {
            let found = (request.headers.iter()).find(|(n, _)| n == name);
            match found {
                Some((_, text)) if text == value => {}
                Some((_, text)) => diffs.push(format!(
                    "{at}.headers.{name}: expected {value:?}, got {text:?}"
                )),
                None => diffs.push(format!("{at}.headers.{name}: expected {value:?}, got none")),
            }
        }
        if let Some(body) = &want.body {
            compare_body(&at, body, &request.body, diffs);
        }
    }
}

fn compare_body(at: &str, want: &Body, got: &[u8], diffs: &mut Vec<String>) {
    match want {
        Body::Exact(text) => {
            if text.as_bytes() != got {
                diffs.push(format!(
                    "{at}.body: expected {text:?}, got {:?}",
                    String::from_utf8_lossy(got)
                ));
            }
        }
        Body::Json(value) => match serde_json::from_slice::<serde_json::Value>(got) {
            Ok(got) => subset(&format!("{at}.json"), value, &got, diffs),
            Err(_) => diffs.push(format!(
                "{at}.json: expected JSON, got {:?}",
                String::from_utf8_lossy(got)
            )),
        },
    }
}

/// Where `got` does not hold everything `want` names: objects by field, arrays whole.
fn subset(at: &str, want: &serde_json::Value, got: &serde_json::Value, diffs: &mut Vec<String>) {
    use serde_json::Value;
    match (want, got) {
        (Value::Object(want), Value::Object(got)) => {
            for (field, value) in want {
                let path = format!("{at}/{field}");
                match got.get(field) {
                    Some(found) => subset(&path, value, found, diffs),
                    None => diffs.push(format!("{path}: expected {value}, got none")),
                }
            }
        }
        (Value::Array(want_items), Value::Array(got_items))
            if want_items.len() == got_items.len() =>
        {
            for (i, (w, g)) in want_items.iter().zip(got_items).enumerate() {
                subset(&format!("{at}/{i}"), w, g, diffs);
            }
        }
        _ if want == got => {}
        _ => diffs.push(format!("{at}: expected {want}, got {got}")),
    }
}

fn body(body: Option<String>, json: Option<toml::Value>) -> Result<Option<Body>, String> {
    match (body, json) {
        (Some(_), Some(_)) => Err("give `body` or `json`, not both".into()),
        (Some(text), None) => Ok(Some(Body::Exact(text))),
        (None, Some(json)) => Ok(Some(Body::Json(json_of(&json)))),
        (None, None) => Ok(None),
    }
}

fn state(
    raw: BTreeMap<String, BTreeMap<String, toml::Value>>,
) -> Result<BTreeMap<(String, String), Op>, String> {
    let mut writes = BTreeMap::new();
    for (bucket, keys) in raw {
        for (key, value) in keys {
            let op = match &value {
                toml::Value::String(text) => Op::Set {
                    value: text.clone().into_bytes(),
                },
                toml::Value::Table(t) if t.get("delete") == Some(&toml::Value::Boolean(true)) => {
                    Op::Delete
                }
                toml::Value::Table(t) => match t.get("add").and_then(toml::Value::as_integer) {
                    Some(delta) if delta >= 0 && t.len() == 1 => Op::Add {
                        delta: delta as u64,
                    },
                    _ => {
                        return Err(format!(
                            "state.{bucket}.{key}: give the value set, {{ delete = true }} or {{ add = N }}"
                        ));
                    }
                },
                _ => {
                    return Err(format!(
                        "state.{bucket}.{key}: give the value set (text), {{ delete = true }} or {{ add = N }}"
                    ));
                }
            };
            writes.insert((bucket.clone(), key), op);
        }
    }
    Ok(writes)
}

fn pattern(text: &str) -> Result<Regex, String> {
    Regex::new(text).map_err(|e| format!("`{text}` is not a regular expression: {e}"))
}

/// A TOML value as JSON (a date-time as its text).
pub(crate) fn json_of(value: &toml::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(items.iter().map(json_of).collect()),
        toml::Value::Table(table) => (table.iter().map(|(k, v)| (k.clone(), json_of(v))))
            .collect::<serde_json::Map<_, _>>()
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(text: &str) -> Expect {
        Expect::check(toml::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn a_json_body_is_a_subset_and_each_difference_names_its_field() {
        let want = expect(
            r#"
            outcome = "ack"
            outbox = [{ queue = "sent", json = { to = "alice@example.com", tags = ["a"] }, attributes = { to = "alice@example.com" } }]
            "#,
        );
        let sent = |to: &str| {
            let body = serde_json::json!({ "to": to, "tags": ["a"], "more": 1 }).to_string();
            Outgoing::new("sent", body).with_attribute(Attribute::string("to", to))
        };
        let mut got = Got {
            outcome: "ack".into(),
            outbox: vec![sent("alice@example.com")],
            ..Got::default()
        };
        assert_eq!(want.compare(&got), Vec::<String>::new());
        got.outbox = vec![sent("bob@example.com")];
        assert_eq!(
            want.compare(&got),
            [
                "outbox[0].json/to: expected \"alice@example.com\", got \"bob@example.com\"",
                "outbox[0].attributes.to: expected \"alice@example.com\", got \"bob@example.com\"",
            ]
        );
    }

    #[test]
    fn outcomes_state_http_and_logs_are_compared() {
        let want = expect(
            r#"
            outcome = "reject"
            reason = "^invalid address"
            state = { reminded = { "a/b" = "x", n = { add = 1 } } }
            logs = ["^warn .*unavailable"]
            "#,
        );
        let got = Got {
            outcome: "reject".into(),
            reason: Some("not a reminder".into()),
            state: BTreeMap::from([(
                ("reminded".to_string(), "n".to_string()),
                Op::Add { delta: 2 },
            )]),
            http: vec![Exchange {
                method: "POST".into(),
                url: "https://api.test/x".into(),
                headers: Vec::new(),
                body: Vec::new(),
                answered: false,
            }],
            logs: vec![GuestLog {
                level: "info",
                message: "email API unavailable".into(),
            }],
            ..Got::default()
        };
        assert_eq!(
            want.compare(&got),
            [
                "reason: expected /^invalid address/, got \"not a reminder\"",
                "http[0]: POST https://api.test/x has no canned answer (add it to [[world.http]])",
                "state.reminded/a/b: expected \"x\", not written",
                "state.reminded/n: expected an increment by 1, got an increment by 2",
                "logs: no line matches /^warn .*unavailable/ (logged: [\"info email API unavailable\"])",
            ]
        );
    }

    #[test]
    fn a_bad_expectation_names_its_field() {
        let err = |text: &str| Expect::check(toml::from_str(text).unwrap()).unwrap_err();
        assert_eq!(
            err("retry-secs = 5"),
            "outcome: say what the step comes to (ack, retry, …)"
        );
        assert!(
            err("outcome = \"acked\"").starts_with("outcome: `acked` is not one of ack, retry")
        );
        assert_eq!(
            err("outcome = \"ack\"\nretry-secs = 5"),
            "retry-secs: the outcome is `ack`, not `retry`"
        );
        assert!(
            err("outcome = \"reject\"\nreason = \"(\"")
                .starts_with("reason: `(` is not a regular expression")
        );
    }

    #[test]
    fn state_writes_are_named_by_the_plugin_s_bucket() {
        let commit = StateCommit {
            buckets: vec![crate::idempotency::commit::BucketCommit {
                bucket: crate::idempotency::commit::stored_bucket("qhost", "mail", "reminded"),
                ttl_ms: 0,
                reads: Vec::new(),
                writes: vec![("a/b".into(), Op::Delete)],
            }],
        };
        let writes = Got::writes_of(&commit);
        assert_eq!(
            writes.into_iter().collect::<Vec<_>>(),
            [(("reminded".to_string(), "a/b".to_string()), Op::Delete)]
        );
    }
}
