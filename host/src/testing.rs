//! What the workspace's tests and benchmarks reach into beyond the embedding API: a host's
//! parts, the key and attribute forms the host writes, and the constants whose timing tests
//! wait on. Behind the `test-support` feature, and not kept stable: an embedder has no use for
//! any of it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::host::Host;
use crate::idempotency::Store;
use crate::message::Attribute;
use crate::payload::Payloads;
use crate::source::QueueSource;

/// The attribute names of qhost's wire contract (claim-check pointers, dead-letter verdicts).
pub mod wire {
    use crate::message::wire as w;

    pub const EXTENDED_SIZE: &str = w::EXTENDED_SIZE;
    pub const IDEMPOTENCY_KEY: &str = w::IDEMPOTENCY_KEY;
    pub const LEGACY_EXTENDED_SIZE: &str = w::LEGACY_EXTENDED_SIZE;
    pub const LEGACY_S3_POINTER_CLASS: &str = w::LEGACY_S3_POINTER_CLASS;
    pub const PAYLOAD_SHA256: &str = w::PAYLOAD_SHA256;
    pub const S3_POINTER_CLASS: &str = w::S3_POINTER_CLASS;
}

/// Sets this process's clock, as schedules read it, `ms` ahead (negative: behind), so that
/// tests can run hosts whose clocks are apart.
pub fn offset_schedule_clock(ms: i64) {
    crate::schedule::offset_by(ms);
}

/// Runs the store contract's conformance suite on `store` (every case at once, each under
/// `prefix` and its own name); panics naming each case that failed.
pub async fn assert_store_conforms(store: Arc<dyn Store>, prefix: &str) {
    qhost_store::conformance::assert_conforms(store, prefix).await;
}

/// Makes a new, empty queue for a case of the source suite (see [`assert_source_conforms`]).
pub use qhost_source::conformance::NewQueue;

/// A source that delegates to another but where a test's twist steps in (a call counted,
/// slowed, left unanswered or failed).
pub use qhost_source::twisted::{Twist, Twisted};

/// Runs the source contract's conformance suite on `source` (every case at once, each on
/// queues `new_queue` makes for it); panics naming each case that failed.
pub async fn assert_source_conforms(
    source: Arc<dyn QueueSource>,
    new_queue: NewQueue,
    label: &str,
) {
    qhost_source::conformance::assert_conforms(source, new_queue, label).await;
}

/// How long the plugins directory's watcher waits for a copy to settle.
pub const WATCH_DEBOUNCE: std::time::Duration = crate::plugin::watch::DEBOUNCE;

/// Starts `canary` beside its name's serving version in `host`, taking `percent` of keys, as
/// a changed file under a canary policy does (without the fleet's record: for benchmarks).
pub fn start_canary(host: &Host, canary: crate::plugin::Plugin, percent: u8) {
    host.registry().start_canary(canary, percent);
}

/// Where a message keyed `key` falls in `plugin`'s rollout, 0 to 99 (a canary at `percent`
/// takes the buckets below it).
pub fn rollout_bucket(plugin: &str, key: &str) -> u8 {
    crate::rollout::bucket(plugin, key)
}

/// The store key of `key` for `plugin` in `namespace`, as the host writes it.
pub fn scoped_key(namespace: &str, plugin: &str, key: &str) -> String {
    crate::idempotency::key::scoped(namespace, plugin, key)
}

/// The store key of the flow slots of `plugin`'s flow key `flow` in `namespace`.
pub fn slots_key(namespace: &str, plugin: &str, flow: &str) -> String {
    crate::idempotency::slots::key(namespace, plugin, flow)
}

/// The store key of `plugin`'s fleet-wide rate in `namespace`.
pub fn rate_key(namespace: &str, plugin: &str) -> String {
    crate::idempotency::rate::key(namespace, plugin)
}

/// Whether these attributes make a message a claim-check pointer.
pub fn is_pointer(attributes: &[Attribute]) -> bool {
    crate::payload::pointer::is_pointer(attributes)
}

/// The first attribute called `name`.
pub fn find_attribute<'a>(attributes: &'a [Attribute], name: &str) -> Option<&'a Attribute> {
    crate::message::find_attribute(attributes, name)
}

/// The embedded database file in `data_dir`.
pub fn database_in(data_dir: &Path) -> PathBuf {
    crate::config::database_in(data_dir)
}

/// The HTTPS client the AWS SDK clients are built with.
pub fn https_client() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    crate::aws::https_client()
}

/// A host's queue backend.
pub fn source(host: &Host) -> Arc<dyn QueueSource> {
    host.source()
}

/// A host's idempotency store.
pub fn store(host: &Host) -> Arc<dyn Store> {
    host.store()
}

/// A host's payload stores.
pub fn payloads(host: &Host) -> Arc<Payloads> {
    host.payloads()
}

/// Components a host built from a configuration compiled, and took from its cache.
pub fn compile_counts(host: &Host) -> Option<(u64, u64)> {
    let counters = host.plugin_dir()?.runtime().counters();
    Some((counters.compiled(), counters.cache_hits()))
}

/// Compiles `bytes` on `runtime` as a reload does (through its compiled-code cache, if it has
/// one).
pub fn compile(runtime: &crate::runtime::Runtime, bytes: &[u8]) -> anyhow::Result<()> {
    runtime.compile(bytes).map(drop)
}
