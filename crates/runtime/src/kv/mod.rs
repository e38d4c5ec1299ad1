//! Handler state: `wasi:keyvalue` buckets, granted per plugin, written exactly when the run's
//! completion is.
//!
//! A handler that kept state in a database of its own would be back to the race qhost exists
//! to close: a run that traps halfway, loses its lease or is redelivered after a crash writes
//! twice or writes half. Here a run's writes never leave the host while it runs; they are
//! committed with its completed record, under its lease's fencing token, or not at all.
//!
//! # What a guest sees
//!
//! - `open(NAME)` succeeds for a bucket the manifest grants (`[capabilities] keyvalue`,
//!   [`grant`]) and fails with `access-denied` otherwise. Buckets belong to the plugin: two
//!   plugins naming `counts` have two buckets, stored as `NS:kv:{PLUGIN/counts}`.
//! - Reads see the committed state plus the run's own writes. A key is read from the store the
//!   first time the run asks, then from memory, so a run sees one value per key.
//! - `set`, `delete`, `increment` and the batch calls are held in the run ([`run`]): the last
//!   write of a key is what commits. Bounds (value bytes, keys written per run, key bytes) are
//!   refused with an error the guest sees, and counted.
//! - `increment` returns the counter as the run sees it: the committed value when first read
//!   plus the run's own increments. The commit adds the run's increments to the value
//!   committed then, so runs of different keys incrementing one counter all count.
//! - A read the store cannot answer ends the run (a trap, classified as
//!   `Failure::StateUnavailable`): the message goes back without using an attempt, and the
//!   guest never mistakes an outage for an answer.
//!
//! # Isolation
//!
//! Read committed, with a check: a key the run read with `get`, `exists` or `get-many` (and
//! did not write first) is checked at commit; if another run committed a different value
//! meanwhile, this run's completion is refused as a *conflict*, nothing of it is written, and
//! the message comes back to run again (using no attempt). So "read, decide, write" on one key
//! behaves as if runs of different keys took turns. `increment` alone is never checked: counting
//! does not conflict. On a Redis Cluster the check is made just before the completion, not in
//! the same step (see below).
//!
//! # Commit, by backend
//!
//! - Embedded store: one SQLite transaction checks the lease, the reads, applies the writes and
//!   marks the key completed.
//! - Redis: the completion script itself (`lua/complete.lua` with `lua/kv.lua`) checks the
//!   reads and applies the writes before marking the key completed; one script, so atomic.
//! - Redis Cluster: a bucket (`{PLUGIN/BUCKET}` hash tag) and the message's record are in
//!   different slots, so no one script can hold both. The commit is three steps:
//!   1. per bucket, a script checks the reads (a conflict refuses the completion);
//!   2. the completion script records the writes in the completed record, beside the outbox,
//!      with the lease's fencing token: from here they are the run's committed writes;
//!   3. per bucket, a script applies them unless the key's marker `BUCKET#applied:RECORD`
//!      exists, and sets it (to the run's fencing token, kept for the dedup window) in the same
//!      step.
//!
//!   A host that dies between 2 and 3 leaves the writes pending in the record, as it leaves an
//!   outbox: the message's next delivery finds the key completed, applies them (the marker makes
//!   a second application a no-op), then carries out the outbox. The marker names the key, not
//!   the run, so a primary that loses a completed record in a failover (Redis replicates
//!   asynchronously) does not make the key's state count twice: the key runs again, and its
//!   writes find the first run's applied. A primary holding a bucket that loses writes applied
//!   in its last moment, before they reached its replica, loses them. Until then other runs read
//!   the state without them, and a `set` applied that late can land after a later run's. The
//!   check of step 1 and the completion of step 2 are not one step: two runs of different keys
//!   that read and write one key within that window can both commit.
//!
//! A run that traps, times out, retries, rejects, or loses its lease commits nothing; a
//! delivery of a completed key runs nothing and so writes nothing again.

pub mod counts;
pub mod grant;
pub mod run;

use std::sync::{Arc, OnceLock};

pub use counts::{Dropped, KvCounts, Refused};
pub use grant::{Bucket, KvGrant, KvLimits};
use qhost_store::commit;
pub use qhost_store::commit::{Op, StateCommit};

use qhost_store::StateReads;
use run::KvError;

/// Opens the store that state is read from when no host's store is bound: for `qhost invoke`
/// and `qhost replay`, an empty in-memory one. The runtime passes it in, so this module opens
/// no backend of its own.
pub type OpenMemory = fn() -> anyhow::Result<Arc<dyn StateReads>>;

/// Where plugins' state lives, for every plugin of one engine: the host's idempotency store
/// once the host has opened it; until then (and in `qhost invoke` and `qhost replay`, which
/// never bind one) the store `open_memory` opens, on first use.
#[derive(Debug)]
pub struct StateAccess {
    bound: OnceLock<(Arc<dyn StateReads>, String)>,
    memory: OnceLock<Arc<dyn StateReads>>,
    open_memory: OpenMemory,
}

impl StateAccess {
    /// Serves state from the store `open_memory` opens, until [`StateAccess::bind`].
    pub fn new(open_memory: OpenMemory) -> Self {
        StateAccess {
            bound: OnceLock::new(),
            memory: OnceLock::new(),
            open_memory,
        }
    }

    /// Serves state from `store`, under `namespace`. The first binding stands.
    pub fn bind(&self, store: Arc<dyn StateReads>, namespace: &str) {
        let _ = self.bound.set((store, namespace.to_string()));
    }

    /// The store and namespace state is read from.
    fn store(&self) -> Result<(Arc<dyn StateReads>, &str), KvError> {
        if let Some((store, ns)) = self.bound.get() {
            return Ok((Arc::clone(store), ns));
        }
        if let Some(memory) = self.memory.get() {
            return Ok((Arc::clone(memory), "qhost"));
        }
        let memory = (self.open_memory)()
            .map_err(|e| KvError::Other(format!("cannot open an in-memory store: {e:#}")))?;
        Ok((Arc::clone(self.memory.get_or_init(|| memory)), "qhost"))
    }
}

/// One plugin's state policy: what it may open, how much a run may write, where it goes.
#[derive(Debug)]
pub struct KvPolicy {
    /// The plugin's name, which scopes its buckets.
    pub plugin: Arc<str>,
    /// Its grant.
    pub grant: KvGrant,
    /// Its bounds.
    pub limits: KvLimits,
    /// What its runs did, for metrics.
    pub counts: Arc<KvCounts>,
    /// The engine's store.
    pub access: Arc<StateAccess>,
}

impl KvPolicy {
    /// The stored name of bucket `name` of this plugin.
    pub fn stored(&self, name: &str) -> String {
        let ns = self
            .access
            .store()
            .map_or("qhost", |(_, ns)| ns)
            .to_string();
        commit::stored_bucket(&ns, &self.plugin, name)
    }

    /// The store to read from.
    pub fn store(&self) -> Result<Arc<dyn StateReads>, KvError> {
        self.access.store().map(|(store, _)| store)
    }
}
