//! Dead letters: the original message, sent to the queue's dead-letter queue with why.
//!
//! The copy is confirmed sent before the original is deleted, so a failure on the way loses
//! nothing (at worst the message is dead-lettered twice).

use crate::message::{Attribute, Outgoing, Received};

/// Attribute names on a dead letter.
pub const REASON: &str = "qhost-dead-letter-reason";
/// The plugin that handled (or would have handled) the message.
pub const PLUGIN: &str = "qhost-plugin";
/// Its version.
pub const VERSION: &str = "qhost-plugin-version";
/// Deliveries so far.
pub const ATTEMPTS: &str = "qhost-attempts";
/// Where it came from.
pub const SOURCE_QUEUE: &str = "qhost-source-queue";

/// Who gave up on a message, and why.
#[derive(Debug)]
pub struct Verdict<'a> {
    /// The plugin name.
    pub plugin: &'a str,
    /// Its version, or `-` when none was loaded.
    pub version: &'a str,
    /// The reason.
    pub reason: String,
}

/// The original attributes folded into one, as JSON, when they would not fit beside qhost's.
pub const ORIGINAL_ATTRIBUTES: &str = "qhost-original-attributes";
/// SQS allows ten attributes per message; qhost's five leave room for five originals.
const MAX_KEPT: usize = 5;

/// The dead letter for `msg`.
pub fn letter(msg: &Received, dead_letter_queue: &str, verdict: &Verdict<'_>) -> Outgoing {
    let originals: Vec<Attribute> = msg
        .attributes
        .iter()
        .filter(|a| {
            // A pointer's own attributes stay, so a redriven dead letter still finds its payload.
            !a.name.starts_with("qhost-")
                || a.name == crate::pipeline::prepare::OUTBOX_KEY_ATTRIBUTE
                || crate::payload::pointer::RESERVED.contains(&a.name.as_str())
        })
        .cloned()
        .collect();
    let mut attributes = if originals.len() <= MAX_KEPT {
        originals
    } else {
        let json = serde_json::to_string(&originals).unwrap_or_default();
        vec![Attribute::string(ORIGINAL_ATTRIBUTES, json)]
    };
    attributes.extend([
        Attribute::string(REASON, &verdict.reason),
        Attribute::string(PLUGIN, verdict.plugin),
        Attribute::string(VERSION, verdict.version),
        Attribute::number(ATTEMPTS, msg.receive_count),
        Attribute::string(SOURCE_QUEUE, &msg.queue),
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
