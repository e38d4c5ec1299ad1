//! A test file, read in two stages: the TOML as written ([`FileRaw`], every table closed to
//! unknown fields), then checked into a [`TestFile`] whose cases hold messages ready to run,
//! worlds ready to set and expectations ready to compare. Every mistake is one error naming
//! the file, the case and the field; nothing is skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use super::expect::{Expect, ExpectRaw};
use crate::config::{Config, QueueConfig};
use crate::message::{Attribute, AttributeValue, Received};
use crate::plugin::loader::LoadAs;
use crate::runtime::world::Canned;

/// A test file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct FileRaw {
    /// A plugin name in the plugins directory, or a path to a `.wasm` file (relative to the
    /// test file).
    plugin: String,
    /// The plugin's name, when `plugin` is a file whose stem is not its name.
    name: Option<String>,
    /// Its manifest, when not `NAME.toml` beside the plugin file (relative to the test file).
    manifest: Option<PathBuf>,
    /// The queue the messages arrive on, as a `[[queue]]` of `qhost.toml` reads them.
    #[serde(default)]
    queue: Option<toml::Table>,
    /// The world every case starts from.
    #[serde(default)]
    world: WorldRaw,
    /// The cases.
    #[serde(default)]
    case: Vec<CaseRaw>,
}

/// The world a case runs in, as written; a case's own replaces the file's field by field.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct WorldRaw {
    /// The wall clock at the start (RFC 3339).
    now: Option<String>,
    /// `[config]` values set over the manifest's.
    config: Option<BTreeMap<String, String>>,
    /// Secrets: `[config]` entries the manifest reads from the environment or a file.
    secrets: Option<BTreeMap<String, String>>,
    /// The buckets' contents before the case, by bucket and key.
    state: Option<BTreeMap<String, BTreeMap<String, String>>>,
    /// Canned HTTP answers.
    http: Option<Vec<CannedRaw>>,
}

/// A canned HTTP answer, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct CannedRaw {
    #[serde(default = "get")]
    method: String,
    url: String,
    #[serde(default = "ok")]
    status: u16,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
    json: Option<toml::Value>,
}

fn get() -> String {
    "GET".into()
}

fn ok() -> u16 {
    200
}

/// A case, or a step that follows one, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct CaseRaw {
    name: Option<String>,
    body: Option<String>,
    json: Option<toml::Value>,
    body_file: Option<PathBuf>,
    /// A Celery task (`task`, `args`, `kwargs`), sent as Celery sends it.
    celery_task: Option<toml::Value>,
    #[serde(default)]
    attributes: BTreeMap<String, toml::Value>,
    id: Option<String>,
    receive_count: Option<u32>,
    group: Option<String>,
    sent_at: Option<String>,
    /// `"once"` (the default) or `"twice"`.
    deliver: Option<String>,
    world: Option<WorldRaw>,
    /// For a step: the clock at its start.
    now: Option<String>,
    expect: Option<ExpectRaw>,
    #[serde(default)]
    then: Vec<CaseRaw>,
}

/// A checked test file.
#[derive(Debug)]
pub(crate) struct TestFile {
    /// Where it is.
    pub(crate) path: PathBuf,
    /// The plugin it tests.
    pub(crate) plugin: LoadAs,
    /// The queue its messages arrive on.
    pub(crate) queue: QueueConfig,
    /// Its cases.
    pub(crate) cases: Vec<Case>,
}

/// A checked case.
#[derive(Debug)]
pub(crate) struct Case {
    /// Its name.
    pub(crate) name: String,
    /// The world it runs in.
    pub(crate) world: World,
    /// Its first message, then each step that follows it.
    pub(crate) steps: Vec<Step>,
}

/// One message of a case, and what must come of it.
#[derive(Debug)]
pub(crate) struct Step {
    /// What the report calls it (the case's name for the first).
    pub(crate) name: String,
    /// The message.
    pub(crate) message: Received,
    /// The clock at its start; `None`: where the step before left it.
    pub(crate) now: Option<SystemTime>,
    /// Whether it is delivered a second time once its effects are committed.
    pub(crate) twice: bool,
    /// What must come of it.
    pub(crate) expect: Expect,
}

/// A case's world, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct World {
    /// `[config]` values (and secrets) set over the manifest's.
    pub(crate) config: BTreeMap<String, String>,
    /// Entries given as secrets (so a manifest that reads them from the host is satisfied).
    pub(crate) secrets: Vec<String>,
    /// The buckets before.
    pub(crate) state: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// Canned HTTP answers.
    pub(crate) http: Vec<Canned>,
}

/// Why a test file cannot be run.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub(crate) struct FileError {
    /// The file.
    pub(crate) path: PathBuf,
    /// What is wrong, and where.
    pub(crate) message: String,
}

/// Reads and checks the test file at `path`; `plugins_dir` is where plugin names are found.
pub(crate) fn read(path: &Path, plugins_dir: &Path) -> Result<TestFile, FileError> {
    let fail = |message: String| FileError {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let raw: FileRaw = toml::from_str(&text).map_err(|e| fail(located(&text, &e)))?;
    let base = path.parent().unwrap_or(Path::new("."));
    check(raw, base, plugins_dir).map_err(fail)
}

/// Where a TOML error is, in words: the line, and the case it is in.
fn located(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    let message = &match crate::config::typo::unknown_name_hint(message) {
        Some(hint) => format!("{message} ({hint})"),
        None => message.to_string(),
    };
    let Some(at) = error.span().map(|s| s.start) else {
        return message.to_string();
    };
    let line = text[..at.min(text.len())].matches('\n').count() + 1;
    let cases = text[..at.min(text.len())]
        .lines()
        .filter(|l| l.trim_start().starts_with("[[case]]"))
        .count();
    if cases == 0 {
        return format!("line {line}: {message}");
    }
    let name = case_names(text).into_iter().nth(cases - 1).flatten();
    match name {
        Some(name) => format!("case `{name}`, line {line}: {message}"),
        None => format!("case {cases}, line {line}: {message}"),
    }
}

/// The `name` of each case, read loosely (the file did not check).
fn case_names(text: &str) -> Vec<Option<String>> {
    let Ok(table) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    let cases = table.get("case").and_then(toml::Value::as_array);
    (cases.into_iter().flatten())
        .map(|case| (case.get("name").and_then(toml::Value::as_str)).map(str::to_string))
        .collect()
}

fn check(raw: FileRaw, base: &Path, plugins_dir: &Path) -> Result<TestFile, String> {
    let plugin = plugin(&raw, base, plugins_dir);
    let name = (plugin.name.clone())
        .or_else(|| crate::plugin::loader::plugin_name(&plugin.path))
        .unwrap_or_else(|| raw.plugin.clone());
    let queue = queue(raw.queue, &name)?;
    if raw.case.is_empty() {
        return Err("it holds no [[case]]".into());
    }
    let mut cases = Vec::new();
    for (i, case) in raw.case.into_iter().enumerate() {
        let called = case
            .name
            .clone()
            .unwrap_or_else(|| format!("case {}", i + 1));
        let case = self::case(case, called.clone(), &raw.world, base, &queue)
            .map_err(|e| format!("case `{called}`: {e}"))?;
        cases.push(case);
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(twice) = cases.iter().find(|c| !seen.insert(c.name.clone())) {
        return Err(format!("two cases are named `{}`", twice.name));
    }
    Ok(TestFile {
        path: PathBuf::new(),
        plugin,
        queue,
        cases,
    })
}

/// The plugin file a test names: a name in the plugins directory, or a path.
fn plugin(raw: &FileRaw, base: &Path, plugins_dir: &Path) -> LoadAs {
    let named = raw.plugin.as_str();
    let is_path = named.ends_with(".wasm") || named.contains('/');
    let path = if is_path {
        base.join(named)
    } else {
        plugins_dir.join(format!("{named}.wasm"))
    };
    LoadAs {
        path,
        name: raw.name.clone(),
        manifest: raw.manifest.as_ref().map(|m| base.join(m)),
    }
}

/// The queue the messages arrive on, checked as `qhost.toml` checks a `[[queue]]`.
fn queue(raw: Option<toml::Table>, plugin: &str) -> Result<QueueConfig, String> {
    let mut table = raw.unwrap_or_default();
    table
        .entry("name")
        .or_insert_with(|| toml::Value::String("test".into()));
    table.insert("plugin".into(), toml::Value::String(plugin.into()));
    let mut file = toml::Table::new();
    file.insert("queue".into(), toml::Value::Array(vec![table.into()]));
    let config = Config::parse(&file.to_string()).map_err(|e| format!("[queue]: {e:#}"))?;
    Ok(config.queues[0].clone())
}

fn case(
    mut raw: CaseRaw,
    name: String,
    file_world: &WorldRaw,
    base: &Path,
    queue: &QueueConfig,
) -> Result<Case, String> {
    if raw.now.is_some() {
        return Err("now: a case sets its clock in [case.world] (`now` is for a step)".into());
    }
    let world_raw = merged(file_world, raw.world.as_ref());
    let world = world(&world_raw)?;
    let start = match &world_raw.now {
        Some(now) => timestamp(now).map_err(|e| format!("world.now: {e}"))?,
        None => SystemTime::now(),
    };
    let twice = match raw.deliver.as_deref() {
        None | Some("once") => false,
        Some("twice") => true,
        Some(other) => return Err(format!("deliver: `{other}` is neither `once` nor `twice`")),
    };
    let first = Step {
        expect: expectation(raw.expect.take())?,
        message: message(&raw, &name, base, queue)?,
        name: name.clone(),
        now: Some(start),
        twice,
    };
    let mut steps = vec![first];
    for (i, step) in std::mem::take(&mut raw.then).into_iter().enumerate() {
        let called = step
            .name
            .clone()
            .unwrap_or_else(|| format!("then {}", i + 1));
        let step =
            self::step(step, &called, base, queue).map_err(|e| format!("then `{called}`: {e}"))?;
        steps.push(step);
    }
    Ok(Case { name, world, steps })
}

fn step(mut raw: CaseRaw, name: &str, base: &Path, queue: &QueueConfig) -> Result<Step, String> {
    if raw.world.is_some() {
        return Err("world: a step runs in its case's world (it may set `now`)".into());
    }
    if !raw.then.is_empty() {
        return Err("then: steps follow the case, not each other".into());
    }
    let now = (raw.now.as_deref())
        .map(|now| timestamp(now).map_err(|e| format!("now: {e}")))
        .transpose()?;
    let twice = match raw.deliver.as_deref() {
        None | Some("once") => false,
        Some("twice") => true,
        Some(other) => return Err(format!("deliver: `{other}` is neither `once` nor `twice`")),
    };
    Ok(Step {
        expect: expectation(raw.expect.take())?,
        message: message(&raw, name, base, queue)?,
        name: name.to_string(),
        now,
        twice,
    })
}

fn expectation(raw: Option<ExpectRaw>) -> Result<Expect, String> {
    let raw = raw.ok_or("it expects nothing: give [case.expect] with at least `outcome`")?;
    Expect::check(raw).map_err(|e| format!("expect.{e}"))
}

/// The file's world with the case's fields over it.
fn merged(file: &WorldRaw, case: Option<&WorldRaw>) -> WorldRaw {
    let Some(case) = case else {
        return file.clone();
    };
    WorldRaw {
        now: case.now.clone().or_else(|| file.now.clone()),
        config: case.config.clone().or_else(|| file.config.clone()),
        secrets: case.secrets.clone().or_else(|| file.secrets.clone()),
        state: case.state.clone().or_else(|| file.state.clone()),
        http: case.http.clone().or_else(|| file.http.clone()),
    }
}

fn world(raw: &WorldRaw) -> Result<World, String> {
    let mut config = raw.config.clone().unwrap_or_default();
    let secrets = raw.secrets.clone().unwrap_or_default();
    let secret_names = secrets.keys().cloned().collect();
    config.extend(secrets);
    let state = (raw.state.clone().unwrap_or_default().into_iter())
        .map(|(bucket, keys)| {
            let keys = keys.into_iter().map(|(k, v)| (k, v.into_bytes()));
            (bucket, keys.collect())
        })
        .collect();
    let mut http = Vec::new();
    for (i, answer) in raw.http.iter().flatten().enumerate() {
        http.push(canned(answer).map_err(|e| format!("world.http[{i}]: {e}"))?);
    }
    Ok(World {
        config,
        secrets: secret_names,
        state,
        http,
    })
}

fn canned(raw: &CannedRaw) -> Result<Canned, String> {
    let method = raw.method.to_ascii_uppercase();
    http::Method::from_bytes(method.as_bytes())
        .map_err(|_| format!("method: `{}` is not an HTTP method", raw.method))?;
    http::StatusCode::from_u16(raw.status)
        .map_err(|_| format!("status: {} is not an HTTP status", raw.status))?;
    let uri: http::Uri =
        (raw.url.parse()).map_err(|e| format!("url: `{}` is not a URL: {e}", raw.url))?;
    if uri.scheme().is_none() || uri.host().is_none() {
        return Err(format!("url: `{}` needs a scheme and a host", raw.url));
    }
    let mut headers = Vec::new();
    for (name, value) in &raw.headers {
        http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("headers: `{name}` is not a header name"))?;
        http::HeaderValue::from_str(value)
            .map_err(|_| format!("headers.{name}: not a header value"))?;
        headers.push((name.clone(), value.clone()));
    }
    let body = match (&raw.body, &raw.json) {
        (Some(_), Some(_)) => return Err("give `body` or `json`, not both".into()),
        (Some(text), None) => text.clone().into_bytes(),
        (None, Some(json)) => {
            if !headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            {
                headers.push(("content-type".into(), "application/json".into()));
            }
            serde_json::to_vec(&super::expect::json_of(json)).map_err(|e| e.to_string())?
        }
        (None, None) => Vec::new(),
    };
    Ok(Canned {
        method,
        url: uri.to_string(),
        status: raw.status,
        headers,
        body,
    })
}

fn message(
    raw: &CaseRaw,
    name: &str,
    base: &Path,
    queue: &QueueConfig,
) -> Result<Received, String> {
    let id = raw.id.clone().unwrap_or_else(|| message_id(name));
    let body = match (&raw.body, &raw.json, &raw.body_file, &raw.celery_task) {
        (Some(text), None, None, None) => text.clone().into_bytes(),
        (None, Some(json), None, None) => {
            serde_json::to_vec(&super::expect::json_of(json)).map_err(|e| format!("json: {e}"))?
        }
        (None, None, Some(file), None) => {
            let path = base.join(file);
            std::fs::read(&path)
                .map_err(|e| format!("body-file: cannot read {}: {e}", path.display()))?
        }
        (None, None, None, Some(task)) => {
            let task = serde_json::to_vec(&super::expect::json_of(task))
                .map_err(|e| format!("celery-task: {e}"))?;
            // `qhost test` runs on the embedded queue: kombu's envelope, as on SQS.
            let kombu = crate::message::rules::Envelope::Kombu;
            crate::celery::send::task_message(&task, &id, &queue.name, kombu)
                .map_err(|e| format!("celery-task: {e}"))?
                .body
        }
        (None, None, None, None) => {
            return Err(
                "it has no message: give `body`, `json`, `body-file` or `celery-task`".into(),
            );
        }
        _ => return Err("give one of `body`, `json`, `body-file` and `celery-task`".into()),
    };
    let mut attributes = Vec::new();
    for (attr, value) in &raw.attributes {
        let value = attribute(value).map_err(|e| format!("attributes.{attr}: {e}"))?;
        let name = attr.clone();
        attributes.push(Attribute { name, value });
    }
    let sent_at_ms = match &raw.sent_at {
        Some(at) => millis(timestamp(at).map_err(|e| format!("sent-at: {e}"))?),
        None => millis(SystemTime::now()),
    };
    Ok(Received {
        id,
        handle: String::new(),
        queue: queue.name.clone(),
        body,
        attributes,
        delivery_count: raw.receive_count.unwrap_or(1),
        sent_at_ms,
        group_id: raw.group.clone(),
        malformed: None,
    })
}

/// An attribute's value: text for a string, or a table naming its type.
fn attribute(raw: &toml::Value) -> Result<AttributeValue, String> {
    let typed = match raw {
        toml::Value::String(text) => return Ok(AttributeValue::String(text.clone())),
        toml::Value::Table(typed) if typed.len() == 1 => typed,
        _ => {
            return Err(
                "give text, or one of { string = … }, { number = … }, { binary = \"base64\" }"
                    .into(),
            );
        }
    };
    let (kind, value) = typed.iter().next().expect("one entry");
    match (kind.as_str(), value) {
        ("string", toml::Value::String(text)) => Ok(AttributeValue::String(text.clone())),
        ("number", toml::Value::Integer(n)) => Ok(AttributeValue::Number(n.to_string())),
        ("number", toml::Value::Float(n)) => Ok(AttributeValue::Number(n.to_string())),
        ("number", toml::Value::String(n)) if n.parse::<f64>().is_ok() => {
            Ok(AttributeValue::Number(n.clone()))
        }
        ("binary", toml::Value::String(b64)) => {
            use base64::Engine as _;
            let bytes = (base64::engine::general_purpose::STANDARD.decode(b64.as_bytes()))
                .map_err(|e| format!("binary: not base64: {e}"))?;
            Ok(AttributeValue::Binary(bytes))
        }
        (kind @ ("string" | "number" | "binary"), other) => {
            Err(format!("{kind}: {other} is not a {kind}"))
        }
        (other, _) => Err(format!(
            "`{other}` is not an attribute type (string, number, binary)"
        )),
    }
}

/// A message id made from the case's name, the same on every run of the file, so keys
/// derived from it are too.
fn message_id(name: &str) -> String {
    let digest = crate::digest::sha256_hex(name.as_bytes());
    format!(
        "{}-{}-{}-{}-{}",
        &digest[..8],
        &digest[8..12],
        &digest[12..16],
        &digest[16..20],
        &digest[20..32]
    )
}

/// An RFC 3339 time.
pub(crate) fn timestamp(text: &str) -> Result<SystemTime, String> {
    let at: jiff::Timestamp = text
        .parse()
        .map_err(|e| format!("`{text}` is not an RFC 3339 time (2026-12-01T09:00:00Z): {e}"))?;
    Ok(SystemTime::from(at))
}

fn millis(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl TestFile {
    /// Reads the file at `path`, its plugin names looked up in `plugins_dir`.
    pub(crate) fn read(path: &Path, plugins_dir: &Path) -> Result<TestFile, FileError> {
        let mut file = read(path, plugins_dir)?;
        file.path = path.to_path_buf();
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &str) -> Result<TestFile, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.test.toml");
        std::fs::write(&path, text).unwrap();
        TestFile::read(&path, Path::new("plugins")).map_err(|e| e.message)
    }

    #[test]
    fn a_mistake_names_the_case_line_and_field() {
        let unknown = "plugin = \"p\"\n[[case]]\nname = \"first\"\nbody = \"x\"\n[case.expect]\noutcome = \"ack\"\n\
                       [[case]]\nname = \"second\"\nbodi = \"x\"\n";
        let err = read_text(unknown).unwrap_err();
        assert!(
            err.starts_with("case `second`, line 9: unknown field `bodi`, expected one of"),
            "{err}"
        );
        let two = "plugin = \"p\"\n[[case]]\nname = \"n\"\nbody = \"x\"\njson = { a = 1 }\n[case.expect]\noutcome = \"ack\"\n";
        assert_eq!(
            read_text(two).unwrap_err(),
            "case `n`: give one of `body`, `json`, `body-file` and `celery-task`"
        );
        let attr = "plugin = \"p\"\n[[case]]\nbody = \"x\"\nattributes = { n = { number = \"x\" } }\n[case.expect]\noutcome = \"ack\"\n";
        assert_eq!(
            read_text(attr).unwrap_err(),
            "case `case 1`: attributes.n: number: \"x\" is not a number"
        );
        let when = "plugin = \"p\"\n[world]\nnow = \"yesterday\"\n[[case]]\nbody = \"x\"\n[case.expect]\noutcome = \"ack\"\n";
        let err = read_text(when).unwrap_err();
        assert!(
            err.starts_with("case `case 1`: world.now: `yesterday` is not an RFC 3339 time"),
            "{err}"
        );
        assert_eq!(
            read_text("plugin = \"p\"\n").unwrap_err(),
            "it holds no [[case]]"
        );
    }

    #[test]
    fn a_case_s_world_replaces_the_file_s_field_by_field_and_messages_are_built() {
        let text = r#"plugin = "plugins-elsewhere/p.wasm"
[queue]
format = "celery"
[world]
now = "2026-12-01T09:00:00Z"
config = { a = "1" }
secrets = { key = "s" }
[[case]]
name = "c"
id = "11111111-2222-3333-4444-555555555555"
celery-task = { task = "t.x", args = [1] }
attributes = { tenant = "acme", n = { number = 3 } }
receive-count = 2
[case.world]
config = { b = "2" }
[case.expect]
outcome = "ack"
"#;
        let file = read_text(text).unwrap();
        assert!(file.plugin.path.ends_with("plugins-elsewhere/p.wasm"));
        assert_eq!(file.queue.name, "test");
        let case = &file.cases[0];
        let config: Vec<(&str, &str)> = (case.world.config.iter())
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            config,
            [("b", "2"), ("key", "s")],
            "config replaced, secrets kept"
        );
        let step = &case.steps[0];
        assert_eq!(step.now, Some(timestamp("2026-12-01T09:00:00Z").unwrap()));
        assert_eq!(step.message.delivery_count, 2);
        assert_eq!(step.message.id, "11111111-2222-3333-4444-555555555555");
        assert!(
            !step.message.body.starts_with(b"{"),
            "kombu's envelope: {:?}",
            step.message.body
        );
        assert_eq!(
            step.message.attributes,
            [
                Attribute {
                    name: "n".into(),
                    value: AttributeValue::Number("3".into())
                },
                Attribute::string("tenant", "acme"),
            ]
        );
    }
}
