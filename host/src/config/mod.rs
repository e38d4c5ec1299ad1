//! Configuration, validated in two stages: the file as written ([`file::RawConfig`], where
//! serde refuses unknown fields) and the checked [`Config`] the host runs on. Every field has
//! a default that serves the embedded demo, so `qhost run` needs no file at all. A bad value
//! is one error naming the field, before anything starts.

pub(crate) mod admin;
pub(crate) mod capture;
pub(crate) mod celery;
mod compiled_cache;
pub(crate) mod deadlines;
mod declared;
#[cfg(test)]
mod documented;
mod file;
pub(crate) mod format;
pub(crate) mod load;
mod nats;
mod pgmq;
mod postgres;
mod rabbitmq;
pub(crate) mod rollout;
pub(crate) mod schedule;
mod secret;
pub(crate) mod typo;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::message::wire::valid_queue_name;
pub(crate) use crate::payload::config::PayloadConfig;
use crate::redis_link::{RedisTarget, redacted};
use crate::runtime::MAX_MEMORY_MIB;
use celery::{CeleryResults, results_of};
pub(crate) use deadlines::Deadlines;
use file::{RawConfig, RawQueue};
pub use format::MessageFormat;
pub(crate) use format::Routes;
pub(crate) use nats::NatsSourceSettings;
pub(crate) use pgmq::PgmqSourceSettings;
pub(crate) use postgres::{PgConnection, PostgresStoreSettings};
pub(crate) use qhost_runtime::SecretsGrant;

/// Where messages come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// The embedded queue in the data directory.
    Local,
    /// Amazon SQS, or an SQS-compatible server.
    Sqs(crate::aws::AwsSettings),
    /// A RabbitMQ broker (AMQP 0-9-1).
    Rabbitmq(crate::source::rabbitmq::RabbitSettings),
    /// pgmq's queues in a PostgreSQL database.
    Pgmq(pgmq::PgmqSourceSettings),
    /// Streams on NATS JetStream.
    Nats(nats::NatsSourceSettings),
}

impl SourceKind {
    /// The `messaging.system` value metrics and traces carry: OpenTelemetry's well-known
    /// `aws_sqs` and `rabbitmq`, or `qhost_local` for the embedded queue.
    pub(crate) fn messaging_system(&self) -> &'static str {
        match self {
            SourceKind::Sqs(_) => "aws_sqs",
            SourceKind::Local => "qhost_local",
            SourceKind::Rabbitmq(_) => "rabbitmq",
            SourceKind::Pgmq(_) => "pgmq",
            SourceKind::Nats(_) => "nats",
        }
    }

    /// How a Celery task travels on it.
    pub(crate) fn envelope(&self) -> crate::message::rules::Envelope {
        match self {
            SourceKind::Rabbitmq(_) => crate::message::rules::Envelope::Amqp,
            SourceKind::Sqs(_) | SourceKind::Local | SourceKind::Pgmq(_) | SourceKind::Nats(_) => {
                crate::message::rules::Envelope::Kombu
            }
        }
    }
}

/// Where leases and completed records live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded store in the data directory.
    Local,
    /// A Redis server, or a Redis Cluster.
    Redis(RedisTarget),
    /// A PostgreSQL database.
    Postgres(postgres::PostgresStoreSettings),
}

/// The shortest first retry delay: put-backs that use up no attempt (a store down, a key
/// busy) must not come straight back.
const MIN_RETRY_SECS: f64 = 0.01;

/// Retry backoff: `base * 2^(attempt-1)`, capped at `max`, jittered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay after the first failure.
    pub base: Duration,
    /// The most any retry waits (a handler asking for longer still gets it).
    pub max: Duration,
}

/// One consumed queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Queue name.
    pub name: String,
    /// The queue's URL, for SQS (otherwise resolved by name).
    pub url: Option<String>,
    /// The plugin that stands for the queue: its default route, or for a queue routed by its
    /// table alone the first route's plugin (what its unroutable messages' dead letters and
    /// metrics name).
    pub plugin: String,
    /// How its messages are read (`format`).
    pub format: MessageFormat,
    /// Which plugin runs each route the format reads, and the default.
    pub routes: Routes,
    /// How long a received message stays hidden; the heartbeat extends it while a handler runs.
    pub visibility: Duration,
    /// Long-poll wait.
    pub wait: Duration,
    /// Messages per receive (1 to 10).
    pub batch_size: usize,
    /// Receive loops on this queue (they share the host's in-flight cap).
    pub pollers: usize,
    /// Its priority among the host's queues: while a queue of a higher one is busy, this
    /// one's pollers leave it half the in-flight slots (`pipeline::priority`). 0 by default.
    pub priority: u32,
    /// Where rejected and poison messages go.
    pub dead_letter: String,
    /// Queue-level redrive: receives after which the queue itself dead-letters a message (a
    /// safety net for messages that crash the host).
    pub max_receives: Option<u32>,
    /// Whether to extend the lease and visibility while a handler runs. Off only for handlers
    /// that must never outlive their visibility timeout (and for tests of lease expiry).
    pub heartbeat: bool,
    /// A sample of its handled messages written for `qhost replay`, when asked for.
    pub capture: Option<capture::CaptureConfig>,
}

impl QueueConfig {
    /// Every plugin the queue may run, once each: its own, then its routes'.
    pub fn plugins(&self) -> impl Iterator<Item = &str> {
        let mut seen = std::collections::BTreeSet::new();
        std::iter::once(&self.plugin)
            .chain(self.routes.table.values())
            .map(String::as_str)
            .filter(move |name| seen.insert(*name))
    }
}

/// The checked configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Where `NAME.wasm` plugins and their manifests live.
    pub plugins_dir: PathBuf,
    /// Where the local backends keep their database; `None` keeps it in memory.
    pub data_dir: Option<PathBuf>,
    /// Messages being handled at once, across queues.
    pub max_in_flight: usize,
    /// Threads the data path runs on, each a runtime of its own with its own pollers and
    /// connections (`host::lanes`); 1 runs it on the host's runtime.
    pub lanes: usize,
    /// How long shutdown waits for in-flight handlers.
    pub shutdown_grace: Duration,
    /// Largest memory limit a plugin manifest may set; sizes the instance pool.
    pub max_plugin_memory_mib: u64,
    /// Whether to reload plugins when the plugins directory changes.
    pub watch_plugins: bool,
    /// Whether to start although a queue's plugin (or one of its routes) did not load: its
    /// queue then waits, unconsumed, until it does. Off: such a start is refused.
    pub allow_unloaded_plugins: bool,
    /// Where compiled plugins are cached: the user's cache unless turned off or set
    /// (`compiled_cache.rs`).
    pub compiled_cache: Option<PathBuf>,
    /// Queue backend.
    pub source: SourceKind,
    /// The embedded queue's queues besides those consumed, dead-lettered to and scheduled
    /// (`[source] queues`; `None`: every name exists). See [`Config::local_queues`].
    pub source_queues: Option<Vec<String>>,
    /// Idempotency backend.
    pub store: StoreKind,
    /// Prefix of every idempotency key.
    pub namespace: String,
    /// Retry backoff.
    pub retry: RetryPolicy,
    /// Consumed queues.
    pub queues: Vec<QueueConfig>,
    /// Schedules (`[[schedule]]`): cron in qhost.
    pub schedules: Vec<schedule::ScheduleConfig>,
    /// Where Celery result records go (`[celery] result-backend`), if anywhere.
    pub celery_results: Option<CeleryResults>,
    /// Payload offload (claim check).
    pub payload: PayloadConfig,
    /// Where `qhost run` serves the console, `/metrics`, `/healthz` and `/readyz`; `None`
    /// serves nothing.
    pub admin_listen: Option<SocketAddr>,
    /// What the console's actions ask for; without it the console is read-only.
    pub admin_token: Option<admin::AdminToken>,
    /// The variables and directories plugins' `[config]` may read secrets from.
    pub secrets: SecretsGrant,
    /// A PEM file of CA certificates plugins' HTTPS requests trust besides the platform's.
    pub http_ca_file: Option<PathBuf>,
    /// How long remote calls may take (also set on the source, store and payload settings
    /// above, which carry them to their clients), and when a queue counts as stalled.
    pub deadlines: Deadlines,
    /// How a changed plugin file takes traffic: at once, or as a canary.
    pub rollout: rollout::RolloutConfig,
}

/// Where the admin listener binds unless told otherwise: loopback, Prometheus's exporter port
/// range.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";

/// The admin listener's address as written: `HOST:PORT` with a literal IP (port 0 picks a free
/// one), or `""` for none.
pub(crate) fn admin_listen(text: &str) -> anyhow::Result<Option<SocketAddr>> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        anyhow::anyhow!(
            "admin.listen `{text}` is not an address: IP:PORT, e.g. {DEFAULT_ADMIN_LISTEN} (port 0 picks a free port; \"\" turns the listener off)"
        )
    })
}

impl Default for Config {
    fn default() -> Self {
        Config::from_raw(RawConfig::default()).expect("the defaults are valid")
    }
}

/// The embedded database in `data_dir`: one file holds the local queue and the local store, so
/// every part of qhost (and a test inspecting them) opens the same one.
pub(crate) fn database_in(data_dir: &Path) -> PathBuf {
    data_dir.join("qhost.db")
}

impl Config {
    /// How the host sends an outbox's messages: offloaded as the payload store says, and a
    /// Celery task laid out as the source's own Celery producers lay it out.
    pub(crate) fn send_shape(&self) -> crate::message::rules::SendShape {
        crate::message::rules::SendShape {
            envelope: self.source.envelope(),
            ..self.payload.send_shape()
        }
    }

    /// The embedded backends' database file, or `None` to keep it in memory.
    pub(crate) fn database(&self) -> Option<PathBuf> {
        self.data_dir.as_deref().map(database_in)
    }

    /// Parses and checks configuration text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        Self::from_raw(parse_raw(text)?)
    }

    /// Checks a parsed configuration, filling in defaults.
    pub(crate) fn from_raw(mut raw: RawConfig) -> anyhow::Result<Self> {
        let max_in_flight = raw.max_in_flight.unwrap_or(32);
        in_range("max-in-flight", max_in_flight, 1, 4096)?;
        let lanes = raw.lanes.unwrap_or(1);
        in_range("lanes", lanes, 1, 64)?;
        let max_plugin_memory_mib = raw.max_plugin_memory_mib.unwrap_or(512);
        in_range(
            "max-plugin-memory-mib",
            max_plugin_memory_mib,
            1,
            MAX_MEMORY_MIB,
        )?;
        let retry = raw.retry.unwrap_or_default();
        let base = retry.base_secs.unwrap_or(1.0);
        let max = retry.max_secs.unwrap_or(900.0);
        if !(MIN_RETRY_SECS..=43_200.0).contains(&base) {
            bail!(
                "retry.base-secs is {base}; it must be between {MIN_RETRY_SECS} and 43200: a message \
                 put back while a store is down would otherwise come straight back, over and over"
            );
        }
        in_range("retry.max-secs", max, base, 43_200.0)?;
        let namespace = raw
            .idempotency
            .as_ref()
            .and_then(|i| i.namespace.clone())
            .unwrap_or_else(|| "qhost".into());
        if namespace.is_empty() || namespace.contains(['{', '}']) {
            bail!("idempotency.namespace must be non-empty and hold no braces");
        }
        let source_queues = declared::source_queues(
            raw.source.as_mut().and_then(|s| s.queues.take()),
            raw.queues.is_none(),
        )?;
        let queues = match raw.queues {
            Some(qs) => qs
                .into_iter()
                .enumerate()
                .map(|(i, q)| queue(i, q))
                .collect::<Result<Vec<_>, _>>()?,
            None => vec![queue(0, default_queue())?],
        };
        check_unique(&queues)?;
        let celery_results = results_of(raw.celery)?;
        let celery = |q: &QueueConfig| matches!(q.format, MessageFormat::Celery { .. });
        if celery_results.is_some() && !queues.iter().any(celery) {
            bail!("celery.result-backend is set, but no queue has format = \"celery\"");
        }
        let data_dir = raw.data_dir.unwrap_or_else(|| ".qhost".into());
        let deadlines = deadlines::deadlines(raw.timeouts.unwrap_or_default())?;
        let mut source = source_kind(raw.source.unwrap_or_default(), max_in_flight, lanes)?;
        match &mut source {
            SourceKind::Sqs(settings) => settings.deadlines = deadlines.sqs,
            SourceKind::Pgmq(settings) => settings.db.deadlines = deadlines.postgres,
            SourceKind::Local | SourceKind::Rabbitmq(_) | SourceKind::Nats(_) => {}
        }
        if let SourceKind::Rabbitmq(settings) = &source {
            rabbitmq::check_ordered(settings, &queues)?;
        }
        let mut store = store_kind(raw.idempotency.unwrap_or_default(), max_in_flight, lanes)?;
        match &mut store {
            StoreKind::Redis(target) => target.deadlines = deadlines.redis,
            StoreKind::Postgres(settings) => settings.db.deadlines = deadlines.postgres,
            StoreKind::Local => {}
        }
        let mut payload = crate::payload::config::payload_config(
            raw.payload.unwrap_or_default(),
            match &store {
                StoreKind::Redis(target) => Some(target),
                StoreKind::Local | StoreKind::Postgres(_) => None,
            },
            match &source {
                SourceKind::Sqs(settings) => Some(settings),
                SourceKind::Local
                | SourceKind::Rabbitmq(_)
                | SourceKind::Pgmq(_)
                | SourceKind::Nats(_) => None,
            },
        )?;
        payload.s3.deadlines = deadlines.s3;
        if let Some(target) = &mut payload.redis {
            target.deadlines = deadlines.redis;
        }
        let raw_secrets = raw.secrets.unwrap_or_default();
        let secrets = SecretsGrant {
            env: raw_secrets.env.unwrap_or_default(),
            dirs: raw_secrets.dirs.unwrap_or_default(),
        };
        secrets.check().map_err(anyhow::Error::msg)?;
        let admin = raw.admin.unwrap_or_default();
        let admin_listen = admin_listen(admin.listen.as_deref().unwrap_or(DEFAULT_ADMIN_LISTEN))?;
        let admin_token = admin.token.as_ref().map(admin::token).transpose()?;
        let rollout = rollout::RolloutConfig::check(&raw.rollout.unwrap_or_default())?;
        let mut schedules = schedule::schedules(raw.schedules)?;
        for s in &mut schedules {
            s.target.lay_out(source.envelope());
        }
        for s in &schedules {
            if let Err(why) = crate::schedule::tick::Tick::check(s) {
                bail!("schedule `{}`: its ticks would be refused: {why}", s.name);
            }
        }
        Ok(Config {
            source_queues,
            schedules,
            rollout,
            deadlines,
            admin_listen,
            admin_token,
            secrets,
            http_ca_file: raw.http.and_then(|h| h.ca_file),
            plugins_dir: raw.plugins_dir.unwrap_or_else(|| "plugins".into()),
            compiled_cache: compiled_cache::resolve(raw.compiled_cache, &data_dir),
            data_dir: Some(data_dir),
            watch_plugins: raw.watch_plugins.unwrap_or(true),
            allow_unloaded_plugins: raw.allow_unloaded_plugins.unwrap_or(false),
            max_in_flight: max_in_flight as usize,
            lanes: lanes as usize,
            shutdown_grace: Duration::from_secs(raw.shutdown_grace_secs.unwrap_or(30)),
            max_plugin_memory_mib,
            source,
            store,
            payload,
            namespace,
            retry: RetryPolicy {
                base: Duration::from_secs_f64(base),
                max: Duration::from_secs_f64(max),
            },
            queues,
            celery_results,
        })
    }

    /// The queue with this name.
    pub fn queue(&self, name: &str) -> Option<&QueueConfig> {
        self.queues.iter().find(|q| q.name == name)
    }
}

/// Parses the file form only (flags are applied to it before checking).
pub(crate) fn parse_raw(text: &str) -> anyhow::Result<RawConfig> {
    toml::from_str(text).map_err(|e| {
        let message = e.to_string();
        let message = message.trim_end();
        let hint = hint(message).map(str::to_string);
        match hint.or_else(|| typo::unknown_name_hint(message)) {
            Some(hint) => anyhow::anyhow!("{message}\n{hint}"),
            None => anyhow::anyhow!("{message}"),
        }
    })
}

/// What to write instead, for the type mistakes TOML's own words leave unclear.
fn hint(message: &str) -> Option<&'static str> {
    let said = |what: &str| message.contains(what);
    if said("[queue]") && said("expected a sequence") {
        Some("queues are an array of tables: write [[queue]] (double brackets), once per queue")
    } else if said("unknown field `queues`") {
        Some("did you mean [[queue]]? (one table per queue, named in the singular)")
    } else if said("unknown field `schedules`") {
        Some("did you mean [[schedule]]? (one table per schedule, named in the singular)")
    } else if said("expected u32") || said("expected u64") || said("expected i64") {
        Some("this field takes a whole number, written without quotes (batch-size = 10)")
    } else if said("expected f64") {
        Some("this field takes a number, written without quotes (base-secs = 0.5)")
    } else if said("expected a boolean") {
        Some("this field takes true or false, written without quotes")
    } else {
        None
    }
}

fn default_queue() -> RawQueue {
    RawQueue {
        name: Some("reminders".into()),
        plugin: Some("email-reminder".into()),
        ..RawQueue::default()
    }
}

fn in_range<T: PartialOrd + std::fmt::Display>(
    field: &str,
    v: T,
    lo: T,
    hi: T,
) -> anyhow::Result<()> {
    if v < lo || v > hi {
        bail!("{field} is {v}; it must be between {lo} and {hi}");
    }
    Ok(())
}

fn queue(index: usize, q: RawQueue) -> anyhow::Result<QueueConfig> {
    let field = |f: &str| format!("queue[{index}].{f}");
    let (format, routes) = format::format_of(&q, &field)?;
    let name = q
        .name
        .with_context(|| format!("{} is required", field("name")))?;
    if !valid_queue_name(&name) {
        bail!("{} `{name}` is not a valid queue name", field("name"));
    }
    // A queue routed by its table alone names its first route's plugin where one plugin
    // stands for the queue (its dead letters' verdicts, its metrics).
    let plugin = (routes.default.clone())
        .or_else(|| routes.table.values().next().cloned())
        .with_context(|| format!("{} is required", field("plugin")))?;
    let visibility = q.visibility_timeout_secs.unwrap_or(30);
    in_range(&field("visibility-timeout-secs"), visibility, 1, 43_200)?;
    let wait = q.wait_time_secs.unwrap_or(20);
    in_range(&field("wait-time-secs"), wait, 0, 20)?;
    let batch = q.batch_size.unwrap_or(10);
    in_range(&field("batch-size"), batch, 1, 10)?;
    let pollers = q.pollers.unwrap_or(1);
    in_range(&field("pollers"), pollers, 1, 16)?;
    let priority = q.priority.unwrap_or(0);
    in_range(&field("priority"), priority, 0, 100)?;
    let dead_letter = q.dead_letter.unwrap_or_else(|| default_dead_letter(&name));
    if !valid_queue_name(&dead_letter) || dead_letter == name {
        bail!(
            "{} `{dead_letter}` must be a valid queue name other than the queue's own",
            field("dead-letter")
        );
    }
    if let Some(max) = q.max_receives {
        in_range(&field("max-receives"), max, 1, 1000)?;
    }
    if let Some(url) = &q.url
        && !(url.starts_with("https://") || url.starts_with("http://"))
    {
        bail!("{} `{url}` must be an http(s) URL", field("url"));
    }
    Ok(QueueConfig {
        name,
        url: q.url,
        plugin,
        visibility: Duration::from_secs(visibility.into()),
        wait: Duration::from_secs(wait.into()),
        batch_size: batch as usize,
        pollers: pollers as usize,
        priority,
        dead_letter,
        format,
        routes,
        max_receives: q.max_receives,
        heartbeat: q.heartbeat.unwrap_or(true),
        capture: (q.capture.as_ref())
            .map(|raw| capture::capture(&field("capture"), raw))
            .transpose()?,
    })
}

/// `NAME-dlq`; for a FIFO queue `STEM-dlq.fifo`, since its dead-letter queue must be FIFO too.
fn default_dead_letter(name: &str) -> String {
    match name.strip_suffix(".fifo") {
        Some(stem) => format!("{stem}-dlq.fifo"),
        None => format!("{name}-dlq"),
    }
}

fn check_unique(queues: &[QueueConfig]) -> anyhow::Result<()> {
    for (i, q) in queues.iter().enumerate() {
        if queues[..i].iter().any(|p| p.name == q.name) {
            bail!("queue[{i}].name `{}` is configured twice", q.name);
        }
    }
    Ok(())
}

fn source_kind(raw: file::RawSource, max_in_flight: u32, lanes: u32) -> anyhow::Result<SourceKind> {
    let kind = raw.kind.as_deref().unwrap_or("local");
    if kind != "rabbitmq" {
        rabbitmq::refuse_fields(&raw, kind)?;
    }
    if kind != "pgmq"
        && let Some((field, _)) = pgmq::only_pgmq(&raw).into_iter().find(|(_, set)| *set)
    {
        bail!("source.{field} is only for kind = \"pgmq\" (this source is `{kind}`)");
    }
    if kind != "nats"
        && let Some((field, _)) = nats::only_nats(&raw).into_iter().find(|(_, set)| *set)
    {
        bail!("source.{field} is only for kind = \"nats\" (this source is `{kind}`)");
    }
    if !matches!(kind, "pgmq" | "nats") && raw.ca_file.is_some() {
        bail!("source.ca-file is only for kind = \"pgmq\" or \"nats\" (this source is `{kind}`)");
    }
    match kind {
        "local" if raw.region.is_some() || raw.endpoint_url.is_some() => {
            bail!("source.region and source.endpoint-url are only for kind = \"sqs\"")
        }
        "local" => Ok(SourceKind::Local),
        "sqs" => {
            if let Some(url) = &raw.endpoint_url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                bail!("source.endpoint-url `{url}` must be an http(s) URL");
            }
            Ok(SourceKind::Sqs(crate::aws::AwsSettings {
                region: raw.region,
                endpoint_url: raw.endpoint_url,
                deadlines: crate::aws::AwsDeadlines::SQS,
            }))
        }
        "rabbitmq" => Ok(SourceKind::Rabbitmq(rabbitmq::settings(
            raw,
            max_in_flight,
        )?)),
        "pgmq" => Ok(SourceKind::Pgmq(pgmq::settings(raw, max_in_flight, lanes)?)),
        "nats" => Ok(SourceKind::Nats(nats::settings(raw)?)),
        other => {
            bail!(
                "source.kind `{other}` is not supported; expected `local`, `sqs`, `rabbitmq`, `pgmq` or `nats`"
            )
        }
    }
}

fn store_kind(
    raw: file::RawIdempotency,
    max_in_flight: u32,
    lanes: u32,
) -> anyhow::Result<StoreKind> {
    let kind = raw.kind.as_deref().unwrap_or("local");
    match kind {
        "local"
            if raw.url.is_some()
                || raw.urls.is_some()
                || raw.cluster.is_some()
                || raw.ca_file.is_some() =>
        {
            bail!(
                "idempotency.url, urls, cluster and ca-file are only for kind = \"redis\" or \"postgres\""
            )
        }
        "local" | "redis"
            if raw.password.is_some() || raw.schema.is_some() || raw.pool_size.is_some() =>
        {
            bail!(
                "idempotency.password, schema and pool-size are only for kind = \"postgres\" (a Redis URL carries its password)"
            )
        }
        "local" => Ok(StoreKind::Local),
        "redis" => Ok(StoreKind::Redis(redis_target(raw)?)),
        "postgres" => Ok(StoreKind::Postgres(postgres::settings(
            raw,
            max_in_flight,
            lanes,
        )?)),
        other => bail!(
            "idempotency.kind `{other}` is not supported; expected `local`, `redis` or `postgres`"
        ),
    }
}

/// `url` for one server; `cluster = true` with `url` or `urls` (seed nodes) for a cluster.
fn redis_target(raw: file::RawIdempotency) -> anyhow::Result<RedisTarget> {
    let cluster = raw.cluster.unwrap_or(false);
    // The error names the field the user wrote.
    let field = if raw.urls.is_some() { "urls" } else { "url" };
    let urls = match (raw.url, raw.urls) {
        (Some(_), Some(_)) => bail!("idempotency: set url or urls, not both"),
        (None, Some(_)) if !cluster => {
            bail!("idempotency.urls lists a cluster's seed nodes: set cluster = true, or use url")
        }
        (None, Some(urls)) if urls.is_empty() => bail!("idempotency.urls is empty"),
        (None, Some(urls)) => urls,
        (Some(url), None) => vec![url],
        (None, None) => vec!["redis://127.0.0.1:6379/".into()],
    };
    for url in &urls {
        if !url.starts_with("redis://") && !url.starts_with("rediss://") {
            bail!(
                "idempotency.{field}: `{}` must start with redis:// or rediss://",
                redacted(url)
            );
        }
    }
    let ca_file = raw.ca_file;
    if ca_file.is_some() && !urls.iter().all(|u| u.starts_with("rediss://")) {
        bail!("idempotency.ca-file is for rediss:// (TLS) URLs");
    }
    Ok(RedisTarget {
        urls,
        cluster,
        ca_file,
        deadlines: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_mistakes_say_what_to_write_instead() {
        let cases = [
            (
                "[queue]\nname = \"q\"\nplugin = \"p\"\n",
                "write [[queue]] (double brackets)",
            ),
            (
                "[[queues]]\nname = \"q\"\nplugin = \"p\"\n",
                "did you mean [[queue]]?",
            ),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"p\"\nbatch-size = \"10\"\n",
                "a whole number, written without quotes",
            ),
            (
                "[retry]\nbase-secs = \"1\"\n",
                "a number, written without quotes",
            ),
            ("watch-plugins = \"yes\"\n", "true or false"),
        ];
        for (text, hint) in cases {
            let message = format!("{:#}", Config::parse(text).unwrap_err());
            assert!(message.contains(hint), "{text}: {message}");
        }
        let message = format!("{:#}", Config::parse("plugn = 1\n").unwrap_err());
        assert!(!message.contains("without quotes"), "{message}");
    }

    #[test]
    fn a_files_relative_paths_are_relative_to_its_directory() {
        let mut raw = parse_raw(
            "plugins-dir = \"p\"\ncompiled-cache = \"c\"\n[secrets]\ndirs = [\"s\", \"/abs\"]\n[http]\nca-file = \"ca.pem\"\n",
        )
        .unwrap();
        raw.relative_to(std::path::Path::new("/etc/qhost"));
        let config = Config::from_raw(raw).unwrap();
        assert_eq!(config.plugins_dir, PathBuf::from("/etc/qhost/p"));
        assert_eq!(
            config.data_dir,
            Some(PathBuf::from("/etc/qhost/.qhost")),
            "defaults too"
        );
        assert_eq!(
            config.secrets.dirs,
            [PathBuf::from("/etc/qhost/s"), PathBuf::from("/abs")]
        );
        assert_eq!(
            config.http_ca_file,
            Some(PathBuf::from("/etc/qhost/ca.pem"))
        );
        assert_eq!(config.compiled_cache, Some(PathBuf::from("/etc/qhost/c")));
    }

    #[test]
    fn no_file_means_the_embedded_demo() {
        let c = Config::default();
        assert_eq!(c.source, SourceKind::Local);
        assert_eq!(c.queues.len(), 1);
        assert_eq!(c.queues[0].name, "reminders");
        assert_eq!(c.queues[0].plugin, "email-reminder");
        assert_eq!(c.queues[0].dead_letter, "reminders-dlq");
        assert_eq!(c.plugins_dir, PathBuf::from("plugins"));
    }

    #[test]
    fn a_full_file_parses() {
        let c = Config::parse(
            "plugins-dir = \"p\"\nmax-in-flight = 4\nlanes = 2\n[retry]\nbase-secs = 0.05\nmax-secs = 10\n\
             [[queue]]\nname = \"jobs\"\nplugin = \"worker\"\nvisibility-timeout-secs = 5\n\
             wait-time-secs = 1\nbatch-size = 3\ndead-letter = \"dead\"\nmax-receives = 9\n",
        )
        .unwrap();
        let q = c.queue("jobs").unwrap();
        assert_eq!(
            (q.batch_size, q.dead_letter.as_str(), q.max_receives),
            (3, "dead", Some(9))
        );
        assert_eq!(c.retry.base, Duration::from_millis(50));
        let fifo = Config::parse("[[queue]]\nname = \"orders.fifo\"\nplugin = \"p\"\n").unwrap();
        assert_eq!(fifo.queues[0].dead_letter, "orders-dlq.fifo");
        assert_eq!((c.max_in_flight, c.lanes), (4, 2));
        assert_eq!(fifo.lanes, 1, "one lane unless told");
    }

    fn error_of(text: &str) -> String {
        format!("{:#}", Config::parse(text).unwrap_err())
    }

    #[test]
    fn a_schedule_whose_ticks_sqs_would_refuse_is_refused() {
        let e = error_of(
            "[[schedule]]\nname = \"m\"\ncron = \"* * * * *\"\nqueue = \"q.fifo\"\ngroup = \"\"\n",
        );
        assert!(
            e.contains("schedule `m`: its ticks would be refused"),
            "{e}"
        );
    }

    #[test]
    fn every_bad_value_names_its_field() {
        let cases = [
            ("max-in-flight = 0", "max-in-flight"),
            ("lanes = 0", "lanes"),
            ("lanes = 65", "lanes"),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"p\"\nbatch-size = 11",
                "queue[0].batch-size",
            ),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"../p\"",
                "queue[0].plugin",
            ),
            ("[[queue]]\nname = \"q q\"\nplugin = \"p\"", "queue[0].name"),
            ("[[queue]]\nplugin = \"p\"", "queue[0].name is required"),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"p\"\nvisibility-timeout-secs = 0",
                "visibility-timeout-secs",
            ),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"p\"\ndead-letter = \"q\"",
                "queue[0].dead-letter",
            ),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"p\"\n[[queue]]\nname = \"q\"\nplugin = \"p\"",
                "configured twice",
            ),
            ("[source]\nkind = \"kafka\"", "source.kind"),
            ("[secrets]\nenv = [\"*\"]", "secrets.env `*`"),
            (
                "[secrets]\ndirs = [\"run/secrets\"]",
                "secrets.dirs `run/secrets`",
            ),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"p\"\npollers = 0",
                "queue[0].pollers",
            ),
            (
                "[source]\nkind = \"sqs\"\nendpoint-url = \"localhost:1\"",
                "source.endpoint-url",
            ),
            ("[source]\nregion = \"eu-west-1\"", "source.region"),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"p\"\nurl = \"q\"",
                "queue[0].url",
            ),
            (
                "[idempotency]\nkind = \"redis\"\nurl = \"http://x\"",
                "idempotency.url",
            ),
            ("[idempotency]\nurl = \"redis://x\"", "idempotency.url"),
            (
                "[idempotency]\nkind = \"redis\"\nurls = [\"redis://a:1\"]",
                "set cluster = true",
            ),
            (
                "[idempotency]\nkind = \"redis\"\ncluster = true\nurl = \"redis://a:1\"\nurls = [\"redis://b:1\"]",
                "url or urls, not both",
            ),
            (
                "[idempotency]\nkind = \"redis\"\ncluster = true\nurls = [\"redis://:pw@a:1\", \"http://:pw@b:1\"]",
                "idempotency.urls: `http://b:1` must start",
            ),
            ("[idempotency]\ncluster = true", "only for kind = \"redis\""),
            (
                "[idempotency]\nkind = \"redis\"\nurl = \"redis://a:1\"\nca-file = \"ca.pem\"",
                "ca-file is for rediss://",
            ),
            (
                "[idempotency]\nkind = \"redis\"\ncluster = true\nurl = \"http://a:1\"",
                "idempotency.url: `http://a:1` must start",
            ),
            ("[retry]\nbase-secs = 10\nmax-secs = 5", "retry.max-secs"),
            (
                "[retry]\nbase-secs = 0",
                "retry.base-secs is 0; it must be between 0.01",
            ),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"p\"\nroute-attribute = \"to\"",
                "queue[0].route-attribute needs queue[0].routes",
            ),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"p\"\nroutes = [\"../x\"]",
                "queue[0].routes",
            ),
            ("max-in-flite = 3", "unknown field `max-in-flite`"),
            (
                "[[queue]]\nname = \"q\"\nplugin = \"p\"\nvisiblity = 3",
                "unknown field `visiblity`",
            ),
            ("max-in-flight = \"many\"", "max-in-flight"),
        ];
        for (text, field) in cases {
            let err = error_of(text);
            assert!(err.contains(field), "expected `{field}` in: {err}");
        }
    }
}
