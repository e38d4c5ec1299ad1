//! What a plugin's runs did with state, for `qhost_kv_*_total`: keys read from the store,
//! writes committed, writes dropped with their run (by why), and calls refused (by bound).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refused {
    /// The bucket is not granted.
    NotGranted,
    /// The key is longer than `kv-key-bytes`.
    KeyBytes,
    /// The value is larger than `kv-value-bytes`.
    ValueBytes,
    /// The run has written `kv-keys-per-run` keys.
    KeysPerRun,
    /// `increment` on a value that is not a counter, or past the largest counter.
    NotACounter,
}

impl Refused {
    /// Its label.
    pub fn label(self) -> &'static str {
        match self {
            Refused::NotGranted => "not-granted",
            Refused::KeyBytes => "key-bytes",
            Refused::ValueBytes => "value-bytes",
            Refused::KeysPerRun => "keys-per-run",
            Refused::NotACounter => "not-a-counter",
        }
    }
}

/// Why a run's writes were not committed: its label in `qhost_state_writes_dropped_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// The handler asked for a retry.
    Retry,
    /// The handler rejected the message.
    Reject,
    /// The run failed (trapped, timed out, hit its memory limit).
    Failed,
    /// State it read changed before it completed.
    Conflict,
    /// Its lease passed to another worker before it completed.
    LeaseLost,
    /// Its outbox was too large to send, with no payload store.
    OutboxRejected,
    /// The payload store its outbox needed did not answer.
    Unavailable,
}

impl Dropped {
    /// Its label.
    pub fn label(self) -> &'static str {
        match self {
            Dropped::Retry => "retry",
            Dropped::Reject => "reject",
            Dropped::Failed => "failed",
            Dropped::Conflict => "conflict",
            Dropped::LeaseLost => "lease-lost",
            Dropped::OutboxRejected => "reject",
            Dropped::Unavailable => "unavailable",
        }
    }
}

/// One plugin's counts.
#[derive(Debug, Default)]
pub struct KvCounts {
    reads: AtomicU64,
    committed: AtomicU64,
    dropped: Mutex<BTreeMap<&'static str, u64>>,
    refused: Mutex<BTreeMap<&'static str, u64>>,
}

fn add(map: &Mutex<BTreeMap<&'static str, u64>>, label: &'static str, n: u64) {
    if let Ok(mut map) = map.lock() {
        *map.entry(label).or_default() += n;
    }
}

fn snapshot(map: &Mutex<BTreeMap<&'static str, u64>>) -> Vec<(&'static str, u64)> {
    map.lock()
        .map(|m| m.iter().map(|(k, v)| (*k, *v)).collect())
        .unwrap_or_default()
}

impl KvCounts {
    /// `n` keys read from the store.
    pub fn read(&self, n: u64) {
        self.reads.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` writes committed.
    pub fn committed(&self, n: u64) {
        self.committed.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` writes dropped with their run, for `why`.
    pub fn dropped(&self, why: Dropped, n: u64) {
        add(&self.dropped, why.label(), n);
    }

    /// A call refused.
    pub fn refused(&self, why: Refused) {
        add(&self.refused, why.label(), 1);
    }

    /// Keys read so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Writes committed so far.
    pub fn committed_total(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    /// Writes dropped so far, by why.
    pub fn dropped_by(&self) -> Vec<(&'static str, u64)> {
        snapshot(&self.dropped)
    }

    /// Calls refused so far, by bound.
    pub fn refused_by(&self) -> Vec<(&'static str, u64)> {
        snapshot(&self.refused)
    }
}
