//! `qhost test --record`: recorded messages (the JSON Lines `qhost replay` reads, as a queue's
//! `capture` writes them) turned into a test file whose cases expect what the plugin does with
//! them today, so real traffic becomes a regression suite. Each message runs in a fresh world
//! at its own send time, with every HTTP request answered `200 OK` (and that answer written
//! into the case); the outcome, the outbox (without the `qhost-producer` stamp, which names the
//! version), the state writes, the HTTP requests and the result value become its expectations.

use std::path::Path;

use anyhow::Context as _;

use super::run::Runner;
use crate::config::Config;
use crate::kv::Op;
use crate::message::recorded::{LineError, read_lines};
use crate::message::{AttributeValue, Outgoing, Received, wire};
use crate::oneshot::bench::{Ended, Ran};
use crate::plugin::loader::LoadAs;

/// A recorded test file.
#[derive(Debug)]
pub struct Recorded {
    /// The test file's text.
    pub toml: String,
    /// How many cases it holds.
    pub cases: usize,
    /// The lines that were not messages.
    pub unreadable: Vec<LineError>,
}

/// Runs each message of `messages` (JSON Lines) through the plugin at `plugin` and writes the
/// test file that expects what it did; `plugin_ref` is how the file names the plugin.
pub fn record_cases(
    config: &Config,
    plugin: &Path,
    plugin_ref: &str,
    messages: &str,
) -> anyhow::Result<Recorded> {
    super::on_paused_clock(record(config, plugin, plugin_ref, messages))
}

async fn record(
    config: &Config,
    plugin: &Path,
    plugin_ref: &str,
    messages: &str,
) -> anyhow::Result<Recorded> {
    let runner = Runner::new(config)?;
    let bench = (runner.load_plain(&LoadAs::file(plugin)).await).map_err(anyhow::Error::msg)?;
    let mut cases = Vec::new();
    let mut unreadable = Vec::new();
    for read in read_lines(messages) {
        let (line, recorded) = match read {
            Ok(read) => read,
            Err(e) => {
                unreadable.push(e);
                continue;
            }
        };
        let msg = recorded.received("test");
        let sent = std::time::UNIX_EPOCH + std::time::Duration::from_millis(recorded.sent_at_ms);
        let runs = (runner.record(&bench, &msg, sent).await).map_err(anyhow::Error::msg)?;
        cases.push(case(line, &msg, sent, runs)?);
    }
    let count = cases.len();
    let mut file = toml::Table::new();
    file.insert("plugin".into(), plugin_ref.into());
    file.insert("case".into(), toml::Value::Array(cases));
    let text = toml::to_string_pretty(&file).context("writing the test file")?;
    let toml = format!(
        "# Recorded by `qhost test --record`: each case expects what {plugin_ref} did with the\n\
         # message then. Edit the expectations that should change, and keep the rest.\n\n{text}"
    );
    Ok(Recorded {
        toml,
        cases: count,
        unreadable,
    })
}

fn case(
    line: usize,
    msg: &Received,
    sent: std::time::SystemTime,
    runs: Vec<Ran>,
) -> anyhow::Result<toml::Value> {
    let mut case = toml::Table::new();
    case.insert("name".into(), format!("line {line}: {}", msg.id).into());
    case.insert("id".into(), msg.id.clone().into());
    match std::str::from_utf8(&msg.body) {
        Ok(text) => case.insert("body".into(), text.into()),
        Err(_) => bail_binary()?,
    };
    if !msg.attributes.is_empty() {
        let mut attributes = toml::Table::new();
        for a in &msg.attributes {
            attributes.insert(a.name.clone(), attribute(&a.value));
        }
        case.insert("attributes".into(), attributes.into());
    }
    if msg.delivery_count != 1 {
        case.insert("receive-count".into(), i64::from(msg.delivery_count).into());
    }
    if let Some(group) = &msg.group_id {
        case.insert("group".into(), group.clone().into());
    }
    let now = jiff::Timestamp::try_from(sent).context("a send time")?;
    let mut world = toml::Table::new();
    world.insert("now".into(), now.to_string().into());
    let mut answers = Vec::new();
    let mut expect = toml::Table::new();
    let mut outbox = Vec::new();
    let mut requests = Vec::new();
    let mut state = toml::Table::new();
    let mut outcome_set = false;
    for ran in &runs {
        if !outcome_set && ran.end.ended != Ended::Ack {
            outcome(&ran.end.ended, ran, &mut expect);
            outcome_set = true;
        }
        outbox.extend(ran.end.outbox.iter().map(outgoing));
        for request in &ran.met.http {
            let mut answer = toml::Table::new();
            answer.insert("method".into(), request.method.clone().into());
            answer.insert("url".into(), request.url.clone().into());
            answers.push(toml::Value::Table(answer.clone()));
            requests.push(toml::Value::Table(answer));
        }
        for ((bucket, key), op) in super::expect::Got::writes_of(&ran.end.state) {
            let entry = state
                .entry(bucket)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(keys) = entry {
                keys.insert(key, write(&op));
            }
        }
        if let Some(result) = &ran.end.result
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(result)
            && let Ok(value) = toml::Value::try_from(value)
        {
            expect.insert("result".into(), value);
        }
    }
    if !outcome_set {
        expect.insert("outcome".into(), "ack".into());
    }
    if !answers.is_empty() {
        world.insert("http".into(), toml::Value::Array(answers));
    }
    case.insert("world".into(), world.into());
    expect.insert("outbox".into(), toml::Value::Array(outbox));
    expect.insert("state".into(), state.into());
    expect.insert("http".into(), toml::Value::Array(requests));
    case.insert("expect".into(), expect.into());
    Ok(case.into())
}

fn bail_binary() -> anyhow::Result<Option<toml::Value>> {
    anyhow::bail!("a recorded message whose body is not text cannot be written as a case yet")
}

/// The outcome of `ended` as a case expects it.
fn outcome(ended: &Ended, ran: &Ran, expect: &mut toml::Table) {
    let (name, reason) = match ended {
        Ended::Ack => ("ack", None),
        Ended::Duplicate => ("duplicate", None),
        Ended::Retry(secs) => {
            expect.insert("retry-secs".into(), i64::from(*secs).into());
            ("retry", None)
        }
        Ended::Reject(why) => ("reject", Some(why)),
        Ended::NoKey(why) | Ended::Refused(why) => ("dead-letter", Some(why)),
        Ended::NotDue(_) | Ended::PutBack(_) => ("put-back", None),
        Ended::Expired(_) => ("expired", None),
        Ended::Failed(why) => (
            match &ran.end.failure {
                Some(crate::handler::Failure::Timeout(_)) => "timeout",
                Some(crate::handler::Failure::MemoryLimit(_)) => "memory-limit",
                Some(_) => "trap",
                None => "error",
            },
            Some(why),
        ),
    };
    expect.insert("outcome".into(), name.into());
    if let Some(why) = reason {
        expect.insert(
            "reason".into(),
            format!("^{}$", regex_lite::escape(why)).into(),
        );
    }
}

fn outgoing(msg: &Outgoing) -> toml::Value {
    let mut out = toml::Table::new();
    out.insert("queue".into(), msg.queue.clone().into());
    out.insert(
        "body".into(),
        String::from_utf8_lossy(&msg.body).into_owned().into(),
    );
    let mut attributes = toml::Table::new();
    for a in msg.attributes.iter().filter(|a| a.name != wire::PRODUCER) {
        if let AttributeValue::String(text) | AttributeValue::Number(text) = &a.value {
            attributes.insert(a.name.clone(), text.clone().into());
        }
    }
    if !attributes.is_empty() {
        out.insert("attributes".into(), attributes.into());
    }
    if msg.delay_seconds != 0 {
        out.insert("delay-seconds".into(), i64::from(msg.delay_seconds).into());
    }
    if let Some(group) = &msg.group_id {
        out.insert("group".into(), group.clone().into());
    }
    out.into()
}

fn attribute(value: &AttributeValue) -> toml::Value {
    let mut typed = toml::Table::new();
    match value {
        AttributeValue::String(text) => return text.clone().into(),
        AttributeValue::Number(n) => typed.insert("number".into(), n.clone().into()),
        AttributeValue::Binary(bytes) => {
            use base64::Engine as _;
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            typed.insert("binary".into(), b64.into())
        }
    };
    typed.into()
}

fn write(op: &Op) -> toml::Value {
    let mut table = toml::Table::new();
    match op {
        Op::Set { value } => return String::from_utf8_lossy(value).into_owned().into(),
        Op::Delete => table.insert("delete".into(), true.into()),
        Op::Add { delta } => table.insert("add".into(), (*delta as i64).into()),
    };
    table.into()
}
