//! Dead letters: the original message, sent to the queue's dead-letter queue with why.
//!
//! The copy is confirmed sent before the original is deleted, so a failure on the way loses
//! nothing (at worst the message is dead-lettered twice).
//!
//! A dead letter always fits SQS's rules: the reason is made SQS text and capped, and the
//! original attributes are kept only while the ten-attribute limit (the base64 marker of a
//! binary body included) and the size limit leave room for them.

use crate::message::rules::{self, MAX_ATTRIBUTES, sqs_char};
use crate::message::wire::{self, MAX_MESSAGE_BYTES, POINTER_ATTRIBUTES, RESERVED_PREFIX};
use crate::message::{Attribute, Outgoing, Received};

/// Who gave up on a message, and why.
#[derive(Debug)]
pub(crate) struct Verdict<'a> {
    /// The plugin name.
    pub(crate) plugin: &'a str,
    /// Its version, when one was loaded.
    pub(crate) version: Option<&'a str>,
    /// Handler runs on the message's key (deliveries, when it never ran).
    pub(crate) attempts: u32,
    /// The reason.
    pub(crate) reason: &'a str,
}

/// Attributes qhost puts on every dead letter.
const VERDICT_ATTRIBUTES: usize = 5;
/// The longest reason kept, in bytes; a longer one is cut and marked.
pub(crate) const MAX_REASON: usize = 2048;

/// The reason as an SQS string attribute: never empty, only characters SQS accepts, capped.
fn reason_text(reason: &str) -> String {
    let mut text: String = reason
        .chars()
        .map(|c| if sqs_char(c) { c } else { '\u{FFFD}' })
        .collect();
    if text.trim().is_empty() {
        return "(no reason given)".to_string();
    }
    if text.len() > MAX_REASON {
        let mut cut = MAX_REASON - '…'.len_utf8();
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// The dead letter for `msg`.
pub(crate) fn letter(msg: &Received, dead_letter_queue: &str, verdict: &Verdict<'_>) -> Outgoing {
    let verdict_attributes = [
        Attribute::string(wire::DEAD_LETTER_REASON, reason_text(verdict.reason)),
        Attribute::string(wire::DEAD_LETTER_PLUGIN, verdict.plugin),
        // The wire's word for "no version loaded" is `-`.
        Attribute::string(wire::DEAD_LETTER_VERSION, verdict.version.unwrap_or("-")),
        Attribute::number(wire::DEAD_LETTER_ATTEMPTS, verdict.attempts),
        Attribute::string(wire::DEAD_LETTER_SOURCE_QUEUE, &msg.queue),
    ];
    let mut letter = Outgoing {
        queue: dead_letter_queue.to_string(),
        body: msg.body.clone(),
        attributes: originals(msg),
        delay_seconds: 0,
        group_id: msg.group_id.clone(),
        dedup_id: Some(msg.id.clone()),
    };
    letter.attributes.extend(verdict_attributes);
    if rules::size_as_sent(&letter) > MAX_MESSAGE_BYTES {
        // Only the originals can give: the body is the message itself.
        letter
            .attributes
            .drain(..letter.attributes.len() - VERDICT_ATTRIBUTES);
    }
    letter
}

/// The original attributes worth keeping, as they fit beside qhost's own: as they are, or
/// folded into one JSON attribute.
fn originals(msg: &Received) -> Vec<Attribute> {
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
    let marker = usize::from(!rules::is_sqs_text(&msg.body));
    let room = MAX_ATTRIBUTES - VERDICT_ATTRIBUTES - marker;
    if originals.is_empty() || originals.len() <= room {
        return originals;
    }
    // Binary values fold as JSON arrays of numbers, which SQS text can carry.
    let json = serde_json::to_string(&originals).unwrap_or_default();
    vec![Attribute::string(
        wire::DEAD_LETTER_ORIGINAL_ATTRIBUTES,
        json,
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::AttributeValue;

    fn received(body: &[u8], attributes: usize) -> Received {
        Received {
            id: "m-1".into(),
            handle: "r".into(),
            queue: "jobs".into(),
            body: body.to_vec(),
            attributes: (0..attributes)
                .map(|i| Attribute::string(format!("a{i}"), "v"))
                .collect(),
            delivery_count: 3,
            sent_at_ms: 0,
            group_id: None,
            malformed: None,
        }
    }

    fn verdict(reason: &str) -> Verdict<'_> {
        Verdict {
            plugin: "p",
            version: None,
            attempts: 1,
            reason,
        }
    }

    fn reason_of(letter: &Outgoing) -> &str {
        letter
            .attributes
            .iter()
            .find(|a| a.name == wire::DEAD_LETTER_REASON)
            .and_then(Attribute::text)
            .expect("a reason")
    }

    #[test]
    fn a_binary_body_with_five_attributes_fits_with_its_marker() {
        let binary = letter(&received(&[0xff, 0, 1], 5), "dlq", &verdict("bad"));
        assert_eq!(rules::check(&binary), Ok(()));
        assert_eq!(binary.attributes.len(), 6, "{:?}", binary.attributes);
        let folded = &binary.attributes[0];
        assert_eq!(folded.name, wire::DEAD_LETTER_ORIGINAL_ATTRIBUTES);
        assert!(folded.text().unwrap().contains("\"a4\""));
        let text = letter(&received(b"text", 5), "dlq", &verdict("bad"));
        assert_eq!(text.attributes.len(), 10, "five originals kept as they are");
    }

    #[test]
    fn the_reason_is_sqs_text_capped_and_never_empty() {
        let long = "x".repeat(5000) + "\0";
        let capped = letter(&received(b"b", 0), "dlq", &verdict(&long));
        assert_eq!(rules::check(&capped), Ok(()));
        let reason = reason_of(&capped);
        assert!(
            reason.len() <= MAX_REASON && reason.ends_with('…'),
            "{}",
            reason.len()
        );
        let nul = letter(&received(b"b", 0), "dlq", &verdict("a\0b"));
        assert_eq!(reason_of(&nul), "a\u{FFFD}b");
        let empty = letter(&received(b"b", 0), "dlq", &verdict(" "));
        assert_eq!(reason_of(&empty), "(no reason given)");
    }

    #[test]
    fn a_body_near_the_limit_drops_the_originals_to_fit() {
        let big = received(&vec![b'a'; MAX_MESSAGE_BYTES - 400], 3);
        let mut big = big;
        big.attributes[0].value = AttributeValue::String("v".repeat(300));
        let fitted = letter(&big, "dlq", &verdict("too slow"));
        assert_eq!(fitted.attributes.len(), VERDICT_ATTRIBUTES);
        assert_eq!(rules::check(&fitted), Ok(()));
    }
}
