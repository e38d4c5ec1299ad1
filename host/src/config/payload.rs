//! The `[payload]` section: where large payloads are offloaded, and where pointers may lead.
//!
//! ```toml
//! [payload]
//! store = "redis"              # or "s3" | "local"; none by default (nothing is offloaded)
//! threshold-bytes = 262144     # offload when body + attributes exceed this (at most 1 MiB)
//! always = false               # offload every message
//! ttl-secs = 1209600           # Redis payloads expire (SQS keeps a message 14 days at most)
//! # url = "redis://…"          # Redis payload store; default: the idempotency store's Redis
//! # bucket = "my-payloads"     # with store = "s3"
//! # prefix = "qhost/"          # S3 key prefix
//! # region = "…"               # S3; default: [source]'s
//! # endpoint-url = "…"         # S3-compatible server; default: [source]'s
//! delete-after-ack = true      # delete qhost-written payloads once their message is done
//! delete-extended-after-ack = true  # the same for the extended client's (as its default)
//! allow = ["s3://their-bucket/orders/"]  # more places pointers may lead (besides `store`)
//! ```

use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

use crate::source::sqs::SqsSettings;

/// SQS's largest message; the threshold cannot be above it.
const MAX_THRESHOLD: u64 = 1024 * 1024;

/// Kinds of payload store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadStoreKind {
    /// Redis.
    Redis,
    /// The embedded store.
    Local,
    /// S3.
    S3,
}

/// Where qhost writes the payloads it offloads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OffloadStore {
    /// Redis, `SET` with a TTL.
    Redis,
    /// Files in the data directory.
    Local,
    /// An S3 bucket, under a key prefix.
    S3 {
        /// Bucket.
        bucket: String,
        /// Key prefix.
        prefix: String,
    },
}

/// A place payload pointers may lead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowRule {
    /// qhost's Redis payload store.
    Redis,
    /// The embedded payload store.
    Local,
    /// Objects in this bucket whose keys start with this prefix.
    S3 {
        /// Bucket.
        bucket: String,
        /// Key prefix (empty: the whole bucket).
        prefix: String,
    },
}

impl OffloadStore {
    /// Its kind.
    pub fn kind(&self) -> PayloadStoreKind {
        match self {
            OffloadStore::Redis => PayloadStoreKind::Redis,
            OffloadStore::Local => PayloadStoreKind::Local,
            OffloadStore::S3 { .. } => PayloadStoreKind::S3,
        }
    }

    fn allow_rule(&self) -> AllowRule {
        match self {
            OffloadStore::Redis => AllowRule::Redis,
            OffloadStore::Local => AllowRule::Local,
            OffloadStore::S3 { bucket, prefix } => AllowRule::S3 {
                bucket: bucket.clone(),
                prefix: prefix.clone(),
            },
        }
    }
}

impl AllowRule {
    /// Its store kind.
    pub fn kind(&self) -> PayloadStoreKind {
        match self {
            AllowRule::Redis => PayloadStoreKind::Redis,
            AllowRule::Local => PayloadStoreKind::Local,
            AllowRule::S3 { .. } => PayloadStoreKind::S3,
        }
    }

    fn parse(text: &str) -> anyhow::Result<Self> {
        match text {
            "redis" => Ok(AllowRule::Redis),
            "local" => Ok(AllowRule::Local),
            _ => {
                let Some(rest) = text.strip_prefix("s3://") else {
                    bail!(
                        "payload.allow: `{text}` is not `redis`, `local` or `s3://BUCKET/PREFIX`"
                    );
                };
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    bail!("payload.allow: `{text}` names no bucket");
                }
                Ok(AllowRule::S3 {
                    bucket: bucket.into(),
                    prefix: prefix.into(),
                })
            }
        }
    }
}

impl std::fmt::Display for AllowRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllowRule::Redis => write!(f, "redis"),
            AllowRule::Local => write!(f, "local"),
            AllowRule::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// The checked `[payload]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadConfig {
    /// Where to offload; `None`: never.
    pub store: Option<OffloadStore>,
    /// Offload when body plus attributes exceed this many bytes.
    pub threshold: usize,
    /// Offload every message, whatever its size.
    pub always: bool,
    /// How long Redis keeps a payload.
    pub ttl: Duration,
    /// The Redis payload store's URL.
    pub redis_url: Option<String>,
    /// S3 region and endpoint.
    pub s3: SqsSettings,
    /// Delete payloads qhost wrote once their message is done.
    pub delete_after_ack: bool,
    /// Delete payloads the extended client wrote once their message is done.
    pub delete_extended_after_ack: bool,
    /// Where pointers may lead: the store itself, then `allow`.
    pub allow: Vec<AllowRule>,
}

impl Default for PayloadConfig {
    fn default() -> Self {
        PayloadConfig {
            store: None,
            threshold: 262_144,
            always: false,
            ttl: Duration::from_secs(14 * 86_400),
            redis_url: None,
            s3: SqsSettings::default(),
            delete_after_ack: true,
            delete_extended_after_ack: true,
            allow: Vec::new(),
        }
    }
}

impl PayloadConfig {
    /// The allow-list, for error messages.
    pub fn allow_list_text(&self) -> String {
        if self.allow.is_empty() {
            return "none: no payload store is configured".into();
        }
        self.allow
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `[payload]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawPayload {
    pub store: Option<String>,
    pub threshold_bytes: Option<u64>,
    pub always: Option<bool>,
    pub ttl_secs: Option<u64>,
    pub url: Option<String>,
    pub bucket: Option<String>,
    pub prefix: Option<String>,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
    pub delete_after_ack: Option<bool>,
    pub delete_extended_after_ack: Option<bool>,
    pub allow: Option<Vec<String>>,
}

/// Checks `[payload]`; `redis_url` and `s3` are the idempotency store's and the source's, the
/// defaults for the payload stores.
pub fn payload_config(
    raw: RawPayload,
    redis_url: Option<&str>,
    s3: Option<&SqsSettings>,
) -> anyhow::Result<PayloadConfig> {
    let d = PayloadConfig::default();
    let threshold = raw.threshold_bytes.unwrap_or(d.threshold as u64);
    if !(1..=MAX_THRESHOLD).contains(&threshold) {
        bail!("payload.threshold-bytes is {threshold}; it must be between 1 and {MAX_THRESHOLD}");
    }
    let store = match raw.store.as_deref() {
        None | Some("none") => None,
        Some("redis") => Some(OffloadStore::Redis),
        Some("local") => Some(OffloadStore::Local),
        Some("s3") => Some(OffloadStore::S3 {
            bucket: raw
                .bucket
                .clone()
                .filter(|b| !b.is_empty())
                .ok_or_else(|| anyhow::anyhow!("payload.bucket is required with store = \"s3\""))?,
            prefix: raw.prefix.clone().unwrap_or_default(),
        }),
        Some(other) => bail!("payload.store is `{other}`; it must be redis, s3, local or none"),
    };
    let mut allow: Vec<AllowRule> = store.iter().map(OffloadStore::allow_rule).collect();
    for text in raw.allow.unwrap_or_default() {
        allow.push(AllowRule::parse(&text)?);
    }
    let default_s3 = s3.cloned().unwrap_or_default();
    Ok(PayloadConfig {
        store,
        threshold: threshold as usize,
        always: raw.always.unwrap_or(false),
        ttl: Duration::from_secs(raw.ttl_secs.unwrap_or(d.ttl.as_secs()).max(1)),
        redis_url: raw.url.or_else(|| redis_url.map(str::to_string)),
        s3: SqsSettings {
            region: raw.region.or(default_s3.region),
            endpoint_url: raw.endpoint_url.or(default_s3.endpoint_url),
        },
        delete_after_ack: raw.delete_after_ack.unwrap_or(true),
        delete_extended_after_ack: raw.delete_extended_after_ack.unwrap_or(true),
        allow,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_allowed_and_more_places_can_be() {
        let raw = RawPayload {
            store: Some("s3".into()),
            bucket: Some("mine".into()),
            prefix: Some("q/".into()),
            allow: Some(vec!["s3://theirs".into(), "redis".into()]),
            ..RawPayload::default()
        };
        let c = payload_config(raw, Some("redis://x/"), None).unwrap();
        assert_eq!(c.allow_list_text(), "s3://mine/q/, s3://theirs/, redis");
        assert_eq!(c.redis_url.as_deref(), Some("redis://x/"));
    }

    #[test]
    fn bad_payload_settings_name_the_field() {
        let bad = |raw: RawPayload| payload_config(raw, None, None).unwrap_err().to_string();
        assert!(
            bad(RawPayload {
                threshold_bytes: Some(2 << 20),
                ..RawPayload::default()
            })
            .contains("payload.threshold-bytes")
        );
        assert!(
            bad(RawPayload {
                store: Some("s3".into()),
                ..RawPayload::default()
            })
            .contains("payload.bucket")
        );
        assert!(
            bad(RawPayload {
                allow: Some(vec!["ftp://x".into()]),
                ..RawPayload::default()
            })
            .contains("payload.allow")
        );
    }
}
