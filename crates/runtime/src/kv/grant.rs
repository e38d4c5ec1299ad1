//! Which buckets a plugin may open, and how much one run may write: the manifest's
//! `[capabilities] keyvalue` list and its `[limits] kv-*` bounds.
//!
//! ```toml
//! [capabilities]
//! keyvalue = ["counts", { bucket = "reminded", ttl-secs = 3456000 }]
//!
//! [limits]
//! kv-value-bytes = 65536    # the largest value one write may hold
//! kv-keys-per-run = 100     # distinct keys one run may write
//! kv-key-bytes = 256        # the longest key
//! ```
//!
//! A bucket name is a plain name (letters, digits, `.`, `_`, `-`), never a path or a pattern,
//! so a grant cannot reach past its plugin's own buckets.

use std::time::Duration;

use serde::Deserialize;

/// The longest bucket name.
const MAX_BUCKET_NAME: usize = 64;
/// The most a manifest may raise `kv-value-bytes` to.
pub const MAX_VALUE_BYTES: u64 = 1 << 20;
/// The most a manifest may raise `kv-keys-per-run` to.
pub const MAX_KEYS_PER_RUN: u32 = 1000;
/// The most a manifest may raise `kv-key-bytes` to.
pub const MAX_KEY_BYTES: u32 = 1024;

/// One granted bucket, as written: a name, or a name with a time to live.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum BucketEntry {
    /// `"counts"`: kept until deleted.
    Name(String),
    /// `{ bucket = "reminded", ttl-secs = N }`: each key forgotten N seconds after its last
    /// write.
    WithTtl(BucketWithTtl),
}

/// The table form of a granted bucket.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct BucketWithTtl {
    bucket: String,
    #[serde(default)]
    ttl_secs: Option<u64>,
}

/// A granted bucket, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Its name, as the guest opens it.
    pub name: String,
    /// How long a key lives after its last write; `None`: until deleted.
    pub ttl: Option<Duration>,
}

impl BucketEntry {
    fn checked(&self) -> Result<Bucket, String> {
        let (name, ttl) = match self {
            BucketEntry::Name(name) => (name, None),
            BucketEntry::WithTtl(t) => (&t.bucket, t.ttl_secs),
        };
        if !valid_bucket_name(name) {
            return Err(format!(
                "`{name}` is not a bucket name (1 to {MAX_BUCKET_NAME} letters, digits, `.`, `_` or `-`)"
            ));
        }
        if ttl == Some(0) {
            return Err(format!("bucket `{name}`: ttl-secs must be positive"));
        }
        Ok(Bucket {
            name: name.clone(),
            ttl: ttl.map(Duration::from_secs),
        })
    }
}

/// Whether `name` may name a bucket.
pub fn valid_bucket_name(name: &str) -> bool {
    (1..=MAX_BUCKET_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && name != "."
        && name != ".."
}

/// The buckets a plugin may open: none unless its manifest names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvGrant {
    buckets: Vec<Bucket>,
}

impl KvGrant {
    /// The grant the manifest's entries make, or what is wrong with one.
    pub fn parse(entries: &[BucketEntry]) -> Result<Self, String> {
        let mut buckets: Vec<Bucket> = Vec::new();
        for entry in entries {
            let bucket = entry.checked()?;
            if buckets.iter().any(|b| b.name == bucket.name) {
                return Err(format!("bucket `{}` is granted twice", bucket.name));
            }
            buckets.push(bucket);
        }
        Ok(KvGrant { buckets })
    }

    /// The granted bucket called `name`.
    pub fn bucket(&self, name: &str) -> Option<&Bucket> {
        self.buckets.iter().find(|b| b.name == name)
    }
}

/// How much one run may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLimits {
    /// The largest value one write may hold.
    pub value_bytes: u64,
    /// Distinct keys one run may write.
    pub keys_per_run: u32,
    /// The longest key.
    pub key_bytes: u32,
}

impl Default for KvLimits {
    fn default() -> Self {
        KvLimits {
            value_bytes: 64 << 10,
            keys_per_run: 100,
            key_bytes: 256,
        }
    }
}

impl KvLimits {
    /// What is wrong with these bounds, naming the manifest's field.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_VALUE_BYTES).contains(&self.value_bytes) {
            return Err(format!(
                "limits.kv-value-bytes must be between 1 and {MAX_VALUE_BYTES}"
            ));
        }
        if !(1..=MAX_KEYS_PER_RUN).contains(&self.keys_per_run) {
            return Err(format!(
                "limits.kv-keys-per-run must be between 1 and {MAX_KEYS_PER_RUN}"
            ));
        }
        if !(1..=MAX_KEY_BYTES).contains(&self.key_bytes) {
            return Err(format!(
                "limits.kv-key-bytes must be between 1 and {MAX_KEY_BYTES}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(toml: &str) -> Result<KvGrant, String> {
        #[derive(Deserialize)]
        struct G {
            keyvalue: Vec<BucketEntry>,
        }
        let g: G = toml::from_str(toml).map_err(|e| e.to_string())?;
        KvGrant::parse(&g.keyvalue)
    }

    #[test]
    fn a_grant_names_buckets_with_an_optional_ttl() {
        let g = grant(r#"keyvalue = ["counts", { bucket = "reminded", ttl-secs = 60 }]"#).unwrap();
        assert_eq!(g.bucket("counts").unwrap().ttl, None);
        assert_eq!(
            g.bucket("reminded").unwrap().ttl,
            Some(Duration::from_secs(60))
        );
        assert!(g.bucket("other").is_none());
        assert!(KvGrant::default().bucket("counts").is_none());
    }

    #[test]
    fn a_bucket_is_a_plain_name() {
        for bad in ["", "..", "a/b", "a:b", "{x}", "*", &"x".repeat(65)] {
            let err = grant(&format!("keyvalue = [{bad:?}]")).unwrap_err();
            assert!(err.contains("is not a bucket name"), "{bad}: {err}");
        }
        let twice = grant(r#"keyvalue = ["a", { bucket = "a" }]"#).unwrap_err();
        assert!(twice.contains("granted twice"), "{twice}");
        let zero = grant(r#"keyvalue = [{ bucket = "a", ttl-secs = 0 }]"#).unwrap_err();
        assert!(zero.contains("ttl-secs must be positive"), "{zero}");
        assert!(grant(r#"keyvalue = [{ name = "a" }]"#).is_err());
    }

    #[test]
    fn bounds_are_checked_by_field() {
        assert_eq!(KvLimits::default().check(), Ok(()));
        let big = KvLimits {
            value_bytes: MAX_VALUE_BYTES + 1,
            ..KvLimits::default()
        };
        assert!(big.check().unwrap_err().contains("kv-value-bytes"));
        let none = KvLimits {
            keys_per_run: 0,
            ..KvLimits::default()
        };
        assert!(none.check().unwrap_err().contains("kv-keys-per-run"));
        let long = KvLimits {
            key_bytes: MAX_KEY_BYTES + 1,
            ..KvLimits::default()
        };
        assert!(long.check().unwrap_err().contains("kv-key-bytes"));
    }
}
