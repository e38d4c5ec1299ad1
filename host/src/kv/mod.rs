//! Plugins' state: buckets, grants, a run's reads and writes and the counts are the
//! `qhost-runtime` crate's (`qhost_runtime::kv`), named here under the path the host's code has
//! always used; what the operator reads (`qhost kv`, which opens the configured store) is here.

pub(crate) mod inspect;

pub(crate) use qhost_runtime::kv::*;
