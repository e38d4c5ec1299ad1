//! Dead letters: the original message, sent to the queue's dead-letter queue with why.
//!
//! The copy is confirmed sent before the original is deleted, so a failure on the way loses
//! nothing (at worst the message is dead-lettered twice).

use crate::message::wire::{self, POINTER_ATTRIBUTES, RESERVED_PREFIX};
use crate::message::{Attribute, Outgoing, Received};

/// Who gave up on a message, and why.
#[derive(Debug)]
pub(crate) struct Verdict<'a> {
    /// The plugin name.
    pub(crate) plugin: &'a str,
    /// Its version, or `-` when none was loaded.
    pub(crate) version: &'a str,
    /// The reason.
    pub(crate) reason: &'a str,
}

/// SQS allows ten attributes per message; qhost's five leave room for five originals.
const MAX_KEPT: usize = 5;

/// The dead letter for `msg`.
pub(crate) fn letter(msg: &Received, dead_letter_queue: &str, verdict: &Verdict<'_>) -> Outgoing {
    let originals: Vec<Attribute> = msg
        .attributes
        .iter()
        .filter(|a| {
            // A pointer's own attributes stay, so a redriven dead letter still finds its payload.
            !a.name.starts_with(RESERVED_PREFIX)
                || a.name == wire::IDEMPOTENCY_KEY
                || POINTER_ATTRIBUTES.contains(&a.name.as_str())
        })
        .cloned()
        .collect();
    let mut attributes = if originals.len() <= MAX_KEPT {
        originals
    } else {
        let json = serde_json::to_string(&originals).unwrap_or_default();
        vec![Attribute::string(
            wire::DEAD_LETTER_ORIGINAL_ATTRIBUTES,
            json,
        )]
    };
    attributes.extend([
        Attribute::string(wire::DEAD_LETTER_REASON, verdict.reason),
        Attribute::string(wire::DEAD_LETTER_PLUGIN, verdict.plugin),
        Attribute::string(wire::DEAD_LETTER_VERSION, verdict.version),
        Attribute::number(wire::DEAD_LETTER_ATTEMPTS, msg.receive_count),
        Attribute::string(wire::DEAD_LETTER_SOURCE_QUEUE, &msg.queue),
    ]);
    Outgoing {
        queue: dead_letter_queue.to_string(),
        body: msg.body.clone(),
        attributes,
        delay_seconds: 0,
        group_id: msg.group_id.clone(),
        dedup_id: Some(msg.id.clone()),
    }
}
