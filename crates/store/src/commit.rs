//! What a run's state comes to when it ends: per bucket, the keys it wrote with their final
//! operation, and the keys whose value it read to decide, with a digest of what it saw. This is
//! what a completion carries to the store, and (on a Redis Cluster) what the completed record
//! keeps until the writes are applied.

use serde::{Deserialize, Serialize};
use sha1::Digest as _;

use qhost_message::as_base64;

/// A write's final form: what the store does to the key at commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    /// Replace the value.
    Set {
        /// The new value.
        #[serde(with = "as_base64")]
        value: Vec<u8>,
    },
    /// Remove the key.
    Delete,
    /// Add to the counter the key holds (absent counts as 0), at commit: the one relative
    /// write, so runs of different keys that increment one counter at once all count.
    Add {
        /// How much.
        delta: u64,
    },
}

/// A key whose value a run read to decide: the commit goes through only if it still holds
/// what was seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// The key in its bucket.
    pub key: String,
    /// The sha1 (hex) of the value seen, `None` when it was absent.
    pub seen: Option<String>,
}

/// One bucket's share of a commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketCommit {
    /// The bucket as stored (`NS:kv:{PLUGIN/BUCKET}`, see [`stored_bucket`]).
    pub bucket: String,
    /// How long a written key lives, in ms; 0: until deleted.
    #[serde(default)]
    pub ttl_ms: u64,
    /// Keys read to decide.
    #[serde(default)]
    pub reads: Vec<Read>,
    /// Keys written, each once, with its final operation.
    #[serde(default)]
    pub writes: Vec<(String, Op)>,
}

/// A run's state at its end: empty for a run that touched none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateCommit {
    /// Per bucket.
    pub buckets: Vec<BucketCommit>,
}

impl StateCommit {
    /// Whether it asks the store for nothing.
    pub fn is_empty(&self) -> bool {
        self.buckets
            .iter()
            .all(|b| b.writes.is_empty() && b.reads.is_empty())
    }

    /// How many keys it writes.
    pub fn writes(&self) -> usize {
        self.buckets.iter().map(|b| b.writes.len()).sum()
    }

    /// Only its writes (what a Redis Cluster applies after the completion).
    pub fn has_writes(&self) -> bool {
        self.writes() > 0
    }
}

/// The stored name of `plugin`'s bucket `bucket` in namespace `ns`: the braces make it a Redis
/// Cluster hash tag, so all of a bucket's keys are in one slot.
pub fn stored_bucket(ns: &str, plugin: &str, bucket: &str) -> String {
    format!("{ns}:kv:{{{plugin}/{bucket}}}")
}

/// The sha1 (hex) of a value, as Redis scripts compute it (`redis.sha1hex`).
pub fn sha1_hex(value: &[u8]) -> String {
    hex::encode(sha1::Sha1::digest(value))
}

/// The largest counter: a value above it cannot be incremented, so that a sum never leaves
/// the range every backend counts in (Redis's signed 64 bits).
pub const MAX_COUNTER: u64 = 1_000_000_000_000_000_000;

/// The counter a value holds: decimal digits, at most [`MAX_COUNTER`]; absent is 0.
pub fn counter(value: Option<&[u8]>) -> Option<u64> {
    let Some(value) = value else {
        return Some(0);
    };
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value)
        .ok()?
        .parse()
        .ok()
        .filter(|n| *n <= MAX_COUNTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_round_trips_through_json() {
        let commit = StateCommit {
            buckets: vec![BucketCommit {
                bucket: stored_bucket("qhost", "mail", "counts"),
                ttl_ms: 0,
                reads: vec![Read {
                    key: "a".into(),
                    seen: Some(sha1_hex(b"1")),
                }],
                writes: vec![
                    ("a".into(), Op::Add { delta: 2 }),
                    (
                        "b".into(),
                        Op::Set {
                            value: vec![0, 255],
                        },
                    ),
                    ("c".into(), Op::Delete),
                ],
            }],
        };
        let text = serde_json::to_string(&commit).unwrap();
        assert_eq!(serde_json::from_str::<StateCommit>(&text).unwrap(), commit);
        assert_eq!(commit.writes(), 3);
        assert!(!commit.is_empty() && StateCommit::default().is_empty());
        assert_eq!(commit.buckets[0].bucket, "qhost:kv:{mail/counts}");
    }

    #[test]
    fn sha1_is_the_one_redis_computes() {
        // redis-cli EVAL "return redis.sha1hex('abc')" 0
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }

    #[test]
    fn a_counter_is_decimal_digits_in_range() {
        assert_eq!(counter(None), Some(0));
        assert_eq!(counter(Some(b"42")), Some(42));
        assert_eq!(counter(Some(b"1000000000000000000")), Some(MAX_COUNTER));
        for bad in [&b""[..], b"-1", b"1e3", b" 1", b"1000000000000000001", b"x"] {
            assert_eq!(counter(Some(bad)), None, "{bad:?}");
        }
    }
}
