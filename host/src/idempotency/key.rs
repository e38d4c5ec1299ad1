//! Idempotency keys: which part of a message identifies its work.
//!
//! A plugin's manifest picks the source. SQS redeliveries share a message id, so the id is the
//! default; a producer that may send the same job twice puts a job id in an attribute or in the
//! body, and the key follows it there. Keys are scoped by namespace and plugin *name* (never its
//! version), so a hot reload does not forget what was done.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::message::{Attribute, Received, find_attribute, wire};

/// Where a plugin's idempotency key comes from.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub(crate) enum KeySource {
    /// The queue's message id.
    #[default]
    MessageId,
    /// A string or number message attribute.
    Attribute(String),
    /// A JSON pointer (RFC 6901) into a JSON body; strings and numbers are used as they are.
    JsonPointer(String),
    /// The sha256 of the body, in hex.
    BodySha256,
}

impl KeySource {
    /// Whether two bodies can share a key: only when a producer names the key (an attribute,
    /// a JSON field). A message id names one send (redeliveries carry its body), and a body
    /// hash is the body; for those, remembering which body ran would only cost memory.
    pub(crate) fn may_name_other_bodies(&self) -> bool {
        matches!(self, KeySource::Attribute(_) | KeySource::JsonPointer(_))
    }
}

/// What to do with a message whose configured key source is absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum OnMissingKey {
    /// Dead-letter it: without its key the host cannot tell duplicates apart.
    #[default]
    Reject,
    /// Use the message id instead.
    MessageId,
}

impl FromStr for KeySource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "message-id" => Ok(KeySource::MessageId),
            None if s == "body-sha256" => Ok(KeySource::BodySha256),
            Some(("attribute", name)) if !name.is_empty() => {
                Ok(KeySource::Attribute(name.to_string()))
            }
            Some(("json", pointer)) if pointer.starts_with('/') => {
                Ok(KeySource::JsonPointer(pointer.to_string()))
            }
            _ => Err(format!(
                "`{s}` is not a key source; expected `message-id`, `body-sha256`, \
                 `attribute:NAME` or `json:/POINTER`"
            )),
        }
    }
}

impl TryFrom<String> for KeySource {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::MessageId => f.write_str("message-id"),
            KeySource::BodySha256 => f.write_str("body-sha256"),
            KeySource::Attribute(name) => write!(f, "attribute:{name}"),
            KeySource::JsonPointer(pointer) => write!(f, "json:{pointer}"),
        }
    }
}

impl From<KeySource> for String {
    fn from(k: KeySource) -> String {
        k.to_string()
    }
}

/// Why no key could be derived.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("idempotency key source `{key_source}` is missing from the message: {detail}")]
pub(crate) struct MissingKey {
    /// The configured source.
    pub key_source: KeySource,
    /// What was missing.
    pub detail: String,
}

/// What a key is derived from: a message's id, and its body and attributes as its handler sees
/// them (an offloaded payload fetched, not its pointer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyInput<'a> {
    /// The message id.
    pub id: &'a str,
    /// The body.
    pub body: &'a [u8],
    /// The attributes.
    pub attributes: &'a [Attribute],
    /// The body's sha256 (hex) when it is known without the body: an offloaded payload's,
    /// from its pointer, which is verified against the payload before the handler runs.
    pub sha256: Option<&'a str>,
}

impl<'a> From<&'a Received> for KeyInput<'a> {
    fn from(msg: &'a Received) -> Self {
        KeyInput {
            id: &msg.id,
            body: &msg.body,
            attributes: &msg.attributes,
            sha256: None,
        }
    }
}

impl KeySource {
    /// The key for `msg`, unscoped.
    pub(crate) fn derive<'a>(&self, msg: impl Into<KeyInput<'a>>) -> Result<String, MissingKey> {
        let msg = msg.into();
        let missing = |detail: &str| MissingKey {
            key_source: self.clone(),
            detail: detail.to_string(),
        };
        match self {
            KeySource::MessageId => Ok(msg.id.to_string()),
            KeySource::BodySha256 => Ok(msg
                .sha256
                .map(str::to_ascii_lowercase)
                .unwrap_or_else(|| crate::digest::sha256_hex(msg.body))),
            KeySource::Attribute(name) => find_attribute(msg.attributes, name)
                .and_then(|a| a.text())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
                .ok_or_else(|| missing("no such string or number attribute")),
            KeySource::JsonPointer(pointer) => {
                let body: serde_json::Value = serde_json::from_slice(msg.body)
                    .map_err(|e| missing(&format!("body is not JSON ({e})")))?;
                match body.pointer(pointer) {
                    Some(serde_json::Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                    Some(serde_json::Value::Number(n)) => Ok(n.to_string()),
                    Some(_) => Err(missing("the value there is not a string or number")),
                    None => Err(missing("nothing at that pointer")),
                }
            }
        }
    }

    /// The key the host leases `msg` under: a message qhost sent (an outbox message, a
    /// schedule's tick) carries its key (`qhost-idempotency-key`), which a plugin keyed by
    /// message id takes instead of the id, so a copy sent again is dropped; otherwise what
    /// this source derives, falling back to the message id if `on_missing` says so.
    pub(crate) fn derive_for_run<'a>(
        &self,
        msg: impl Into<KeyInput<'a>>,
        on_missing: OnMissingKey,
    ) -> Result<String, MissingKey> {
        let msg = msg.into();
        if *self == KeySource::MessageId
            && let Some(key) =
                find_attribute(msg.attributes, wire::IDEMPOTENCY_KEY).and_then(|a| a.text())
        {
            return Ok(key.to_string());
        }
        self.derive_or(msg, on_missing)
    }

    /// The key for `msg`, falling back to the message id if `on_missing` says so.
    pub(crate) fn derive_or<'a>(
        &self,
        msg: impl Into<KeyInput<'a>>,
        on_missing: OnMissingKey,
    ) -> Result<String, MissingKey> {
        let msg = msg.into();
        match (self.derive(msg), on_missing) {
            (Err(_), OnMissingKey::MessageId) => Ok(msg.id.to_string()),
            (result, _) => result,
        }
    }
}

/// The store key for `key` of `plugin`: `NAMESPACE:{PLUGIN:KEY}`.
///
/// The braces are a Redis Cluster hash tag: every record of one key (lease, fencing counter,
/// outbox) shares a slot, so each script touches one slot.
pub(crate) fn scoped(namespace: &str, plugin: &str, key: &str) -> String {
    format!("{namespace}:{{{plugin}:{key}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_in_its_business_keys_slot() {
        use qhost_redis_link::slot;
        for (plugin, key) in [("mail", "k1"), ("orders", "a/b/0"), ("x", "}{"), ("p", "")] {
            let record = scoped("qhost", plugin, key);
            assert_eq!(
                slot(&record),
                slot(&format!("{{{plugin}:{key}}}")),
                "{record}"
            );
        }
    }

    #[test]
    fn only_producer_named_keys_can_name_other_bodies() {
        assert!(KeySource::Attribute("job-id".into()).may_name_other_bodies());
        assert!(KeySource::JsonPointer("/id".into()).may_name_other_bodies());
        assert!(!KeySource::MessageId.may_name_other_bodies());
        assert!(!KeySource::BodySha256.may_name_other_bodies());
    }

    fn msg(body: &str, attributes: Vec<Attribute>) -> Received {
        Received {
            id: "m-1".into(),
            handle: "r".into(),
            queue: "q".into(),
            body: body.as_bytes().to_vec(),
            attributes,
            delivery_count: 1,
            sent_at_ms: 0,
            group_id: None,
            malformed: None,
        }
    }

    #[test]
    fn parses_and_prints_every_source() {
        for text in ["message-id", "body-sha256", "attribute:job-id", "json:/a/b"] {
            let source: KeySource = text.parse().unwrap();
            assert_eq!(source.to_string(), text);
        }
        for bad in ["", "attribute:", "json:a", "body", "header:x"] {
            let err = bad.parse::<KeySource>().unwrap_err();
            assert!(err.contains("is not a key source"), "{err}");
        }
    }

    #[test]
    fn derives_from_each_source() {
        let m = msg(
            r#"{"job":{"id":"j-9","n":7}}"#,
            vec![Attribute::string("job-id", "a-1")],
        );
        assert_eq!(KeySource::MessageId.derive(&m).unwrap(), "m-1");
        assert_eq!(
            KeySource::Attribute("job-id".into()).derive(&m).unwrap(),
            "a-1"
        );
        assert_eq!(
            KeySource::JsonPointer("/job/id".into()).derive(&m).unwrap(),
            "j-9"
        );
        assert_eq!(
            KeySource::JsonPointer("/job/n".into()).derive(&m).unwrap(),
            "7"
        );
        let hash = KeySource::BodySha256.derive(&m).unwrap();
        assert_eq!(hash.len(), 64);
        assert_eq!(hash, KeySource::BodySha256.derive(&m.clone()).unwrap());
    }

    #[test]
    fn a_missing_source_is_an_error_or_falls_back() {
        let m = msg("not json", vec![]);
        let source = KeySource::JsonPointer("/id".into());
        let err = source.derive(&m).unwrap_err();
        assert!(err.to_string().contains("body is not JSON"), "{err}");
        assert!(source.derive_or(&m, OnMissingKey::Reject).is_err());
        assert_eq!(
            source.derive_or(&m, OnMissingKey::MessageId).unwrap(),
            "m-1"
        );
        let attr = KeySource::Attribute("job-id".into());
        assert!(attr.derive(&m).unwrap_err().detail.contains("no such"));
    }

    #[test]
    fn scoped_keys_carry_a_hash_tag_per_plugin_and_key() {
        assert_eq!(scoped("qhost", "mail", "k1"), "qhost:{mail:k1}");
    }
}
