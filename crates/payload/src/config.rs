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
//! max-bytes = 67108864         # the largest payload a pointer may lead to (64 MiB)
//! ```
//!
//! An S3 prefix in `allow` matches at a `/` boundary (`s3://b/orders` allows `orders/…`, never
//! `orders-x/…`), and a key with a `.` or `..` segment is never allowed.

use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

use qhost_aws::AwsSettings;
use qhost_message::rules::SendShape;
use qhost_redis_link::RedisTarget;

/// SQS's largest message; the threshold cannot be above it.
const MAX_THRESHOLD: u64 = 1024 * 1024;
/// The default for `payload.max-bytes`.
const DEFAULT_MAX_PAYLOAD: u64 = 64 << 20;
/// The most `payload.max-bytes` may say: a payload is held in memory while its handler runs.
const MAX_MAX_PAYLOAD: u64 = 2 << 30;

/// A payload store, and for S3 a bucket and key prefix within it: where qhost writes the
/// payloads it offloads (`payload.store`), and a place payload pointers may lead
/// (`payload.allow`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PayloadPlace {
    /// qhost's Redis payload store (`SET` with a TTL).
    Redis,
    /// The embedded payload store (files in the data directory).
    Local,
    /// Objects in this bucket whose keys start with this prefix.
    S3 {
        /// Bucket.
        bucket: String,
        /// Key prefix (empty: the whole bucket).
        prefix: String,
    },
}

impl PayloadPlace {
    fn parse(text: &str) -> anyhow::Result<Self> {
        match text {
            "redis" => Ok(PayloadPlace::Redis),
            "local" => Ok(PayloadPlace::Local),
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
                Ok(PayloadPlace::S3 {
                    bucket: bucket.into(),
                    prefix: prefix.into(),
                })
            }
        }
    }
}

impl std::fmt::Display for PayloadPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayloadPlace::Redis => write!(f, "redis"),
            PayloadPlace::Local => write!(f, "local"),
            PayloadPlace::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// The checked `[payload]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadConfig {
    /// Where to offload; `None`: never.
    pub store: Option<PayloadPlace>,
    /// Offload when body plus attributes exceed this many bytes.
    pub threshold: usize,
    /// Offload every message, whatever its size.
    pub always: bool,
    /// How long Redis keeps a payload.
    pub ttl: Duration,
    /// The Redis payload store's server or cluster.
    pub redis: Option<RedisTarget>,
    /// S3 region and endpoint.
    pub s3: AwsSettings,
    /// Delete payloads qhost wrote once their message is done.
    pub delete_after_ack: bool,
    /// Delete payloads the extended client wrote once their message is done.
    pub delete_extended_after_ack: bool,
    /// Where pointers may lead: the store itself, then `allow`.
    pub allow: Vec<PayloadPlace>,
    /// The largest payload a pointer may lead to, checked against the pointer before fetching
    /// and while reading.
    pub max_bytes: u64,
}

impl PayloadConfig {
    /// How messages leave the host under this configuration, for checking them beforehand.
    pub fn send_shape(&self) -> SendShape {
        SendShape {
            envelope: Default::default(),
            offload_above: self.store.as_ref().map(|_| self.threshold),
            offload_always: self.always,
            pointer_attributes: match self.store {
                // The extended client's size attribute and qhost's digest.
                Some(PayloadPlace::S3 { .. }) => 2,
                Some(_) => 1,
                None => 0,
            },
        }
    }
}

impl Default for PayloadConfig {
    fn default() -> Self {
        PayloadConfig {
            store: None,
            threshold: 262_144,
            always: false,
            ttl: Duration::from_secs(14 * 86_400),
            redis: None,
            s3: AwsSettings::default(),
            delete_after_ack: true,
            delete_extended_after_ack: true,
            allow: Vec::new(),
            max_bytes: DEFAULT_MAX_PAYLOAD,
        }
    }
}

impl PayloadConfig {
    /// The allow-list, for error messages.
    pub(crate) fn allow_list_text(&self) -> String {
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
    pub max_bytes: Option<u64>,
}

/// Checks `[payload]`; `redis` and `s3` are the idempotency store's and the source's, the
/// defaults for the payload stores (`payload.url` names one Redis server instead).
pub fn payload_config(
    raw: RawPayload,
    redis: Option<&RedisTarget>,
    s3: Option<&AwsSettings>,
) -> anyhow::Result<PayloadConfig> {
    let d = PayloadConfig::default();
    let threshold = raw.threshold_bytes.unwrap_or(d.threshold as u64);
    if !(1..=MAX_THRESHOLD).contains(&threshold) {
        bail!("payload.threshold-bytes is {threshold}; it must be between 1 and {MAX_THRESHOLD}");
    }
    let store = match raw.store.as_deref() {
        None | Some("none") => None,
        Some("redis") => Some(PayloadPlace::Redis),
        Some("local") => Some(PayloadPlace::Local),
        Some("s3") => Some(PayloadPlace::S3 {
            bucket: raw
                .bucket
                .clone()
                .filter(|b| !b.is_empty())
                .ok_or_else(|| anyhow::anyhow!("payload.bucket is required with store = \"s3\""))?,
            prefix: raw.prefix.clone().unwrap_or_default(),
        }),
        Some(other) => bail!("payload.store is `{other}`; it must be redis, s3, local or none"),
    };
    let mut allow: Vec<PayloadPlace> = store.iter().cloned().collect();
    for text in raw.allow.unwrap_or_default() {
        allow.push(PayloadPlace::parse(&text)?);
    }
    let default_s3 = s3.cloned().unwrap_or_default();
    let max_bytes = raw.max_bytes.unwrap_or(DEFAULT_MAX_PAYLOAD);
    if !(1..=MAX_MAX_PAYLOAD).contains(&max_bytes) {
        bail!("payload.max-bytes is {max_bytes}; it must be between 1 and {MAX_MAX_PAYLOAD}");
    }
    Ok(PayloadConfig {
        store,
        threshold: threshold as usize,
        always: raw.always.unwrap_or(false),
        ttl: Duration::from_secs(raw.ttl_secs.unwrap_or(d.ttl.as_secs()).max(1)),
        redis: raw.url.map(RedisTarget::single).or_else(|| redis.cloned()),
        s3: AwsSettings {
            region: raw.region.or(default_s3.region),
            endpoint_url: raw.endpoint_url.or(default_s3.endpoint_url),
            deadlines: qhost_aws::AwsDeadlines::S3,
        },
        delete_after_ack: raw.delete_after_ack.unwrap_or(true),
        delete_extended_after_ack: raw.delete_extended_after_ack.unwrap_or(true),
        allow,
        max_bytes,
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
        let c = payload_config(raw, Some(&RedisTarget::single("redis://x/")), None).unwrap();
        assert_eq!(c.allow_list_text(), "s3://mine/q/, s3://theirs/, redis");
        assert_eq!(c.redis, Some(RedisTarget::single("redis://x/")));
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
