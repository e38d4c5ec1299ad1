//! The idempotency store as the host uses it. The contract (the capability traits, the values
//! they exchange, the rate and slot arithmetic, what a completion commits) is the
//! `qhost-store` crate's, re-exported here under the names the host's modules use; what stays
//! is the host's side: the keys it derives from messages (`key`), and the two backends it
//! ships, the embedded store (`local`, on SQLite) and Redis (`redis`, one server or a
//! cluster), each run against the contract's conformance suite.

pub(crate) use qhost_store::*;

pub(crate) mod key;
pub(crate) mod local;
mod local_slots;
mod local_state;
pub(crate) mod redis;
