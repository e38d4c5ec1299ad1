//! Follow-up messages, sent by the host only if the handler acks, and only once.
//!
//! Each message sent through the outbox carries the attribute `qhost-idempotency-key` set to
//! `PLUGIN:PARENT-KEY/INDEX`, so a qhost consumer downstream drops a copy re-sent after a crash.
//!
//! `send` checks the message as the host will send it (the plugin's grant for the queue, SQS's
//! attribute and size rules, the outbox's limits) and says why when it cannot go: the handler
//! decides what to do about it.

use crate::Attribute;
pub use crate::bindings::qhost::handler::outbox::Outgoing;

impl Outgoing {
    /// A message for `queue` with this body and no attributes, delay or group.
    pub fn new(queue: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        Outgoing {
            queue: queue.into(),
            body: body.into(),
            attributes: Vec::new(),
            delay_seconds: 0,
            group_id: None,
        }
    }

    /// Add an attribute.
    pub fn with_attribute(mut self, attribute: Attribute) -> Self {
        self.attributes.push(attribute);
        self
    }

    /// Deliver no sooner than this many seconds after the handler acks.
    pub fn with_delay(mut self, seconds: u32) -> Self {
        self.delay_seconds = seconds;
        self
    }

    /// The FIFO message group (required for FIFO targets).
    pub fn with_group(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = Some(group_id.into());
        self
    }

    /// Hand the message to the host's outbox.
    pub fn send(self) -> Result<(), String> {
        crate::bindings::qhost::handler::outbox::send(&self)
    }
}

/// Send `body` to `queue` through the outbox.
pub fn send(queue: &str, body: impl Into<Vec<u8>>) -> Result<(), String> {
    Outgoing::new(queue, body).send()
}
