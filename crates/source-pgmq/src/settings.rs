//! What the host configures of a pgmq source.

use std::time::Duration;

use qhost_postgres_link::PgTarget;

/// A pgmq source's settings.
#[derive(Clone, Debug)]
pub struct PgmqSettings {
    /// The database.
    pub pg: PgTarget,
    /// Whether the host creates a consumed queue and its dead-letter queue (`pgmq.create`)
    /// when they are absent; otherwise they must exist.
    pub declare: bool,
    /// Whether the host installs pgmq's SQL-only schema on a database that has no pgmq.
    pub install: bool,
    /// The longest pause between two reads of an empty queue while a receive waits.
    pub poll: Duration,
    /// Whether the host has pgmq notify on inserts into its queues (`enable_notify_insert`)
    /// and waits on the notifications when a queue is empty (`listen`).
    pub notify: bool,
}
