//! Outbox stamping: what qhost adds to each message a handler asks to send, so that a copy
//! re-sent after a crash is recognisable downstream.

use crate::handler::Plugin;
use crate::message::wire;
use crate::message::{Attribute, Outgoing};

/// Stamps each outbox message with its derived key (`KEY/INDEX`) as an attribute and as the
/// FIFO deduplication id, and with the producing plugin's name and version.
pub(crate) fn stamp(key: &str, producer: &Plugin, outbox: Vec<Outgoing>) -> Vec<Outgoing> {
    if outbox.is_empty() {
        return outbox; // most handlers send nothing: no per-message allocation for them
    }
    let produced_by = format!("{}@{}", producer.name, producer.version);
    outbox
        .into_iter()
        .enumerate()
        .map(|(i, mut m)| {
            let derived = format!("{key}/{i}");
            m.attributes
                .retain(|a| a.name != wire::IDEMPOTENCY_KEY && a.name != wire::PRODUCER);
            m.attributes
                .push(Attribute::string(wire::IDEMPOTENCY_KEY, &derived));
            m.attributes
                .push(Attribute::string(wire::PRODUCER, &produced_by));
            m.dedup_id = Some(crate::runtime::loader::version_of(derived.as_bytes()));
            m
        })
        .collect()
}
