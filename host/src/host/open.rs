//! Opening the backends a configuration names, and the checks that refuse a start which would
//! fail later: a missing SQS queue or dead-letter queue, a queue routed to a plugin with no
//! file or one that did not load, a plugin that may outlive a message's visibility without a
//! heartbeat. Each refusal is a [`StartError`] an embedder can branch on, with the field to fix.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;

use super::SPARE_INSTANCES;
use crate::aws::AwsSettings;
use crate::config::{
    Config, NatsSourceSettings, PgConnection, PgmqSourceSettings, PostgresStoreSettings,
    SourceKind, StoreKind,
};
use crate::idempotency::Store;
use crate::idempotency::local::LocalStore;
use crate::idempotency::postgres::{PgTarget, PostgresStore, PostgresTarget};
use crate::idempotency::redis::RedisStore;
use crate::payload::Payloads;
use crate::payload::s3::S3Payloads;
use crate::plugin::loader;
use crate::plugin::registry::Registry;
use crate::plugin::reload::PluginDir;
use crate::runtime::{EngineSettings, Runtime};
use crate::source::local::{LocalQueue, Redrive};
use crate::source::nats::{NatsQueue, NatsSettings};
use crate::source::pgmq::{PgmqQueue, PgmqSettings};
use crate::source::rabbitmq::{RabbitQueue, RabbitSettings};
use crate::source::sqs::SqsQueue;
use crate::source::{QueueAdmin, SourceError};

/// Why the host refused to start: each names what to fix. Other failures at start (a store
/// that cannot be reached, a file that cannot be read) stay plain errors with their context.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A queue the configuration names does not exist.
    #[error("{}{broker} queue `{queue}` does not exist", .field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
    NoQueue {
        /// The broker (`SQS`, `RabbitMQ`).
        broker: &'static str,
        /// The configuration field that names it (`queue[0].dead-letter`), if one does.
        field: Option<String>,
        /// The queue's name.
        queue: String,
    },
    /// The broker could not be asked whether a queue exists.
    #[error("cannot reach {broker} to resolve queue `{queue}`: {error}")]
    Unreachable {
        /// The broker (`SQS`, `RabbitMQ`).
        broker: &'static str,
        /// The queue being resolved.
        queue: String,
        /// What the call said (in the message, so not also a cause that `{:#}` would repeat).
        error: SourceError,
    },
    /// The plugins directory does not exist.
    #[error(
        "plugins directory {} does not exist: create it and put NAME.wasm files there, or name another with plugins-dir (--plugins-dir)",
        .dir.display()
    )]
    NoPluginsDir {
        /// The directory, absolute.
        dir: PathBuf,
    },
    /// A queue routes to a plugin with no file in the plugins directory.
    #[error(
        "queue[{index}].plugin: queue `{queue}` routes to plugin `{plugin}`, but there is no {plugin}.wasm in {} (found: {})",
        .dir.display(),
        if .found.is_empty() { "none".to_string() } else { .found.join(", ") }
    )]
    NoPluginFile {
        /// The queue's place in the configuration.
        index: usize,
        /// The queue's name.
        queue: String,
        /// The plugin it names.
        plugin: String,
        /// The plugins directory.
        dir: PathBuf,
        /// The plugins the directory holds.
        found: Vec<String>,
    },
    /// A queue routes to a plugin (its own, or one of its routes) that did not load.
    #[error(
        "queue[{index}]: queue `{queue}` routes to plugin `{plugin}`, which did not load: {reason}\n\
         check it with `qhost plugins check {}`; to start anyway, with this queue waiting \
         unconsumed until the plugin loads, set allow-unloaded-plugins = true \
         (or `qhost run --allow-unloaded-plugins`)",
        .file.display()
    )]
    PluginNotLoaded {
        /// The queue's place in the configuration.
        index: usize,
        /// The queue's name.
        queue: String,
        /// The plugin that did not load.
        plugin: String,
        /// Its load error, or that no file loaded.
        reason: String,
        /// Its file.
        file: PathBuf,
    },
    /// Without a heartbeat, a plugin may run longer than its message stays hidden.
    #[error(
        "queue[{index}].heartbeat is false and `{queue}` hides a message for {visibility:?}, but plugin `{plugin}` may run for {timeout:?} (limits.timeout-ms): its messages would be delivered again while they run"
    )]
    OutlivesVisibility {
        /// The queue's place in the configuration.
        index: usize,
        /// The queue's name.
        queue: String,
        /// How long it hides a received message.
        visibility: std::time::Duration,
        /// The plugin.
        plugin: String,
        /// How long the plugin may run.
        timeout: std::time::Duration,
    },
    /// On RabbitMQ, a plugin may run longer than the broker lets a delivery stay unacked.
    #[error(
        "queue[{index}] `{queue}`: plugin `{plugin}` may run for {timeout:?} (limits.timeout-ms), but RabbitMQ closes the channel of a delivery unacknowledged for {consumer_timeout:?} (source.consumer-timeout-ms), and qhost keeps a run within half of it ({longest:?}): lower the plugin's timeout, or raise the broker's consumer_timeout and source.consumer-timeout-ms with it"
    )]
    OutlivesConsumerTimeout {
        /// The queue's place in the configuration.
        index: usize,
        /// The queue's name.
        queue: String,
        /// The broker's consumer timeout, as configured.
        consumer_timeout: std::time::Duration,
        /// The longest run kept within it.
        longest: std::time::Duration,
        /// The plugin.
        plugin: String,
        /// How long the plugin may run.
        timeout: std::time::Duration,
    },
}

/// The local queue's redrive policies, from the queue configuration.
fn redrives(config: &Config) -> HashMap<String, Redrive> {
    config
        .queues
        .iter()
        .filter_map(|q| {
            let max_receives = q.max_receives?;
            Some((
                q.name.clone(),
                Redrive {
                    dead_letter: q.dead_letter.clone(),
                    max_receives,
                },
            ))
        })
        .collect()
}

/// Opens the queue backend the configuration names: the one place a source kind becomes a
/// source, for the host, the operator's commands and the schedules alike. The pipeline takes
/// its `QueueSource` face; an operator's command its `QueueAdmin` verbs. For SQS, the queues
/// must exist: `only` these, or every consumed queue and its dead-letter queue; a missing one
/// (or an unreachable endpoint) is one clear error here, not a stream of failures later.
pub(crate) async fn open_source(
    config: &Config,
    only: Option<&[&str]>,
) -> anyhow::Result<Arc<dyn QueueAdmin>> {
    match &config.source {
        SourceKind::Local => Ok(Arc::new(open_local(config)?)),
        SourceKind::Sqs(settings) => Ok(Arc::new(open_sqs(config, settings, only).await?)),
        SourceKind::Rabbitmq(settings) => {
            Ok(Arc::new(open_rabbitmq(config, settings, only).await?))
        }
        SourceKind::Pgmq(settings) => Ok(Arc::new(open_pgmq(config, settings, only).await?)),
        SourceKind::Nats(settings) => Ok(Arc::new(open_nats(config, settings, only).await?)),
    }
}

/// Connects to NATS with `settings` and creates (or, with `declare = false`, checks) `only`
/// these queues' streams and consumers, or every consumed queue's with its dead-letter stream,
/// as [`open_rabbitmq`] does. Each consumer qhost creates holds a delivery for its queue's
/// visibility timeout (`ack_wait`).
async fn open_nats(
    config: &Config,
    settings: &NatsSourceSettings,
    only: Option<&[&str]>,
) -> anyhow::Result<NatsQueue> {
    let holds = (config.queues.iter())
        .map(|q| (q.name.clone(), q.visibility))
        .collect();
    let tls = match settings.servers.iter().any(|s| s.starts_with("tls://")) {
        true => Some(qhost_runtime::http::tls_client(
            settings.ca_file.as_deref(),
        )?),
        false => None,
    };
    let nats = NatsQueue::connect(NatsSettings {
        servers: settings.servers.clone(),
        auth: settings.auth.clone(),
        tls,
        declare: settings.declare,
        consumer: settings.consumer.clone(),
        holds,
        default_hold: std::time::Duration::from_secs(30),
        max_deliver: settings.max_deliver,
        timeout: std::time::Duration::from_secs(5),
    })
    .await?;
    prepare_queues(config, only, "NATS JetStream", &nats).await?;
    Ok(nats)
}

impl Prepare for NatsQueue {
    fn prepare(
        &self,
        queue: &str,
        dead_letter: &str,
    ) -> impl Future<Output = Result<(), SourceError>> + Send {
        NatsQueue::prepare(self, queue, dead_letter)
    }
}

/// Connects to pgmq's database with `settings` and creates (or, with `declare = false`,
/// checks) `only` these queues, or every consumed queue with its dead-letter queue, as
/// [`open_rabbitmq`] does.
async fn open_pgmq(
    config: &Config,
    settings: &PgmqSourceSettings,
    only: Option<&[&str]>,
) -> anyhow::Result<PgmqQueue> {
    let pgmq = PgmqQueue::new(PgmqSettings {
        pg: pg_target(&settings.db)?,
        declare: settings.declare,
        install: settings.install,
        poll: settings.poll,
        notify: settings.notify,
    })?;
    prepare_queues(config, only, "pgmq", &pgmq).await?;
    Ok(pgmq)
}

/// A source that declares its queues (or checks them) before it serves them.
trait Prepare: QueueAdmin {
    /// Makes `queue` and its `dead_letter` queue ready, as the source's settings say.
    fn prepare(
        &self,
        queue: &str,
        dead_letter: &str,
    ) -> impl Future<Output = Result<(), SourceError>> + Send;
}

impl Prepare for RabbitQueue {
    fn prepare(
        &self,
        queue: &str,
        dead_letter: &str,
    ) -> impl Future<Output = Result<(), SourceError>> + Send {
        RabbitQueue::prepare(self, queue, dead_letter)
    }
}

impl Prepare for PgmqQueue {
    fn prepare(
        &self,
        queue: &str,
        dead_letter: &str,
    ) -> impl Future<Output = Result<(), SourceError>> + Send {
        PgmqQueue::prepare(self, queue, dead_letter)
    }
}

/// Prepares `only` these queues, or every consumed queue with its dead-letter queue, on
/// `broker`; a queue only named (a send's target, a dead-letter queue checked alone) must
/// exist.
async fn prepare_queues<S: Prepare>(
    config: &Config,
    only: Option<&[&str]>,
    broker: &'static str,
    source: &S,
) -> Result<(), StartError> {
    let started = |queue: &str, field: Option<String>, e: SourceError| match e {
        SourceError::UnknownQueue(_) => StartError::NoQueue {
            broker,
            field,
            queue: queue.to_string(),
        },
        error => StartError::Unreachable {
            broker,
            queue: queue.to_string(),
            error,
        },
    };
    match only {
        None => {
            for (i, q) in config.queues.iter().enumerate() {
                (source.prepare(&q.name, &q.dead_letter).await)
                    .map_err(|e| started(&q.name, Some(format!("queue[{i}].name")), e))?;
            }
        }
        Some(names) => {
            for name in names {
                let consumed = config.queues.iter().find(|q| q.name == *name);
                let prepared = match consumed {
                    Some(q) => source.prepare(&q.name, &q.dead_letter).await,
                    None => source.depth(name).await.map(drop),
                };
                prepared.map_err(|e| started(name, None, e))?;
            }
        }
    }
    Ok(())
}

/// Connects to RabbitMQ with `settings` and declares (or, with `declare = false`, checks)
/// `only` these queues, or every consumed queue with its dead-letter queue. A queue only named
/// (a send's target, a dead-letter queue checked alone) must exist.
async fn open_rabbitmq(
    config: &Config,
    settings: &RabbitSettings,
    only: Option<&[&str]>,
) -> anyhow::Result<RabbitQueue> {
    let rabbit = RabbitQueue::new(settings.clone());
    prepare_queues(config, only, "RabbitMQ", &rabbit).await?;
    Ok(rabbit)
}

/// The embedded queue in the configuration's data directory (in memory without one), with the
/// configured queues' redrive policies, refusing a send to a queue the configuration does not
/// declare (as SQS refuses one to a queue never created).
fn open_local(config: &Config) -> anyhow::Result<LocalQueue> {
    let queue = LocalQueue::open(config.database().as_deref(), redrives(config))?;
    Ok(match config.local_queues() {
        Some(queues) => queue.with_queues(queues),
        None => queue,
    })
}

/// Connects to SQS with the configuration's `settings`, and checks that the queues exist:
/// `only` these, or every consumed queue and its dead-letter queue. A one-off command that uses
/// one queue names it, so it works before the configuration's other queues are created.
async fn open_sqs(
    config: &Config,
    settings: &AwsSettings,
    only: Option<&[&str]>,
) -> anyhow::Result<SqsQueue> {
    settings.check().await?;
    let sqs = SqsQueue::connect(settings).await;
    for q in &config.queues {
        if let Some(url) = &q.url {
            sqs.set_url(&q.name, url);
        }
    }
    match only {
        None => check_queues(&sqs, config).await?,
        Some(names) => {
            for name in names {
                check_queue(&sqs, name, None).await?;
            }
        }
    }
    Ok(sqs)
}

/// Resolves queue `name`, which configuration `field` names (if one does).
async fn check_queue(sqs: &SqsQueue, name: &str, field: Option<String>) -> Result<(), StartError> {
    sqs.url(name).await.map(drop).map_err(|e| match e {
        SourceError::UnknownQueue(_) => StartError::NoQueue {
            broker: "SQS",
            field,
            queue: name.to_string(),
        },
        error => StartError::Unreachable {
            broker: "SQS",
            queue: name.to_string(),
            error,
        },
    })
}

async fn check_queues(sqs: &SqsQueue, config: &Config) -> Result<(), StartError> {
    for (i, q) in config.queues.iter().enumerate() {
        for (field, name) in [("name", &q.name), ("dead-letter", &q.dead_letter)] {
            check_queue(sqs, name, Some(format!("queue[{i}].{field}"))).await?;
        }
    }
    Ok(())
}

/// Opens the payload stores the configuration's `[payload]` names: the one place the
/// claim check's stores are opened, for the host and the operator's `qhost send` alike.
pub async fn open_payloads(config: &Config) -> anyhow::Result<Payloads> {
    open_payloads_with_s3(config, None).await
}

/// As [`open_payloads`], with an S3 client the caller built (its own credentials, say).
pub async fn open_payloads_with_s3(
    config: &Config,
    s3: Option<S3Payloads>,
) -> anyhow::Result<Payloads> {
    let data_dir = config.data_dir.as_deref();
    Payloads::open(&config.payload, &config.namespace, data_dir, s3).await
}

/// Opens the idempotency backend the configuration names.
pub(crate) async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    match &config.store {
        StoreKind::Local => {
            let path = config.database();
            Ok(Arc::new(LocalStore::open(path.as_deref())?))
        }
        StoreKind::Redis(target) => Ok(Arc::new(RedisStore::connect_to(target).await?)),
        StoreKind::Postgres(settings) => {
            let store = open_postgres(settings).await?;
            Ok(Arc::new(beside_pgmq(config, store).await?))
        }
    }
}

/// `store`, writing outboxes into pgmq's queues in each completion's transaction when the
/// configuration's queues are pgmq's in the store's own database, reached as the same role:
/// the outbox is then never pending, and never sent twice. Where that cannot be told (pgmq's
/// database does not answer), the outbox is sent after the commit, as on any store.
async fn beside_pgmq(config: &Config, store: PostgresStore) -> anyhow::Result<PostgresStore> {
    let database = match shared_database(config).await {
        Ok(Some(database)) => database,
        Ok(None) => return Ok(store),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "could not tell whether the store and the queues share a database: outboxes are sent after each commit");
            return Ok(store);
        }
    };
    tracing::info!(
        database,
        "the store and the queues share a database: outboxes are written into pgmq's queues in each completion's transaction"
    );
    Ok(store.delivering_to_pgmq(crate::source::pgmq::outbox_row))
}

/// The database's name when the PostgreSQL store and the configuration's pgmq queues are in
/// the same database, reached as the same role; `None` otherwise (another store or source, or
/// another database).
async fn shared_database(config: &Config) -> anyhow::Result<Option<String>> {
    let (StoreKind::Postgres(store), SourceKind::Pgmq(queues)) = (&config.store, &config.source)
    else {
        return Ok(None);
    };
    let ours = identity(&store.db).await.context("the PostgreSQL store")?;
    let theirs = identity(&queues.db).await.context("pgmq's database")?;
    Ok((ours == theirs).then_some(ours.database))
}

/// Which database `db` reaches, as which role, asked over a connection of its own.
async fn identity(db: &PgConnection) -> anyhow::Result<qhost_postgres_link::Identity> {
    let pool = qhost_postgres_link::pool(&PgTarget {
        pool_size: 1,
        ..pg_target(db)?
    })?;
    qhost_postgres_link::identity(&pool).await
}

/// A PostgreSQL database as `qhost-postgres-link` connects to it (its CA file read).
fn pg_target(db: &PgConnection) -> anyhow::Result<PgTarget> {
    Ok(PgTarget {
        url: db.url.clone(),
        password: db.password.clone(),
        pool_size: db.pool_size,
        tls: qhost_runtime::http::tls_client(db.ca_file.as_deref())?,
        wait: db.deadlines.connect,
        statement_timeout: db.deadlines.statement,
    })
}

/// Where the PostgreSQL store is, as its crate connects to it.
fn postgres_target(settings: &PostgresStoreSettings) -> anyhow::Result<PostgresTarget> {
    Ok(PostgresTarget {
        pg: pg_target(&settings.db)?,
        schema: settings.schema.clone(),
    })
}

/// The PostgreSQL store in words, for errors: where, and which schema.
fn postgres_named(settings: &PostgresStoreSettings) -> String {
    let at = crate::redis_link::redacted(&settings.db.url);
    format!("the PostgreSQL store at {at} (schema {})", settings.schema)
}

/// Connects to the PostgreSQL store, migrating its schema.
async fn open_postgres(settings: &PostgresStoreSettings) -> anyhow::Result<PostgresStore> {
    let target = postgres_target(settings)?;
    (PostgresStore::connect(&target).await).with_context(|| postgres_named(settings))
}

/// What `qhost check` says of the store, without changing it: for PostgreSQL, whether it
/// answers and what version its schema is at (an error: one `qhost run` would refuse to start
/// on). `None` for the stores it does not reach out to.
pub async fn check_store(config: &Config) -> anyhow::Result<Option<String>> {
    let StoreKind::Postgres(settings) = &config.store else {
        return Ok(None);
    };
    let target = postgres_target(settings)?;
    let version =
        (PostgresStore::schema_version(&target).await).with_context(|| postgres_named(settings))?;
    let known = qhost_store_postgres::SCHEMA_VERSION;
    let schema = &settings.schema;
    let outbox = match shared_database(config).await.ok().flatten() {
        Some(database) => format!(
            "; outboxes written into pgmq's queues in each completion's transaction (one database, {database})"
        ),
        None => String::new(),
    };
    let store = match version {
        None => {
            format!("postgres, schema {schema} absent: `qhost run` creates it (version {known})")
        }
        Some(v) if v > known => anyhow::bail!(
            "postgres, schema {schema} is at version {v}, newer than this qhost knows ({known})"
        ),
        Some(v) if v < known => {
            format!("postgres, schema {schema} at version {v}: `qhost run` migrates it to {known}")
        }
        Some(v) => format!("postgres, schema {schema} at version {v}"),
    };
    Ok(Some(store + &outbox))
}

/// The engine sized for this configuration, with its compiled-code cache.
pub fn runtime_for(config: &Config) -> anyhow::Result<Runtime> {
    with_cache(engine_for(config)?, config)
}

/// The engine sized for this configuration (its CA file read), with no cache yet: nothing on
/// disk is created.
fn engine_for(config: &Config) -> anyhow::Result<Runtime> {
    let runtime = Runtime::new(EngineSettings {
        max_instances: config.max_in_flight as u32 + SPARE_INSTANCES,
        max_memory_mib: config.max_plugin_memory_mib,
        send: config.send_shape(),
        idle_instances: SPARE_INSTANCES / 2,
    })?
    .with_secrets(config.secrets.clone());
    match &config.http_ca_file {
        Some(ca_file) => runtime.with_http_ca(ca_file),
        None => Ok(runtime),
    }
}

/// `runtime` with the configuration's compiled-code cache (created if missing).
fn with_cache(runtime: Runtime, config: &Config) -> anyhow::Result<Runtime> {
    match &config.compiled_cache {
        Some(dir) => runtime.with_cache(dir),
        None => Ok(runtime),
    }
}

/// Loads the plugins directory into a new registry, logging each file that does not load, and
/// checks that every queue routes to a plugin that at least has a file there.
pub(crate) async fn open_plugins(config: &Config) -> anyhow::Result<Arc<PluginDir>> {
    // Everything that creates nothing is checked first (the directory, the engine's settings,
    // the routes' files), so a refused start leaves nothing behind, not even the
    // compiled-code cache under the data directory.
    check_dir(config)?;
    let engine = engine_for(config)?;
    check_routes(config, &config.plugins_dir)?;
    let plugins = open_plugins_on(config, with_cache(engine, config)?).await?;
    check_loaded(config, plugins.registry())?;
    check_deadlines(config, plugins.registry())?;
    Ok(plugins)
}

/// A queue whose plugin (or one of its routes) did not load would take none of its messages:
/// refused at start with the load error, unless the configuration allows it (the queue then
/// waits, unconsumed, until the plugin loads).
fn check_loaded(config: &Config, registry: &Registry) -> Result<(), StartError> {
    if config.allow_unloaded_plugins {
        return Ok(());
    }
    for (i, q) in config.queues.iter().enumerate() {
        for name in q.plugins() {
            if registry.get(name).is_some() {
                continue;
            }
            return Err(StartError::PluginNotLoaded {
                index: i,
                queue: q.name.clone(),
                plugin: name.to_string(),
                reason: registry.why_not_serving(name),
                file: config.plugins_dir.join(format!("{name}.wasm")),
            });
        }
    }
    Ok(())
}

/// Loads the plugins directory into a new registry, without checking the queues' routes.
pub(crate) async fn open_plugins_unchecked(config: &Config) -> anyhow::Result<Arc<PluginDir>> {
    check_dir(config)?;
    open_plugins_on(config, runtime_for(config)?).await
}

/// Loads the plugins directory on `runtime`.
async fn open_plugins_on(config: &Config, runtime: Runtime) -> anyhow::Result<Arc<PluginDir>> {
    let dir = config.plugins_dir.clone();
    let plugins = Arc::new(
        PluginDir::new(runtime, &dir, Arc::default())
            .with_rollout(config.rollout.clone(), config.data_dir.clone()),
    );
    let report = {
        let plugins = Arc::clone(&plugins);
        tokio::task::spawn_blocking(move || plugins.sync()).await??
    };
    // A consumed queue's plugin that did not load is the start's own report (its refusal, or
    // the queue's warning that it waits), so it is not logged here as well.
    let consumed = |name: &str| config.queues.iter().any(|q| q.plugins().any(|p| p == name));
    report.log_except(plugins.registry(), consumed);
    let counters = plugins.runtime().counters();
    tracing::info!(
        compiled = counters.compiled(),
        from_cache = counters.cache_hits(),
        "plugins ready"
    );
    Ok(plugins)
}

/// The plugins directory loaded as a host loads it (each file that does not load is logged and
/// reported by the registry), without the start-up checks of the queues' routes: what
/// `qhost check` and `qhost plugins list` look at.
pub async fn load_plugins(config: &Config) -> anyhow::Result<Arc<Registry>> {
    Ok(Arc::clone(open_plugins_unchecked(config).await?.registry()))
}

/// A plugin that may run longer than its message stays held is refused at start: without a
/// heartbeat nothing extends a message's visibility while its handler runs, so it would be
/// delivered again mid-run; on RabbitMQ nothing extends a delivery past the broker's
/// `consumer_timeout`, so a run is kept within half of it. `qhost check` reports the same.
pub fn check_deadlines(config: &Config, registry: &Registry) -> Result<(), StartError> {
    for (i, q) in config.queues.iter().enumerate() {
        for name in q.plugins() {
            let Some(plugin) = registry.get(name) else {
                continue;
            };
            let timeout = plugin.manifest.timeout();
            if let SourceKind::Rabbitmq(settings) = &config.source
                && timeout > settings.longest_hold()
            {
                return Err(StartError::OutlivesConsumerTimeout {
                    index: i,
                    queue: q.name.clone(),
                    consumer_timeout: settings.consumer_timeout,
                    longest: settings.longest_hold(),
                    plugin: name.to_string(),
                    timeout,
                });
            }
            if !q.heartbeat && timeout > q.visibility {
                return Err(StartError::OutlivesVisibility {
                    index: i,
                    queue: q.name.clone(),
                    visibility: q.visibility,
                    plugin: name.to_string(),
                    timeout,
                });
            }
        }
    }
    Ok(())
}

/// A queue naming a plugin with no file is a configuration mistake, refused at start.
/// The plugins directory must exist.
fn check_dir(config: &Config) -> Result<(), StartError> {
    let dir = config.plugins_dir.clone();
    if dir.is_dir() {
        return Ok(());
    }
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    Err(StartError::NoPluginsDir { dir })
}

fn check_routes(config: &Config, dir: &Path) -> anyhow::Result<()> {
    for (i, q) in config.queues.iter().enumerate() {
        if !dir.join(format!("{}.wasm", q.plugin)).is_file() {
            let found: Vec<String> = loader::plugin_files(dir)?
                .iter()
                .filter_map(|p| loader::plugin_name(p))
                .collect();
            return Err(StartError::NoPluginFile {
                index: i,
                queue: q.name.clone(),
                plugin: q.plugin.clone(),
                dir: dir.to_path_buf(),
                found,
            }
            .into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_field_to_fix_and_says_its_cause_once() {
        let missing = |field: Option<&str>| StartError::NoQueue {
            broker: "SQS",
            field: field.map(String::from),
            queue: "jobs-dlq".into(),
        };
        assert_eq!(
            missing(Some("queue[0].dead-letter")).to_string(),
            "queue[0].dead-letter: SQS queue `jobs-dlq` does not exist"
        );
        assert_eq!(
            missing(None).to_string(),
            "SQS queue `jobs-dlq` does not exist"
        );
        let unreachable = anyhow::Error::from(StartError::Unreachable {
            broker: "SQS",
            queue: "jobs".into(),
            error: SourceError::TimedOut("GetQueueUrl".into()),
        });
        assert_eq!(
            format!("{unreachable:#}"),
            "cannot reach SQS to resolve queue `jobs`: GetQueueUrl: no answer within the deadline"
        );
        let no_file = StartError::NoPluginFile {
            index: 1,
            queue: "jobs".into(),
            plugin: "mailer".into(),
            dir: PathBuf::from("/srv/plugins"),
            found: vec![],
        };
        assert_eq!(
            no_file.to_string(),
            "queue[1].plugin: queue `jobs` routes to plugin `mailer`, but there is no mailer.wasm in /srv/plugins (found: none)"
        );
    }
}
