//! qhost: a host process for queue message handlers compiled to WebAssembly components.
//!
//! SQS delivers at least once, so the same message can reach two workers minutes apart. qhost
//! takes an atomic lease on the message's idempotency key before its handler runs, remembers
//! completed keys for a dedup window, keeps leases and visibility alive while a handler runs,
//! and sends the handler's outgoing messages through an outbox so they go out once. Handlers
//! are sandboxed components that implement the `qhost:handler` WIT world.
//!
//! # Layout
//!
//! | module          | role                                                                  |
//! |-----------------|-----------------------------------------------------------------------|
//! | `config`        | the TOML file, checked into a `config::Config`                      |
//! | `message`       | the `qhost-message` crate: the message types; `message::wire`, the   |
//! |                 | wire contract; `message::rules`, SQS's rules for a message to be sent |
//! | `source`        | the queue boundary: its contract is the `qhost-source` crate's       |
//! |                 | (`QueueSource`, `Capabilities`); `sqs` and `local` (SQLite), the     |
//! |                 | `qhost-source-sqs` and `qhost-source-local` crates                   |
//! | `idempotency`   | the store: its contract is the `qhost-store` crate's (leases and     |
//! |                 | completed records, shared records, the fleet-wide rate, state reads, |
//! |                 | claims and the store's clock, flow slots, what a completion commits, |
//! |                 | the conformance suite); here, the keys the host derives; `local` and |
//! |                 | `redis`, the `qhost-store-local` and `qhost-store-redis` crates       |
//! | `runtime`       | the `qhost-runtime` crate: how one wasm call runs: engine, bindings, |
//! |                 | guest state, limits, the capabilities (outbox, HTTP, state, secrets) |
//! | `handler`       | `qhost-runtime`'s: the invocation contract, message in, outcome out  |
//! | `kv`            | plugins' state (`qhost-runtime`'s); here, `qhost kv`                  |
//! | `plugin`        | what the host serves: `plugin::Plugin`, manifests, secrets, loading |
//! |                 | (the one way into `runtime`), the registry, hot reload, status        |
//! | `payload`       | the `qhost-payload` crate: claim check: payload stores (Redis, S3,  |
//! |                 | local), pointers, the allow-list, the `[payload]` section           |
//! | `format`        | the `qhost-formats` crate (qhost's, Celery's, SNS, EventBridge, S3    |
//! |                 | events); here, keys by manifest, grants, and `qhost inspect`          |
//! | `celery`        | the `qhost-celery` crate (Celery's task messages, read and written);  |
//! |                 | here, `qhost check`'s reading of samples                              |
//! | `flow`          | flow control by key: a flow key per message, fleet-wide slots and rates |
//! |                 | per key (in the store), fair shares of a host's slots among keys      |
//! | `pipeline`      | the data path: receive, read, route, lease, run, one fate per delivery |
//! | `host`          | wiring: backends by configuration and start-up checks (`host::StartError`), |
//! |                 | pollers, lanes (the data path on a thread per core), shutdown         |
//! | `dlq`           | dead letters read and redriven (`qhost dlq`)                          |
//! | `queues`        | the operator's verbs on a configuration's queues: send, peek, purge, dlq |
//! | `oneshot`       | a plugin file's messages run outside a host (invoke, replay, test),   |
//! |                 | through the pipeline on in-memory parts; `invoke`: one message         |
//! | `rollout`       | canary rollout: a new version's share of keys, its fleet-wide record, the rules |
//! | `schedule`      | cron in qhost: ticks claimed once across a fleet, catch-up, overlap, pause, |
//! |                 | backfill; each host's scheduler and the operator's verbs (`qhost schedule`) |
//! | `fleet`         | the hosts sharing a store (each one's entry, written once a second) and |
//! |                 | the queues paused fleet-wide; the operator's verbs (`qhost fleet`)   |
//! | `replay`        | recorded messages through two versions of a plugin, compared (`replay`) |
//! | `fixture`       | realistic messages of each kind producers send (`qhost fixture`)      |
//! | `suite`         | a handler's tests as data: test files' cases in a canned world (`test`) |
//! | `capture`       | a sample of handled messages written for `qhost replay` (`[[queue]] capture`) |
//! | `scaffold`      | a new handler project in Rust, Python or JavaScript (`new`)           |
//! | `aws`           | the `qhost-aws` crate: the AWS configuration chain shared by the SQS |
//! |                 | and S3 backends, and the deadlines of their calls                     |
//! | `stats`         | counters per queue and plugin                                         |
//! | `faults`        | failed backend calls by operation (timeouts apart), logged per burst  |
//! | `progress`      | when each queue last finished a message, for readiness                |
//! | `metrics`       | Prometheus metrics, reading the counters at scrape time               |
//! | `admin`         | the admin listener: `/metrics`, `/healthz`, `/readyz`; readiness      |
//! | `traces`        | OpenTelemetry spans per message, OTLP export, W3C context on messages |
//! | `redis_link`    | the `qhost-redis-link` crate: the Redis link                          |
//! | `digest`        | `qhost-message`'s: sha256 as hex, the one digest form qhost writes    |
//! | `testing`       | what the tests and benchmarks reach into (feature `test-support`)     |
//!
//! Every module is crate-private. What an embedder uses is re-exported at the crate root (below):
//! the host and its configuration, the message types, the three boundary traits with their
//! errors and implementations, plugins and their outcomes, the operator's verbs (`Queues`,
//! `invoke_file`), and the read side of stats, metrics, the admin listener and traces. What the
//! workspace's tests reach for beyond that is in `testing`, behind the `test-support` feature.
//! `unreachable_pub` (a workspace lint) keeps every other item crate-private.

#![deny(unsafe_code)]

mod admin;
mod capture;
mod celery;
mod config;
mod dlq;
mod faults;
mod fixture;
pub mod fleet;
mod flow;
mod format;
mod host;
mod idempotency;
mod kv;
mod logging;
// The workspace's lower crates, under the module names the host's code has always used.
pub(crate) use qhost_aws as aws;
pub(crate) use qhost_message as message;
pub(crate) use qhost_message::digest;
pub(crate) use qhost_payload as payload;
pub(crate) use qhost_redis_link as redis_link;
pub(crate) use qhost_runtime as runtime;
pub(crate) use qhost_runtime::handler;
mod metrics;
mod oneshot;
mod pipeline;
mod plugin;
mod progress;
mod queues;
mod recent;
mod replay;
mod rollout;
mod scaffold;
pub mod schedule;
mod source;
mod stats;
mod suite;
mod traces;

// The embedding API: what the `qhost` command, the tests and the benches use, each name once,
// the boundaries' parts grouped in a module each. Everything else is crate-private: the
// pipeline's stages, the runtime's internals, the counters' writers.

// The host and its configuration.
pub use config::deadlines::Deadlines;
pub use config::load::Overrides;
pub use config::typo::nearest;
pub use config::{Config, DEFAULT_ADMIN_LISTEN, MessageFormat, RetryPolicy, SourceKind};
pub use host::Host;
pub use host::open::{StartError, check_deadlines, check_store, load_plugins, runtime_for};

// Messages.
pub use message::{Attribute, AttributeValue, Outgoing, Received};

/// The idempotency store: its contract (`qhost-store`) and its backends.
pub mod stores {
    pub use crate::idempotency::local::LocalStore;
    pub use crate::idempotency::postgres::{PgTarget, PostgresStore, PostgresTarget};
    pub use crate::idempotency::redis::RedisStore;
    pub use crate::redis_link::{RedisDeadlines, RedisTarget};
    pub use qhost_store::commit::{BucketCommit, Op, StateCommit};
    pub use qhost_store::rate::Rate;
    pub use qhost_store::slots::{Slot, SlotAnswer, SlotRequest};
    pub use qhost_store::{
        Acquired, Committed, Completion, FleetRate, FlowSlots, IdempotencyError, IdempotencyStore,
        KeyStatus, Lease, LeaseRequest, Released, Store, StoreResult,
    };
}

/// Where messages come from: the source contract (`qhost-source`) and its sources.
pub mod sources {
    pub use crate::aws::AwsDeadlines;
    pub use crate::source::local::LocalQueue;
    pub use crate::source::nats::{NatsAuth, NatsQueue, NatsSettings};
    pub use crate::source::pgmq::{PgmqQueue, PgmqSettings, outbox_row as pgmq_outbox_row};
    pub use crate::source::rabbitmq::{DelayBy, QueueType, RabbitQueue, RabbitSettings};
    pub use crate::source::sqs::SqsQueue;
    pub use qhost_source::{Capabilities, QueueAdmin, QueueDepth, QueueSource, SourceError};
}

/// Where large payloads go (the claim check).
pub mod payloads {
    pub use crate::host::open::{open_payloads as open, open_payloads_with_s3 as open_with_s3};
    pub use crate::payload::Payloads;
    pub use crate::payload::redis::RedisPayloads;
    pub use crate::payload::s3::S3Payloads;
    pub use crate::payload::store::{PayloadError, PayloadStore};
}

/// Plugins: loading, checking, what a host serves, the runtime they run in.
pub mod plugins {
    pub use crate::plugin::Plugin;
    pub use crate::plugin::inspect::check_file as check_plugin_file;
    pub use crate::plugin::loader::{load_file as load_plugin, version_of as plugin_version};
    pub use crate::plugin::manifest::Manifest;
    pub use crate::plugin::registry::Registry;
    pub use crate::plugin::status::HostPlugins;
    pub use crate::runtime::Costs;
    pub use crate::runtime::Runtime;
    pub use crate::runtime::{WASMTIME_VERSION, WIT_PACKAGE};
}

/// The invocation contract: what a handler is given and what it answers.
pub mod handlers {
    pub use crate::handler::{Failure, HandlerMessage, Invocation, Invoke, Outcome};
}

/// `qhost test`: handler test files, run and recorded.
pub mod handler_tests {
    pub use crate::suite::{
        Recorded, TestRun, Watch as TestWatch, record_cases, run_files, test_files,
        watched as watched_by_tests,
    };
}

/// `qhost replay`: recorded messages through two versions of a plugin, compared.
pub mod replays {
    pub use crate::replay::{Compared, Finding, Replay, Run, Side, replay_files};
}

// Handler state, as an operator reads and writes it.
pub use kv::inspect::{kv_get, kv_list};
pub use qhost_runtime::kv::{Op as StateOp, StateCommit};

// What an operator runs against a configuration: the queue verbs, one message through one
// plugin file, a Celery configuration's check, a rollout by hand, a new handler project.
pub use celery::inspect::{CeleryReport, inspect as inspect_celery};
pub use fixture::{Fixture, fixture, wrap_as};
pub use format::inspect::{Inspected, inspect as inspect_message};
pub use oneshot::{InvokeRequest, Ran, invoke_batch_file, invoke_file};
pub use qhost_source::Purged;
pub use queues::{DeadLetter, Queues};
pub use rollout::by_hand::decide_by_hand as decide_rollout;
pub use rollout::record::{RolloutRecord, Tally};
pub use scaffold::{Language, Shape as HandlerShape, create as create_project};

// Seeing a running host.
pub use admin::AdminServer;
pub use logging::{LogFormat, Verbosity, Voice, init as init_logging};
pub use stats::Counts;
pub use traces::Tracer;
pub use traces::install::Traces;

/// What the tests and benchmarks reach into (the `test-support` feature).
#[cfg(feature = "test-support")]
pub mod testing;
