//! qhost's own message types, independent of any backend or of the WIT bindings: the leaf of
//! the workspace, which every other crate may name and which names none of them.
//!
//! Backends convert to and from these at their edges; the runtime converts them to the
//! generated WIT types when it calls a guest. Keeping one set of types in the middle means the
//! pipeline never depends on aws-sdk or wasmtime types, and a store or a source crate needs
//! nothing of the host's to speak of a message.
//!
//! Layout: the types here; `wire` (the attribute names and forms qhost writes on messages),
//! `rules` (what a message must be for SQS to take it), `recorded` (a message as `qhost
//! replay` and `qhost test` read it), `as_base64` (bytes in JSON), `digest` (sha256 as hex, the
//! one digest form qhost writes anywhere).

pub mod as_base64;
pub mod digest;
pub mod recorded;
pub mod rules;
pub mod wire;

use serde::{Deserialize, Serialize};

/// A message attribute value, typed as SQS types them. Numbers are kept as their decimal text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttributeValue {
    /// A UTF-8 string.
    String(String),
    /// A number, as decimal text.
    Number(String),
    /// Raw bytes.
    Binary(#[serde(with = "as_base64")] Vec<u8>),
}

/// A named message attribute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribute {
    /// The attribute name.
    pub name: String,
    /// The typed value.
    pub value: AttributeValue,
}

impl Attribute {
    /// A string attribute.
    pub fn string(name: impl Into<String>, value: impl Into<String>) -> Self {
        Attribute {
            name: name.into(),
            value: AttributeValue::String(value.into()),
        }
    }

    /// A number attribute.
    pub fn number(name: impl Into<String>, value: impl ToString) -> Self {
        Attribute {
            name: name.into(),
            value: AttributeValue::Number(value.to_string()),
        }
    }

    /// The value as text, for string and number attributes.
    pub fn text(&self) -> Option<&str> {
        match &self.value {
            AttributeValue::String(s) | AttributeValue::Number(s) => Some(s),
            AttributeValue::Binary(_) => None,
        }
    }
}

/// Finds an attribute by name.
pub fn find_attribute<'a>(attributes: &'a [Attribute], name: &str) -> Option<&'a Attribute> {
    attributes.iter().find(|a| a.name == name)
}

/// A message as delivered by its source, with the handle that settles, delays or holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The queue's id for the message; every delivery of one message shares it.
    pub id: String,
    /// Names this delivery to its source, opaque to everyone else: settling it, putting it
    /// back or holding it needs it (an SQS receipt handle, an AMQP delivery tag, a JetStream
    /// reply subject).
    pub handle: String,
    /// The queue name.
    pub queue: String,
    /// The body bytes.
    pub body: Vec<u8>,
    /// Message attributes.
    pub attributes: Vec<Attribute>,
    /// How many times the source has delivered the message, this delivery included: 1 on the
    /// first (SQS's `ApproximateReceiveCount`, JetStream's `num_delivered`).
    pub delivery_count: u32,
    /// When it was first sent, in milliseconds since the Unix epoch.
    pub sent_at_ms: u64,
    /// FIFO message group.
    pub group_id: Option<String>,
    /// Why the message cannot be handled as it arrived (a body marked base64 that is not, an
    /// attribute that cannot be read); `body` is then what arrived. Such a message is
    /// dead-lettered alone with this reason, and the rest of its batch runs normally.
    pub malformed: Option<String>,
}

/// A message to send.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outgoing {
    /// Target queue name.
    pub queue: String,
    /// The body bytes.
    #[serde(with = "as_base64")]
    pub body: Vec<u8>,
    /// Message attributes.
    pub attributes: Vec<Attribute>,
    /// Delay before the message becomes visible.
    pub delay_seconds: u32,
    /// FIFO message group.
    pub group_id: Option<String>,
    /// FIFO deduplication id; qhost derives it from the idempotency key for outbox messages.
    pub dedup_id: Option<String>,
}

impl Outgoing {
    /// A message with this body and nothing else set.
    pub fn new(queue: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        Outgoing {
            queue: queue.into(),
            body: body.into(),
            attributes: Vec::new(),
            delay_seconds: 0,
            group_id: None,
            dedup_id: None,
        }
    }

    /// Adds an attribute.
    pub fn with_attribute(mut self, attribute: Attribute) -> Self {
        self.attributes.push(attribute);
        self
    }
}

/// Milliseconds since the Unix epoch, from the system clock.
pub fn now_ms() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
