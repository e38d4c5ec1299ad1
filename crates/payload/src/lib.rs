//! Claim check: payloads too large for a queue message live in a store, and the message
//! carries a pointer. qhost does this on both sides, so a handler only ever sees its bytes.
//!
//! - **Outbound** ([`Payloads::offload`]): an outbox message or `qhost send` whose body plus
//!   attributes exceeds the threshold (or every message, with `always`) is stored and replaced
//!   by a pointer. Outbox payload keys derive from the message's derived idempotency key, so a
//!   re-send after a crash writes the same key instead of a second copy.
//! - **Inbound** ([`Payloads::resolve`]): a pointer is followed only into an allowed store,
//!   bucket or key prefix; the payload's size, and its sha256 where the pointer has one, must
//!   match. A disallowed, malformed or mismatched pointer, or a payload that is gone, is a
//!   reject with the reason; a store that cannot be reached is a retry.
//! - **Clean-up** ([`Payloads::cleanup`]): once the message's work is recorded complete, its
//!   payload is deleted (configurable, separately for qhost's pointers and the extended
//!   client's). A later copy of the message is then acked as a duplicate without fetching.
//!
//! The bytes fetched and stored are counted here, where they move, into the counters a host
//! shares with its stats ([`Payloads::count_into`]).
//!
//! A crate of its own: the claim check's configuration (`[payload]`, [`config`]), its stores
//! (Redis, S3, local files) and its pointers, under the host; the host opens it through its
//! one entry point for backends and hands the pipeline the result.

mod bytes;
pub mod config;
mod local;
pub mod pointer;
pub mod redis;
pub mod s3;
pub mod store;

use std::path::Path;
use std::sync::Arc;

pub use bytes::{PayloadBytes, PayloadFlow};
use config::{PayloadConfig, PayloadPlace};
use local::LocalPayloads;
use pointer::Location;
pub use pointer::{Body, Pointer};
use qhost_message::digest::sha256_hex;
use qhost_message::wire::{self, MAX_MESSAGE_BYTES, POINTER_ATTRIBUTES};
use qhost_message::{Attribute, Outgoing, find_attribute, rules};
use redis::RedisPayloads;
use s3::S3Payloads;
use store::{PayloadError, PayloadStore};

/// Why a pointer could not be followed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// It never will be: dead-letter the message with this reason.
    #[error("{0}")]
    Reject(String),
    /// The store is unreachable: try again later.
    #[error("{0}")]
    Retry(String),
}

impl ResolveError {
    /// A short name for it, as traces record it in `error.type`.
    pub fn kind(&self) -> &'static str {
        match self {
            ResolveError::Reject(_) => "bad_pointer",
            ResolveError::Retry(_) => "payload_store_error",
        }
    }
}

/// Why an outgoing message could not be sent as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// Too large for a queue message, and no payload store is configured.
    #[error("{0}")]
    TooLarge(String),
    /// The payload store is unreachable.
    #[error("{0}")]
    Unavailable(String),
}

/// A message's body with its payload fetched, and the attributes the handler sees.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The original bytes.
    pub body: Vec<u8>,
    /// The message's attributes without the pointer's reserved ones.
    pub attributes: Vec<Attribute>,
    /// The sha256 (hex) of `body`.
    pub sha256: String,
}

/// The payload stores and the policy for using them.
#[derive(Debug, Default)]
pub struct Payloads {
    config: PayloadConfig,
    redis: Option<RedisPayloads>,
    local: Option<Arc<LocalPayloads>>,
    s3: Option<S3Payloads>,
    /// Where bytes moved are counted (shared with a host's stats once it owns these stores).
    bytes: Arc<PayloadBytes>,
}

impl Payloads {
    /// No stores: messages are never offloaded, and every pointer is refused.
    pub fn disabled() -> Self {
        Payloads::default()
    }

    /// The stores `config` names, for writing and for the allow-list: Redis keys under
    /// `namespace`, local files under `data_dir` (in memory without one), and S3 through `s3`
    /// where the caller built a client (its own credentials, say), else one from `config`.
    pub async fn open(
        config: &PayloadConfig,
        namespace: &str,
        data_dir: Option<&Path>,
        s3: Option<S3Payloads>,
    ) -> anyhow::Result<Self> {
        let pc = config.clone();
        let wants = |is: fn(&PayloadPlace) -> bool| pc.store.iter().chain(&pc.allow).any(is);
        let redis = match (&pc.redis, wants(|p| matches!(p, PayloadPlace::Redis))) {
            (Some(target), true) => Some(RedisPayloads::connect(target, namespace, pc.ttl).await?),
            (None, true) => anyhow::bail!(
                "payload: the Redis payload store needs payload.url or a Redis idempotency store"
            ),
            _ => None,
        };
        let local = if wants(|p| matches!(p, PayloadPlace::Local)) {
            let dir = data_dir.map(|d| d.join("payloads"));
            Some(Arc::new(LocalPayloads::open(dir)?))
        } else {
            None
        };
        let s3 = match (s3, wants(|p| matches!(p, PayloadPlace::S3 { .. }))) {
            (Some(client), _) => Some(client),
            (None, true) => Some(S3Payloads::connect(&pc.s3).await),
            (None, false) => None,
        };
        Ok(Payloads {
            config: pc,
            redis,
            local,
            s3,
            bytes: Arc::default(),
        })
    }

    /// Counts the bytes fetched and stored from now on into `bytes`.
    pub fn count_into(&mut self, bytes: Arc<PayloadBytes>) {
        self.bytes = bytes;
    }

    fn count(&self, flow: PayloadFlow, bytes: usize) {
        self.bytes.add(flow, bytes as u64);
    }

    fn store_for(&self, location: &Location) -> Option<(Box<dyn PayloadStore>, String)> {
        match location {
            Location::Redis(key) => Some((Box::new(self.redis.clone()?), key.clone())),
            Location::Local(key) => Some((Box::new(Arc::clone(self.local.as_ref()?)), key.clone())),
            Location::S3 { bucket, key } => {
                Some((Box::new(self.s3.as_ref()?.bucket(bucket)), key.clone()))
            }
        }
    }

    fn allowed(&self, location: &Location) -> bool {
        self.config.allow.iter().any(|rule| match (rule, location) {
            (PayloadPlace::Redis, Location::Redis(_))
            | (PayloadPlace::Local, Location::Local(_)) => true,
            (PayloadPlace::S3 { bucket, prefix }, Location::S3 { bucket: b, key }) => {
                bucket == b && under_prefix(key, prefix)
            }
            _ => false,
        })
    }

    /// The message's body: its own, or the payload its pointer names, checked.
    pub async fn resolve(
        &self,
        body: &[u8],
        attributes: &[Attribute],
    ) -> Result<Option<Resolved>, ResolveError> {
        match Body::of(body, attributes) {
            Body::Inline => Ok(None),
            Body::Pointer(pointer) => self.fetch(&pointer, attributes).await.map(Some),
            Body::BadPointer(e) => Err(ResolveError::Reject(e.to_string())),
        }
    }

    /// The payload `pointer` names, checked; `attributes` are the message's, which the
    /// handler sees without the pointer's reserved ones.
    pub async fn fetch(
        &self,
        pointer: &Pointer,
        attributes: &[Attribute],
    ) -> Result<Resolved, ResolveError> {
        let location = &pointer.location;
        let max = self.config.max_bytes;
        if pointer.size > max {
            return Err(ResolveError::Reject(format!(
                "payload pointer to {location} declares {} bytes, over the {max}-byte limit (payload.max-bytes)",
                pointer.size
            )));
        }
        if !self.allowed(location) {
            return Err(ResolveError::Reject(format!(
                "payload pointer to {location} is outside the allowed payload stores ({})",
                self.config.allow_list_text()
            )));
        }
        let (store, key) = self.store_for(location).ok_or_else(|| {
            ResolveError::Reject(format!("no payload store is open for {location}"))
        })?;
        let payload = store.get(&key, pointer.size).await.map_err(|e| match e {
            PayloadError::Unavailable(why) => {
                ResolveError::Retry(format!("payload store unavailable: {why}"))
            }
            missing_or_larger => ResolveError::Reject(missing_or_larger.to_string()),
        })?;
        let sha256 = check(pointer, &payload).map_err(ResolveError::Reject)?;
        self.count(PayloadFlow::Fetched, payload.len());
        Ok(Resolved {
            sha256,
            body: payload,
            attributes: attributes
                .iter()
                .filter(|a| !POINTER_ATTRIBUTES.contains(&a.name.as_str()))
                .cloned()
                .collect(),
        })
    }

    /// Deletes the payload a finished message points to, if the policy says so. Best effort: a
    /// payload left behind expires (Redis) or is cleaned up by the bucket's lifecycle rules.
    pub async fn cleanup(&self, body: &[u8], attributes: &[Attribute]) {
        if let Body::Pointer(p) = Body::of(body, attributes) {
            self.cleanup_pointer(&p, attributes).await;
        }
    }

    /// As [`Payloads::cleanup`], for a message whose body was classified as pointer `p`.
    pub async fn cleanup_pointer(&self, p: &Pointer, attributes: &[Attribute]) {
        let wanted = match p.location {
            Location::S3 { .. } if find_sha(attributes) => self.config.delete_after_ack,
            Location::S3 { .. } => self.config.delete_extended_after_ack,
            _ => self.config.delete_after_ack,
        };
        if !wanted || !self.allowed(&p.location) {
            return;
        }
        if let Some((store, key)) = self.store_for(&p.location)
            && let Err(e) = store.delete(&key).await
        {
            tracing::warn!(payload = %p.location, error = %e, "could not delete a finished message's payload");
        }
    }

    /// `msg` as it should be sent: itself, or its payload stored under the key `key_for` names
    /// (asked only when the message is offloaded) and a pointer in its place.
    pub async fn offload(
        &self,
        msg: Outgoing,
        key_for: impl FnOnce(&Outgoing) -> String,
    ) -> Result<Outgoing, OffloadError> {
        let size = rules::size_as_sent(&msg);
        let over = size > self.config.threshold;
        let Some(store_kind) = &self.config.store else {
            return if size > MAX_MESSAGE_BYTES {
                Err(OffloadError::TooLarge(format!(
                    "a message of {size} bytes for queue `{}` exceeds SQS's {MAX_MESSAGE_BYTES}-byte limit and no payload store is configured",
                    msg.queue
                )))
            } else {
                Ok(msg)
            };
        };
        if !over && !self.config.always {
            return Ok(msg);
        }
        let key = key_for(&msg);
        let location = match store_kind {
            PayloadPlace::Redis => Location::Redis(key.to_string()),
            PayloadPlace::Local => Location::Local(key.to_string()),
            PayloadPlace::S3 { bucket, prefix } => Location::S3 {
                bucket: bucket.clone(),
                key: format!("{prefix}{key}"),
            },
        };
        let (store, store_key) = self
            .store_for(&location)
            .ok_or_else(|| OffloadError::Unavailable(format!("no store open for {location}")))?;
        store
            .put(&store_key, &msg.body)
            .await
            .map_err(|e| OffloadError::Unavailable(e.to_string()))?;
        self.count(PayloadFlow::Stored, msg.body.len());
        let pointer = Pointer {
            location,
            size: msg.body.len() as u64,
            sha256: Some(sha256_hex(&msg.body)),
        };
        let (body, marks) = pointer::encode(&pointer);
        let mut out = msg;
        out.body = body;
        out.attributes
            .retain(|a| !POINTER_ATTRIBUTES.contains(&a.name.as_str()));
        out.attributes.extend(marks);
        Ok(out)
    }

    /// Offloads each message of an outbox produced under fencing token `fence`.
    pub async fn offload_all(
        &self,
        namespace: &str,
        fence: u64,
        msgs: Vec<Outgoing>,
    ) -> Result<Vec<Outgoing>, OffloadError> {
        let mut out = Vec::with_capacity(msgs.len());
        for msg in msgs {
            out.push(
                self.offload(msg, |m| payload_key(namespace, fence, m))
                    .await?,
            );
        }
        Ok(out)
    }
}

/// An outbox message's payload key: its derived idempotency key and the fencing token of the
/// run that produced it. A worker whose lease lapsed therefore writes beside the current
/// owner's payloads, never over them (its own completion is then refused, and what it wrote
/// expires or is left to the bucket's lifecycle). A committed outbox is re-sent as committed,
/// pointers included, so nothing is written twice. Any other message gets a random key.
fn payload_key(namespace: &str, fence: u64, msg: &Outgoing) -> String {
    find_attribute(&msg.attributes, wire::IDEMPOTENCY_KEY)
        .and_then(|a| a.text())
        .map(|k| sha256_hex(format!("{namespace}/{k}#{fence}").as_bytes()))
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
}

/// Whether S3 object `key` lies under an allow-list `prefix`: at a `/` boundary (`orders`
/// allows `orders/x`, never `orders-x/y`), and never through a `.` or `..` segment.
fn under_prefix(key: &str, prefix: &str) -> bool {
    let dotted = key
        .split('/')
        .any(|segment| segment == "." || segment == "..");
    let boundary = prefix.is_empty()
        || prefix.ends_with('/')
        || key.len() == prefix.len()
        || key.as_bytes().get(prefix.len()) == Some(&b'/');
    !dotted && key.starts_with(prefix) && boundary
}

fn find_sha(attributes: &[Attribute]) -> bool {
    find_attribute(attributes, wire::PAYLOAD_SHA256).is_some()
}

/// The payload must be what the pointer says; returns its sha256.
fn check(pointer: &Pointer, payload: &[u8]) -> Result<String, String> {
    if payload.len() as u64 != pointer.size {
        return Err(format!(
            "payload {} is {} bytes but its pointer says {}",
            pointer.location,
            payload.len(),
            pointer.size
        ));
    }
    let got = sha256_hex(payload);
    if let Some(want) = &pointer.sha256
        && !got.eq_ignore_ascii_case(want)
    {
        return Err(format!(
            "payload {} has sha256 {got} but its pointer says {want}",
            pointer.location
        ));
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    #[test]
    fn s3_prefixes_match_at_a_slash_and_dotted_keys_never() {
        use super::under_prefix;
        for (key, prefix) in [
            ("orders/1", "orders/"),
            ("orders/1", "orders"),
            ("orders", "orders"),
            ("anything", ""),
        ] {
            assert!(under_prefix(key, prefix), "{key} under {prefix}");
        }
        for (key, prefix) in [
            ("orders-x/1", "orders"),
            ("ordersx", "orders"),
            ("orders/../secrets/k", "orders/"),
            ("orders/./k", "orders/"),
            ("../k", ""),
            ("other/1", "orders/"),
        ] {
            assert!(!under_prefix(key, prefix), "{key} not under {prefix}");
        }
    }

    use super::*;

    fn local_payloads(threshold: usize) -> Payloads {
        Payloads {
            config: PayloadConfig {
                store: Some(PayloadPlace::Local),
                threshold,
                allow: vec![PayloadPlace::Local],
                ..PayloadConfig::default()
            },
            local: Some(Arc::new(LocalPayloads::open(None).unwrap())),
            ..Payloads::default()
        }
    }

    #[tokio::test]
    async fn a_message_over_the_threshold_goes_out_as_a_pointer_and_comes_back_whole() {
        let p = local_payloads(100);
        let mut msg = Outgoing::new("q", vec![7u8; 101]);
        msg.attributes.push(Attribute::string("kept", "yes"));
        let small = p
            .offload(Outgoing::new("q", vec![1u8; 50]), |_| "k0".into())
            .await
            .unwrap();
        assert_eq!(
            small.body,
            vec![1u8; 50],
            "under the threshold stays inline"
        );
        let sent = p.offload(msg, |_| "k1".into()).await.unwrap();
        assert!(pointer::is_pointer(&sent.attributes));
        let back = p
            .resolve(&sent.body, &sent.attributes)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back.body, vec![7u8; 101]);
        assert_eq!(back.attributes, vec![Attribute::string("kept", "yes")]);
        p.cleanup(&sent.body, &sent.attributes).await;
        let gone = p.resolve(&sent.body, &sent.attributes).await.unwrap_err();
        assert!(
            matches!(&gone, ResolveError::Reject(r) if r.contains("not found")),
            "{gone:?}"
        );
    }

    #[test]
    fn an_outbox_payload_key_is_its_derived_key_under_its_runs_fence() {
        let outbox = Outgoing::new("q", "x")
            .with_attribute(Attribute::string(wire::IDEMPOTENCY_KEY, "p:k/0"));
        let (first, again) = (payload_key("ns", 1, &outbox), payload_key("ns", 1, &outbox));
        assert_eq!(first, again, "a re-send of one run writes one key");
        assert_ne!(
            first,
            payload_key("ns", 2, &outbox),
            "a later owner's run never writes over an earlier one's, nor the reverse"
        );
    }

    #[tokio::test]
    async fn without_a_store_pointers_are_refused_and_oversize_messages_too() {
        let p = Payloads::disabled();
        let (body, attributes) = pointer::encode(&Pointer {
            location: Location::S3 {
                bucket: "elsewhere".into(),
                key: "k".into(),
            },
            size: 1,
            sha256: None,
        });
        let e = p.resolve(&body, &attributes).await.unwrap_err();
        assert!(
            matches!(&e, ResolveError::Reject(r) if r.contains("outside the allowed")),
            "{e:?}"
        );
        let big = Outgoing::new("q", vec![0u8; MAX_MESSAGE_BYTES + 1]);
        assert!(matches!(
            p.offload(big, |_| "k".into()).await,
            Err(OffloadError::TooLarge(_))
        ));
    }
}
