//! Between SQS's wire types and the host's message types.
//!
//! SQS bodies are text, and only some characters are allowed (tab, newline, carriage return,
//! and U+0020 upwards minus surrogates and U+FFFE/U+FFFF). A body that is not such text (an
//! image, a protobuf, Latin-1) travels base64-encoded with the attribute
//! `qhost-body-encoding = base64`, and is decoded on receipt; the handler sees the original
//! bytes and never the attribute.

use std::collections::HashMap;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName as Sys};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::message::rules::sqs_text;
use crate::message::wire::BODY_ENCODING;
use crate::message::{Attribute, AttributeValue, Received};

/// The body as SQS will carry it, and whether it had to be encoded.
pub(crate) fn encode_body(body: &[u8]) -> (String, bool) {
    match sqs_text(body) {
        Some(text) => (text.to_string(), false),
        None => (STANDARD.encode(body), true),
    }
}

/// An SQS attribute value for one of ours.
pub(crate) fn attribute_to_sqs(value: &AttributeValue) -> Result<MessageAttributeValue, String> {
    let builder = MessageAttributeValue::builder();
    let built = match value {
        AttributeValue::String(s) => builder.data_type("String").string_value(s),
        AttributeValue::Number(n) => builder.data_type("Number").string_value(n),
        AttributeValue::Binary(b) => builder
            .data_type("Binary")
            .binary_value(Blob::new(b.clone())),
    };
    built.build().map_err(|e| e.to_string())
}

/// Our attribute value for an SQS one; custom types (`String.uuid`) map by their base type.
fn attribute_from_sqs(v: &MessageAttributeValue) -> AttributeValue {
    let base = v.data_type().split('.').next().unwrap_or_default();
    match (base, v.string_value(), v.binary_value()) {
        ("Binary", _, Some(b)) => AttributeValue::Binary(b.as_ref().to_vec()),
        ("Number", Some(n), _) => AttributeValue::Number(n.to_string()),
        (_, Some(s), _) => AttributeValue::String(s.to_string()),
        (_, None, Some(b)) => AttributeValue::Binary(b.as_ref().to_vec()),
        (_, None, None) => AttributeValue::String(String::new()),
    }
}

fn system(m: &Message, name: Sys) -> Option<&str> {
    m.attributes()
        .and_then(|a| a.get(&name))
        .map(String::as_str)
}

/// A received SQS message as ours, or `None` without a receipt handle (nothing could be done
/// with it; SQS always sends one). A message that cannot be read as it should (a body marked
/// base64 that is not, an unknown encoding, a system attribute that is not a number) comes
/// back with the body as it arrived and `malformed` saying why, so that it alone is
/// dead-lettered and never fails the receive of its batch.
pub(crate) fn received(queue: &str, m: &Message) -> Option<Received> {
    let receipt = m.receipt_handle()?.to_string();
    let mut defects = Vec::new();
    let id = m.message_id().map(str::to_string).unwrap_or_else(|| {
        defects.push("the message has no id".to_string());
        format!("no-id-{}", crate::digest::sha256_hex(receipt.as_bytes()))
    });
    let attrs: &HashMap<String, MessageAttributeValue> = m.message_attributes().unwrap_or(&EMPTY);
    let text = m.body().unwrap_or_default();
    let body = decode_body(text, attrs.get(BODY_ENCODING)).unwrap_or_else(|defect| {
        defects.push(defect);
        text.as_bytes().to_vec()
    });
    let mut attributes: Vec<Attribute> = attrs
        .iter()
        .filter(|(name, _)| name.as_str() != BODY_ENCODING)
        .map(|(name, v)| Attribute {
            name: name.clone(),
            value: attribute_from_sqs(v),
        })
        .collect();
    attributes.sort_by(|a, b| a.name.cmp(&b.name));
    let receive_count = number(m, Sys::ApproximateReceiveCount, &mut defects).unwrap_or(1);
    let sent_at_ms = number(m, Sys::SentTimestamp, &mut defects).unwrap_or(0);
    Some(Received {
        id,
        receipt,
        queue: queue.to_string(),
        body,
        attributes,
        receive_count,
        sent_at_ms,
        group_id: system(m, Sys::MessageGroupId).map(str::to_string),
        malformed: (!defects.is_empty()).then(|| defects.join("; ")),
    })
}

/// The body's bytes, by its `qhost-body-encoding` attribute; the error says what is wrong.
fn decode_body(text: &str, encoding: Option<&MessageAttributeValue>) -> Result<Vec<u8>, String> {
    let Some(encoding) = encoding else {
        return Ok(text.as_bytes().to_vec());
    };
    match encoding.string_value() {
        Some("base64") => STANDARD.decode(text).map_err(|e| {
            format!("the body is marked `{BODY_ENCODING} = base64` but is not base64: {e}")
        }),
        other => Err(format!(
            "`{BODY_ENCODING}` is `{}`; the only encoding qhost knows is `base64`",
            other.unwrap_or("(not a string)")
        )),
    }
}

/// A numeric system attribute: absent is `None`, unparseable a defect.
fn number<T: std::str::FromStr>(m: &Message, name: Sys, defects: &mut Vec<String>) -> Option<T> {
    let text = system(m, name.clone())?;
    let parsed = text.parse().ok();
    if parsed.is_none() {
        let name = name.as_str();
        defects.push(format!("system attribute {name} is `{text}`, not a number"));
    }
    parsed
}

static EMPTY: std::sync::LazyLock<HashMap<String, MessageAttributeValue>> =
    std::sync::LazyLock::new(HashMap::new);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_travels_as_is_and_anything_else_as_base64() {
        assert_eq!(
            encode_body(b"hello\tworld\n"),
            ("hello\tworld\n".to_string(), false)
        );
        assert!(!encode_body("ünïcödé ✓".as_bytes()).1);
        let (latin1, encoded) = encode_body(&[0x63, 0x61, 0x66, 0xE9]);
        assert!(encoded);
        assert_eq!(
            STANDARD.decode(latin1).unwrap(),
            vec![0x63, 0x61, 0x66, 0xE9]
        );
        assert!(
            encode_body(b"nul\0byte").1,
            "control characters are not allowed"
        );
        assert!(encode_body("\u{FFFF}".as_bytes()).1);
    }

    #[test]
    fn attributes_round_trip_through_sqs_types() {
        for value in [
            AttributeValue::String("s".into()),
            AttributeValue::Number("1.5".into()),
            AttributeValue::Binary(vec![0, 255, 7]),
        ] {
            let sqs = attribute_to_sqs(&value).unwrap();
            assert_eq!(attribute_from_sqs(&sqs), value);
        }
        let custom = MessageAttributeValue::builder()
            .data_type("Number.int")
            .string_value("7")
            .build()
            .unwrap();
        assert_eq!(
            attribute_from_sqs(&custom),
            AttributeValue::Number("7".into())
        );
    }
}
