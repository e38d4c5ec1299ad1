//! The wire contract: every name qhost reserves on a queue message, the payload pointers'
//! reserved names, and the SQS limits and name rules that every backend must respect.
//!
//! One leaf module, so the vocabulary has one home: backends, the pipeline and the payload
//! stores import from here, and this module imports nothing from the rest of the crate but the
//! message types it measures and the digest it stamps. A name written elsewhere as a literal is a bug waiting for a
//! rename.

use super::{Attribute, AttributeValue, Outgoing};

/// Prefix of every attribute qhost itself writes; dead letters drop the others' copies of these.
pub const RESERVED_PREFIX: &str = "qhost-";

/// On an outbox message: `PLUGIN:PARENT-KEY/INDEX`, the derived idempotency key. A qhost
/// consumer keyed by message id uses it as the key instead, so a copy re-sent after a crash is
/// dropped. It names the producing plugin, so two plugins that share a business key never
/// suppress each other's messages downstream.
pub const IDEMPOTENCY_KEY: &str = "qhost-idempotency-key";
/// On an outbox message: the plugin build that produced it, `NAME@VERSION`.
pub const PRODUCER: &str = "qhost-producer";
/// Marks a body that travels base64-encoded because SQS would not carry its bytes as text.
pub const BODY_ENCODING: &str = "qhost-body-encoding";

/// On a dead letter: why it was given up.
pub const DEAD_LETTER_REASON: &str = "qhost-dead-letter-reason";
/// On a dead letter: the plugin that handled (or would have handled) the message.
pub const DEAD_LETTER_PLUGIN: &str = "qhost-plugin";
/// On a dead letter: that plugin's version, or `-` when none was loaded.
pub const DEAD_LETTER_VERSION: &str = "qhost-plugin-version";
/// On a dead letter: handler runs on its key (or deliveries, for a message that never ran).
pub const DEAD_LETTER_ATTEMPTS: &str = "qhost-attempts";
/// On a dead letter: the queue it came from.
pub const DEAD_LETTER_SOURCE_QUEUE: &str = "qhost-source-queue";
/// On a dead letter: the original attributes folded into one JSON value, when they would not
/// fit beside qhost's own.
pub const DEAD_LETTER_ORIGINAL_ATTRIBUTES: &str = "qhost-original-attributes";

/// On a message from RabbitMQ: its AMQP `content_type` property (Celery's serializer).
pub const AMQP_CONTENT_TYPE: &str = "amqp-content-type";
/// On a message from RabbitMQ: its AMQP `content_encoding` property.
pub const AMQP_CONTENT_ENCODING: &str = "amqp-content-encoding";
/// On a message from RabbitMQ: its AMQP `correlation_id` property (Celery's task id).
pub const AMQP_CORRELATION_ID: &str = "amqp-correlation-id";
/// On a message from RabbitMQ: its AMQP `reply_to` property.
pub const AMQP_REPLY_TO: &str = "amqp-reply-to";
/// On a message to RabbitMQ: a JSON object whose entries are sent as the message's AMQP
/// headers, typed as JSON types them. A Celery task carries a score of headers, more than an
/// SQS message's ten attributes: they travel as one.
pub const AMQP_HEADERS: &str = "amqp-headers";
/// The prefix of the attributes a RabbitMQ message's AMQP properties become.
pub const AMQP_PREFIX: &str = "amqp-";

/// The Amazon SQS Extended Client's pointer class.
pub const S3_POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";
/// The pointer class older Java extended clients wrote.
pub const LEGACY_S3_POINTER_CLASS: &str = "com.amazon.sqs.javamessaging.MessageS3Pointer";
/// qhost's own pointer class, for its Redis and local payload stores.
pub const QHOST_POINTER_CLASS: &str = "qhost.payload.v1";
/// The extended client's size attribute.
pub const EXTENDED_SIZE: &str = "ExtendedPayloadSize";
/// The size attribute older extended clients wrote.
pub const LEGACY_EXTENDED_SIZE: &str = "SQSLargePayloadSize";
/// qhost's size attribute, beside its own pointer.
pub const PAYLOAD_SIZE: &str = "qhost-payload-size";
/// The payload's sha256 (hex), beside a pointer qhost wrote.
pub const PAYLOAD_SHA256: &str = "qhost-payload-sha256";
/// The attributes that mark a body as a pointer (one of them must be present).
pub const POINTER_SIZES: [&str; 3] = [EXTENDED_SIZE, LEGACY_EXTENDED_SIZE, PAYLOAD_SIZE];
/// Attributes that belong to a pointer, not to the message: a handler never sees them.
pub const POINTER_ATTRIBUTES: [&str; 4] = [
    EXTENDED_SIZE,
    LEGACY_EXTENDED_SIZE,
    PAYLOAD_SIZE,
    PAYLOAD_SHA256,
];

/// The derived idempotency key of the `index`th message `plugin` sends while handling `key`.
pub fn derived_key(plugin: &str, key: &str, index: usize) -> String {
    format!("{plugin}:{key}/{index}")
}

/// Stamps an outbox message with what qhost adds: its derived key (as an attribute, and its
/// full sha256 as the FIFO deduplication id) and the producing build, `NAME@VERSION`. Any
/// copies of these the handler set are replaced.
pub fn stamp(msg: &mut Outgoing, derived: &str, producer: &str) {
    msg.attributes
        .retain(|a| a.name != IDEMPOTENCY_KEY && a.name != PRODUCER);
    msg.attributes
        .push(Attribute::string(IDEMPOTENCY_KEY, derived));
    msg.attributes.push(Attribute::string(PRODUCER, producer));
    msg.dedup_id = Some(crate::digest::sha256_hex(derived.as_bytes()));
}

/// SQS's limit on one message, body and attributes together, and on one batch request.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// Entries per SQS batch request (send, delete).
pub const MAX_BATCH_ENTRIES: usize = 10;

/// The size SQS counts for a message: the body plus each attribute's name, type and value.
/// (`String`, `Number` and `Binary` are all six bytes.)
pub fn message_size(body_len: usize, attributes: &[Attribute]) -> usize {
    body_len
        + attributes
            .iter()
            .map(|a| {
                let value = match &a.value {
                    AttributeValue::String(s) | AttributeValue::Number(s) => s.len(),
                    AttributeValue::Binary(b) => b.len(),
                };
                a.name.len() + "String".len() + value
            })
            .sum::<usize>()
}

/// SQS's rule: 1 to 80 characters of letters, digits, `-` and `_`, and `.fifo` for FIFO queues.
pub fn valid_queue_name(name: &str) -> bool {
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    (1..=80).contains(&name.len()) && !stem.is_empty() && stem.chars().all(name_char)
}

/// Plugin names are what messages route by, so they are names, never paths: 1 to 64 letters,
/// digits, `-` and `_`.
pub fn valid_plugin_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(name_char)
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_count_attribute_names_types_and_values() {
        let attrs = [Attribute::number("n", "12"), Attribute::string("s", "abc")];
        assert_eq!(message_size(4, &attrs), 4 + (1 + 6 + 2) + (1 + 6 + 3));
        let binary = [Attribute {
            name: "b".into(),
            value: AttributeValue::Binary(vec![0; 5]),
        }];
        assert_eq!(message_size(0, &binary), 1 + 6 + 5);
    }

    #[test]
    fn queue_names_follow_sqs_rules() {
        for ok in ["a", "sent-emails", "jobs_2", "orders.fifo", &"x".repeat(80)] {
            assert!(valid_queue_name(ok), "{ok}");
        }
        for bad in ["", ".fifo", "a/b", "../etc", "with space", &"x".repeat(81)] {
            assert!(!valid_queue_name(bad), "{bad}");
        }
    }

    #[test]
    fn plugin_names_are_never_paths() {
        assert!(valid_plugin_name("email-reminder_2"));
        for bad in ["", "../x", "a/b", "a.wasm", &"p".repeat(65)] {
            assert!(!valid_plugin_name(bad), "{bad}");
        }
    }
}
