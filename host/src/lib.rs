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
//! | [`config`]      | the TOML file, checked into a [`config::Config`]                      |
//! | [`message`]     | the host's message types; [`message::wire`], the wire contract (leaf); |
//! |                 | [`message::rules`], SQS's rules for a message to be sent              |
//! | [`source`]      | the queue boundary ([`source::QueueSource`]); `sqs`, `local` (SQLite)  |
//! | [`idempotency`] | leases and completed records ([`idempotency::IdempotencyStore`]); keys; |
//! |                 | the fleet-wide rate limit ([`idempotency::rate`])                     |
//! | [`handler`]     | the invocation contract: message in, outcome out ([`handler::Invoke`]) |
//! | [`runtime`]     | how one wasm call runs: engine, bindings, guest state, limits,       |
//! |                 | outbound HTTP by grant (`runtime::http`); imports nothing of `plugin` |
//! | [`plugin`]      | what the host serves: [`plugin::Plugin`], manifests, secrets, loading |
//! |                 | (the one way into `runtime`), the registry, hot reload, status        |
//! | [`payload`]     | claim check: payload stores (Redis, S3, local), pointers, allow-list  |
//! | `pipeline`      | the data path: receive, route, lease, run, one fate per delivery      |
//! | [`host`]        | wiring: backends by configuration and start-up checks ([`host::StartError`]), |
//! |                 | pollers, shutdown                                                     |
//! | [`dlq`]         | dead letters read and redriven (`qhost dlq`)                          |
//! | [`oneshot`]     | one message through one plugin file, no queue or store (`invoke`)     |
//! | [`scaffold`]    | a new handler project in Rust, Python or JavaScript (`new`)           |
//! | [`aws`]         | the AWS configuration chain shared by the SQS and S3 backends, and   |
//! |                 | the deadlines of their calls                                          |
//! | [`stats`]       | counters per queue and plugin                                         |
//! | [`faults`]      | failed backend calls by operation (timeouts apart), logged per burst  |
//! | `progress`      | when each queue last finished a message, for readiness                |
//! | [`metrics`]     | Prometheus metrics, reading the counters at scrape time               |
//! | [`admin`]       | the admin listener: `/metrics`, `/healthz`, `/readyz`; readiness      |
//! | [`traces`]      | OpenTelemetry spans per message, OTLP export, W3C context on messages |
//! | `sqlite`        | the embedded database behind the local backends                       |
//! | `digest`        | sha256 as hex, the one digest form qhost writes                       |
//!
//! Only the embedding API is public: the host, its configuration, the message types, the
//! backend traits with their implementations, and plugins. The pipeline's stages are
//! crate-private.

#![deny(unsafe_code)]

pub mod admin;
pub mod aws;
pub mod config;
mod digest;
pub mod dlq;
pub mod faults;
pub mod handler;
pub mod host;
pub mod idempotency;
pub mod logging;
pub mod message;
pub mod metrics;
pub mod oneshot;
pub mod payload;
mod pipeline;
pub mod plugin;
mod progress;
pub mod redis_link;
pub mod runtime;
pub mod scaffold;
pub mod source;
mod sqlite;
pub mod stats;
pub mod traces;

pub use config::Config;
pub use host::Host;
