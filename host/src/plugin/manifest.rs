//! A plugin's manifest: the `NAME.toml` beside `NAME.wasm`.
//!
//! Everything has a default, so a bare `.wasm` is a working plugin: keyed by message id,
//! remembered for a day, 10 s and 64 MiB per message, 5 attempts, no settings.
//!
//! ```toml
//! [idempotency]
//! key = "attribute:job-id"      # message-id | body-sha256 | attribute:NAME | json:/POINTER
//! on-missing = "reject"         # or "message-id"
//! dedup-window-secs = 86400
//! on-conflict = "report"        # or "reject": a done key again with another body
//!
//! [limits]
//! timeout-ms = 10000
//! memory-mib = 64
//! max-attempts = 5
//! concurrency = 4               # calls at once; unlimited (the host's cap) by default
//! reuse-instance = 1            # messages one instance may handle (see qhost-runtime's Sandbox)
//! rate = "50/s"                 # calls across the fleet, per s or min (idempotency::rate)
//!
//! http-requests = 16           # outbound HTTP requests per message
//! http-response-bytes = 1048576 # the largest response body a request may read
//! kv-value-bytes = 65536        # the largest value a state write may hold (crate::kv)
//! kv-keys-per-run = 100         # distinct state keys one run may write
//! kv-key-bytes = 256            # the longest state key
//!
//! [capabilities]
//! http = ["https://api.sendgrid.com", "https://*.example.com:8443", "http://127.0.0.1:*"]
//! idempotency-header = "Idempotency-Key"   # "" sends none (runtime::http)
//! keyvalue = ["counts", { bucket = "reminded", ttl-secs = 3456000 }]   # state buckets
//!
//! [outbox]
//! queues = ["sent-emails"]      # where it may send; none by default, "*" for any queue
//! max-bytes = 8388608           # all it may send from one message, bodies and attributes
//! celery = ["celery"]           # queues its messages go to as Celery tasks (docs/celery.md)
//!
//! [batch]                       # batch handlers only (`handle-batch`; docs/handlers.md)
//! max-messages = 10             # messages one call gathers at most, 1 to 100
//! max-wait-ms = 20              # how long a call waits for more after its first message
//!
//! [flow]                        # flow control by key (crate::flow; docs/flow.md)
//! key = "attribute:tenant"      # attribute:NAME | json:/POINTER | group
//! max-concurrency = 3           # runs of one key at once across the fleet
//! rate = "20/s"                 # runs of one key per s or min across the fleet
//! weights = { enterprise = 5 }  # fair shares of a host's slots (fair = true by default)
//!
//! [config]                      # read by the plugin through the `config` import
//! greeting = "hello"
//! api-key = { env = "SENDGRID_API_KEY" }       # secrets the host grants (plugin::secrets)
//! token = { file = "/run/secrets/sendgrid" }
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::config::typo;
use crate::flow::FlowPolicy;
use crate::idempotency::key::{KeySource, OnMissingKey};
use crate::idempotency::rate::Rate;
use crate::kv::grant::BucketEntry;
use crate::kv::{KvGrant, KvLimits};
use crate::message::wire::valid_queue_name;
use crate::runtime::Sandbox;
use crate::runtime::http::{self, HttpGrant};
pub(crate) use crate::runtime::{MAX_MEMORY_MIB, OutboxGrant};

/// A plugin's policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Manifest {
    /// Idempotency policy.
    #[serde(default)]
    pub(crate) idempotency: Idempotency,
    /// Resource limits.
    #[serde(default)]
    pub(crate) limits: Limits,
    /// What the plugin may reach beyond the host: nothing by default.
    #[serde(default)]
    pub(crate) capabilities: Capabilities,
    /// Where the plugin may send, and how much.
    #[serde(default)]
    pub(crate) outbox: OutboxGrant,
    /// Settings the plugin reads through `config.get`.
    #[serde(default)]
    pub(crate) config: BTreeMap<String, ConfigValue>,
    /// How a batch handler's calls are gathered; `None`: the defaults (batch handlers only).
    #[serde(default)]
    pub(crate) batch: Option<BatchShape>,
    /// Flow control by key: limits per tenant or downstream, fair shares (`crate::flow`).
    #[serde(default)]
    pub(crate) flow: FlowPolicy,
}

/// How many messages a batch handler's call gathers, and how long it waits for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct BatchShape {
    /// Messages one call holds at most.
    #[serde(default = "default_batch_messages")]
    pub(crate) max_messages: u32,
    /// How long a call waits for more messages after its first, in milliseconds.
    #[serde(default = "default_batch_wait_ms")]
    pub(crate) max_wait_ms: u64,
}

/// The most messages one batch call may hold: as many as a Lambda SQS batch's default, and
/// ten receives' worth.
pub(crate) const MAX_BATCH_MESSAGES: u32 = 100;
/// The longest a batch call may wait for its messages.
const MAX_BATCH_WAIT_MS: u64 = 10_000;

fn default_batch_messages() -> u32 {
    10
}

fn default_batch_wait_ms() -> u64 {
    20
}

impl Default for BatchShape {
    fn default() -> Self {
        BatchShape {
            max_messages: default_batch_messages(),
            max_wait_ms: default_batch_wait_ms(),
        }
    }
}

impl BatchShape {
    /// How long a call waits for more messages.
    pub(crate) fn max_wait(&self) -> Duration {
        Duration::from_millis(self.max_wait_ms)
    }

    fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=MAX_BATCH_MESSAGES).contains(&self.max_messages),
            "batch.max-messages must be between 1 and {MAX_BATCH_MESSAGES}"
        );
        anyhow::ensure!(
            self.max_wait_ms <= MAX_BATCH_WAIT_MS,
            "batch.max-wait-ms must be at most {MAX_BATCH_WAIT_MS}"
        );
        Ok(())
    }
}

/// A `[config]` value as written: text, or where the host reads a secret when the plugin
/// loads (see `plugin::secrets`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ConfigValue {
    /// The value itself.
    Text(String),
    /// `{ env = "NAME" }`: the host's environment variable.
    Env(String),
    /// `{ file = "PATH" }`: a file's contents, a final newline dropped.
    File(std::path::PathBuf),
}

impl<'de> Deserialize<'de> for ConfigValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let shape = "a string, { env = \"NAME\" } or { file = \"PATH\" }";
        match toml::Value::deserialize(deserializer)? {
            toml::Value::String(text) => Ok(ConfigValue::Text(text)),
            toml::Value::Table(table) if table.len() == 1 => match table.into_iter().next() {
                Some((key, toml::Value::String(name))) if key == "env" => {
                    Ok(ConfigValue::Env(name))
                }
                Some((key, toml::Value::String(path))) if key == "file" => {
                    Ok(ConfigValue::File(path.into()))
                }
                _ => Err(D::Error::custom(format!("a setting must be {shape}"))),
            },
            _ => Err(D::Error::custom(format!("a setting must be {shape}"))),
        }
    }
}

/// What a plugin may reach beyond the host (see `runtime::http`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct Capabilities {
    /// Origins the plugin may call over HTTP: `SCHEME://HOST[:PORT]`, `*.` before a name,
    /// `*` for any port. None by default.
    #[serde(default)]
    pub http: Vec<String>,
    /// The header each request carries its idempotency key in; empty sends none.
    #[serde(default = "default_key_header")]
    pub idempotency_header: String,
    /// The state buckets it may open through `wasi:keyvalue` (see `crate::kv`). None by
    /// default.
    #[serde(default)]
    pub keyvalue: Vec<BucketEntry>,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities {
            http: Vec::new(),
            idempotency_header: default_key_header(),
            keyvalue: Vec::new(),
        }
    }
}

fn default_key_header() -> String {
    "Idempotency-Key".into()
}

/// The most any plugin may send from one message.
pub(crate) const MAX_OUTBOX_BYTES: usize = 256 << 20;

/// Where the key comes from and how long completed work is remembered.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct Idempotency {
    /// The key source.
    #[serde(default)]
    pub key: KeySource,
    /// What to do when the source is absent from a message.
    #[serde(default)]
    pub on_missing: OnMissingKey,
    /// How long a completed key suppresses duplicates.
    #[serde(default = "default_window")]
    pub dedup_window_secs: u64,
    /// What to do with a delivery of a completed key whose body differs from the one that ran.
    #[serde(default)]
    pub on_conflict: OnConflict,
}

/// What to do when a completed key comes again with another body: a producer reusing a key for
/// different work, which idempotency libraries call a payload mismatch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum OnConflict {
    /// Log it and count it (`conflict`), and ack it as the duplicate it claims to be.
    #[default]
    Report,
    /// Dead-letter it with the two digests, so somebody looks.
    Reject,
}

impl Default for Idempotency {
    fn default() -> Self {
        Idempotency {
            key: KeySource::default(),
            on_missing: OnMissingKey::default(),
            dedup_window_secs: default_window(),
            on_conflict: OnConflict::default(),
        }
    }
}

fn default_window() -> u64 {
    86_400
}

/// Per-message limits.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Limits {
    /// Wall-clock deadline per message: instantiation, guest code and host calls together.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// Linear memory cap per instance.
    #[serde(default = "default_memory")]
    pub memory_mib: u64,
    /// Deliveries after which a failing message is dead-lettered.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Calls of this plugin running at once; `None` leaves only the host's in-flight cap.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// Messages one instance may handle before it is dropped. 1 (the default) is a fresh
    /// instance per message; more saves an interpreter guest's start-up, at the cost of
    /// isolation between messages of the same plugin.
    #[serde(default = "default_reuse")]
    pub reuse_instance: u32,
    /// Outbound HTTP requests one message may make.
    #[serde(default = "default_http_requests")]
    pub http_requests: u32,
    /// The largest response body one request may read.
    #[serde(default = "default_http_response_bytes")]
    pub http_response_bytes: u64,
    /// Calls of this plugin per second or minute across every host sharing the idempotency
    /// store (`"50/s"`, `"300/min"`); unlimited by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// The largest value one state write may hold.
    #[serde(default = "default_kv_value_bytes")]
    pub kv_value_bytes: u64,
    /// Distinct state keys one run may write.
    #[serde(default = "default_kv_keys_per_run")]
    pub kv_keys_per_run: u32,
    /// The longest state key.
    #[serde(default = "default_kv_key_bytes")]
    pub kv_key_bytes: u32,
}

fn default_kv_value_bytes() -> u64 {
    KvLimits::default().value_bytes
}

fn default_kv_keys_per_run() -> u32 {
    KvLimits::default().keys_per_run
}

fn default_kv_key_bytes() -> u32 {
    KvLimits::default().key_bytes
}

fn default_http_requests() -> u32 {
    16
}

fn default_http_response_bytes() -> u64 {
    1 << 20
}

/// The most requests per message a manifest may allow.
pub(crate) const MAX_HTTP_REQUESTS: u32 = 1000;
/// The largest response body a manifest may allow.
pub(crate) const MAX_HTTP_RESPONSE_BYTES: u64 = 64 << 20;

fn default_reuse() -> u32 {
    1
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_ms: default_timeout(),
            memory_mib: default_memory(),
            max_attempts: default_attempts(),
            concurrency: None,
            reuse_instance: default_reuse(),
            http_requests: default_http_requests(),
            http_response_bytes: default_http_response_bytes(),
            rate: None,
            kv_value_bytes: default_kv_value_bytes(),
            kv_keys_per_run: default_kv_keys_per_run(),
            kv_key_bytes: default_kv_key_bytes(),
        }
    }
}

fn default_timeout() -> u64 {
    10_000
}
fn default_memory() -> u64 {
    64
}
fn default_attempts() -> u32 {
    5
}

impl Manifest {
    /// Parses and checks a manifest.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let manifest: Manifest = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!(typo::with_hint(e.to_string().trim_end())))?;
        manifest.check()?;
        Ok(manifest)
    }

    /// Reads the manifest at `path`, or the defaults if there is no such file.
    pub(crate) fn load_or_default(path: &Path) -> anyhow::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).with_context(|| format!("in {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// How a batch handler's calls are gathered.
    pub(crate) fn batch_shape(&self) -> BatchShape {
        self.batch.unwrap_or_default()
    }

    fn check(&self) -> anyhow::Result<()> {
        if let Some(batch) = &self.batch {
            batch.check()?;
        }
        self.flow.check()?;
        let l = &self.limits;
        anyhow::ensure!(l.timeout_ms > 0, "limits.timeout-ms must be positive");
        anyhow::ensure!(
            (1..=MAX_MEMORY_MIB).contains(&l.memory_mib),
            "limits.memory-mib must be between 1 and {MAX_MEMORY_MIB}"
        );
        anyhow::ensure!(l.max_attempts > 0, "limits.max-attempts must be at least 1");
        anyhow::ensure!(
            l.concurrency.is_none_or(|c| (1..=4096).contains(&c)),
            "limits.concurrency must be between 1 and 4096"
        );
        anyhow::ensure!(
            (1..=100_000).contains(&l.reuse_instance),
            "limits.reuse-instance must be between 1 and 100000"
        );
        anyhow::ensure!(
            self.idempotency.dedup_window_secs > 0,
            "idempotency.dedup-window-secs must be positive"
        );
        anyhow::ensure!(
            (1..=MAX_HTTP_REQUESTS).contains(&l.http_requests),
            "limits.http-requests must be between 1 and {MAX_HTTP_REQUESTS}"
        );
        anyhow::ensure!(
            (1..=MAX_HTTP_RESPONSE_BYTES).contains(&l.http_response_bytes),
            "limits.http-response-bytes must be between 1 and {MAX_HTTP_RESPONSE_BYTES}"
        );
        self.capabilities.check()?;
        self.kv_limits().check().map_err(anyhow::Error::msg)?;
        let outbox = &self.outbox;
        if let Some(bad) = outbox
            .queues
            .iter()
            .find(|q| *q != "*" && !valid_queue_name(q))
        {
            anyhow::bail!("outbox.queues: `{bad}` is not a queue name (or \"*\")");
        }
        if let Some(bad) = outbox.celery.iter().find(|q| !valid_queue_name(q)) {
            anyhow::bail!("outbox.celery: `{bad}` is not a queue name");
        }
        anyhow::ensure!(
            (1..=MAX_OUTBOX_BYTES).contains(&outbox.max_bytes),
            "outbox.max-bytes must be between 1 and {MAX_OUTBOX_BYTES}"
        );
        Ok(())
    }

    /// The timeout as a duration.
    /// The HTTP grant, parsed (`check` has refused a manifest whose patterns do not parse).
    pub(crate) fn http_grant(&self) -> HttpGrant {
        HttpGrant::parse(&self.capabilities.http).unwrap_or_default()
    }

    /// What its calls may do and use, as the runtime enforces it.
    pub(crate) fn sandbox(&self) -> Sandbox {
        Sandbox {
            outbox: self.outbox.clone(),
            http: self.http_grant(),
            calls_out: !self.capabilities.http.is_empty(),
            idempotency_header: self.capabilities.idempotency_header.clone(),
            http_requests: self.limits.http_requests,
            http_response_bytes: self.limits.http_response_bytes,
            memory_mib: self.limits.memory_mib,
            timeout: self.timeout(),
            reuse_instance: self.limits.reuse_instance,
            world: None,
            kv: self.kv_grant(),
            kv_limits: self.kv_limits(),
            kv_counts: Default::default(),
        }
    }

    /// The state buckets it may open (`check` has refused a manifest whose list is wrong).
    pub(crate) fn kv_grant(&self) -> KvGrant {
        KvGrant::parse(&self.capabilities.keyvalue).unwrap_or_default()
    }

    /// How much one run may write to them.
    pub(crate) fn kv_limits(&self) -> KvLimits {
        KvLimits {
            value_bytes: self.limits.kv_value_bytes,
            keys_per_run: self.limits.kv_keys_per_run,
            key_bytes: self.limits.kv_key_bytes,
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.limits.timeout_ms)
    }

    /// The dedup window as a duration.
    pub(crate) fn dedup_window(&self) -> Duration {
        Duration::from_secs(self.idempotency.dedup_window_secs)
    }
}

impl Capabilities {
    fn check(&self) -> anyhow::Result<()> {
        HttpGrant::parse(&self.http).map_err(|e| anyhow::anyhow!("capabilities.http: {e}"))?;
        http::key_header(&self.idempotency_header)
            .map_err(|e| anyhow::anyhow!("capabilities.idempotency-header: {e}"))?;
        KvGrant::parse(&self.keyvalue)
            .map_err(|e| anyhow::anyhow!("capabilities.keyvalue: {e}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_manifest_is_all_defaults() {
        let m = Manifest::parse("").unwrap();
        assert_eq!(m, Manifest::default());
        assert_eq!(m.limits.max_attempts, 5);
        assert_eq!(m.idempotency.key, KeySource::MessageId);
    }

    #[test]
    fn a_full_manifest_parses() {
        let m = Manifest::parse(
            "[idempotency]\nkey = \"json:/id\"\non-missing = \"message-id\"\n\
             [limits]\ntimeout-ms = 50\nmemory-mib = 8\nmax-attempts = 2\nconcurrency = 3\n\
             [config]\nto = \"out\"\nkey = { env = \"API_KEY\" }\n\
             token = { file = \"/run/secrets/t\" }\n",
        )
        .unwrap();
        assert_eq!(m.idempotency.key, KeySource::JsonPointer("/id".into()));
        assert_eq!(m.idempotency.on_missing, OnMissingKey::MessageId);
        assert_eq!(m.timeout(), Duration::from_millis(50));
        assert_eq!(m.config["to"], ConfigValue::Text("out".into()));
        assert_eq!(m.config["key"], ConfigValue::Env("API_KEY".into()));
        assert_eq!(
            m.config["token"],
            ConfigValue::File("/run/secrets/t".into())
        );
        for bad in [
            "x = 1",
            "x = { env = 1 }",
            "x = { vault = \"a\" }",
            "x = { env = \"A\", file = \"b\" }",
        ] {
            let err = Manifest::parse(&format!("[config]\n{bad}\n")).unwrap_err();
            assert!(
                format!("{err:#}").contains("a setting must be a string, { env"),
                "{bad}: {err:#}"
            );
        }
        assert_eq!(m.limits.concurrency, Some(3));
    }

    #[test]
    fn the_outbox_grants_nothing_unless_named() {
        let none = Manifest::parse("").unwrap().outbox;
        assert!(!none.allows("anything"));
        let some = Manifest::parse("[outbox]\nqueues = [\"sent\"]\n")
            .unwrap()
            .outbox;
        assert!(some.allows("sent") && !some.allows("other"));
        let any = Manifest::parse("[outbox]\nqueues = [\"*\"]\n")
            .unwrap()
            .outbox;
        assert!(any.allows("other"));
    }

    #[test]
    fn bad_manifests_name_the_field() {
        let unknown = Manifest::parse("[limits]\ntimeout = 5\n").unwrap_err();
        assert!(
            format!("{unknown:#}").contains("unknown field `timeout`"),
            "{unknown:#}"
        );
        let zero = Manifest::parse("[limits]\nmax-attempts = 0\n").unwrap_err();
        assert!(zero.to_string().contains("limits.max-attempts"), "{zero}");
        let none = Manifest::parse("[limits]\nconcurrency = 0\n").unwrap_err();
        assert!(none.to_string().contains("limits.concurrency"), "{none}");
        let queue = Manifest::parse("[outbox]\nqueues = [\"../x\"]\n").unwrap_err();
        assert!(queue.to_string().contains("outbox.queues"), "{queue}");
        let celery = Manifest::parse("[outbox]\ncelery = [\"*\"]\n").unwrap_err();
        assert!(
            celery.to_string().contains("outbox.celery: `*`"),
            "{celery}"
        );
        let granted = Manifest::parse("[outbox]\ncelery = [\"tasks\"]\n")
            .unwrap()
            .outbox;
        assert!(granted.allows("tasks") && granted.is_celery("tasks") && !granted.is_celery("x"));
        let key = Manifest::parse("[idempotency]\nkey = \"header:x\"\n").unwrap_err();
        assert!(
            format!("{key:#}").contains("is not a key source"),
            "{key:#}"
        );
    }
}
