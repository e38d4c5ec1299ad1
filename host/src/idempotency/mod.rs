//! The idempotency store as the host uses it. The contract (the capability traits, the values
//! they exchange, the rate and slot arithmetic, what a completion commits) is the
//! `qhost-store` crate's, re-exported here under the names the host's modules use, as are the
//! two backends the host ships, each a crate that passes the contract's conformance suite: the
//! embedded store (`local`, `qhost-store-local` on SQLite), Redis (`redis`,
//! `qhost-store-redis`, one server or a cluster) and PostgreSQL (`postgres`,
//! `qhost-store-postgres`). What is the host's own is the keys it
//! derives from messages (`key`).

pub(crate) use qhost_store::*;

pub(crate) mod key;
pub(crate) use qhost_store_local as local;
pub(crate) use qhost_store_postgres as postgres;
pub(crate) use qhost_store_redis as redis;
