//! Between SQS's wire types and the host's message types.
//!
//! SQS bodies are text, and only some characters are allowed (tab, newline, carriage return,
//! and U+0020 upwards minus surrogates and U+FFFE/U+FFFF). A body that is not such text (an
//! image, a protobuf, Latin-1) travels base64-encoded with the attribute
//! `qhost-body-encoding = base64`, and is decoded on receipt; the handler sees the original
//! bytes and never the attribute.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::json::shapes::{self, Message};
use qhost_message::rules::sqs_text;
use qhost_message::wire::BODY_ENCODING;
use qhost_message::{Attribute, AttributeValue, Received};

/// The system attributes qhost asks for on receipt.
pub(crate) const RECEIVE_COUNT: &str = "ApproximateReceiveCount";
pub(crate) const SENT_TIMESTAMP: &str = "SentTimestamp";
pub(crate) const GROUP_ID: &str = "MessageGroupId";

/// The body as SQS will carry it, and whether it had to be encoded.
pub(crate) fn encode_body(body: &[u8]) -> (String, bool) {
    match sqs_text(body) {
        Some(text) => (text.to_string(), false),
        None => (STANDARD.encode(body), true),
    }
}

/// An SQS attribute value for one of ours (binary values base64-encoded, as JSON carries them).
pub(crate) fn attribute_to_sqs(value: &AttributeValue) -> shapes::AttributeValue {
    let (data_type, string_value, binary_value) = match value {
        AttributeValue::String(s) => ("String", Some(s.clone()), None),
        AttributeValue::Number(n) => ("Number", Some(n.clone()), None),
        AttributeValue::Binary(b) => ("Binary", None, Some(STANDARD.encode(b))),
    };
    shapes::AttributeValue {
        data_type: data_type.to_string(),
        string_value,
        binary_value,
    }
}

/// Our attribute value for an SQS one; custom types (`String.uuid`) map by their base type.
/// A binary value that is not base64 is a defect of the message.
fn attribute_from_sqs(v: shapes::AttributeValue) -> Result<AttributeValue, String> {
    let binary = |b: String| {
        STANDARD
            .decode(b)
            .map(AttributeValue::Binary)
            .map_err(|e| format!("a binary attribute is not base64: {e}"))
    };
    let base = v.data_type.split('.').next().unwrap_or_default();
    match (base, v.string_value, v.binary_value) {
        ("Binary", _, Some(b)) => binary(b),
        ("Number", Some(n), _) => Ok(AttributeValue::Number(n)),
        (_, Some(s), _) => Ok(AttributeValue::String(s)),
        (_, None, Some(b)) => binary(b),
        (_, None, None) => Ok(AttributeValue::String(String::new())),
    }
}

/// A received SQS message as ours, or `None` without a receipt handle (nothing could be done
/// with it; SQS always sends one). A message that cannot be read as it should (a body marked
/// base64 that is not, an unknown encoding, a system attribute that is not a number) comes
/// back with the body as it arrived and `malformed` saying why, so that it alone is
/// dead-lettered and never fails the receive of its batch.
pub(crate) fn received(queue: &str, m: Message) -> Option<Received> {
    let Message {
        message_id,
        receipt_handle,
        body: text,
        attributes: mut system,
        message_attributes: mut attrs,
    } = m;
    let receipt = receipt_handle?;
    let mut defects = Vec::new();
    let id = message_id.unwrap_or_else(|| {
        defects.push("the message has no id".to_string());
        format!(
            "no-id-{}",
            qhost_message::digest::sha256_hex(receipt.as_bytes())
        )
    });
    let receive_count = number(&system, RECEIVE_COUNT, &mut defects).unwrap_or(1);
    let sent_at_ms = number(&system, SENT_TIMESTAMP, &mut defects).unwrap_or(0);
    let group_id = system.remove(GROUP_ID);
    let text = text.unwrap_or_default();
    let body = match decode_body(&text, attrs.remove(BODY_ENCODING).as_ref()) {
        Ok(Some(decoded)) => decoded,
        Ok(None) => text.into_bytes(),
        Err(defect) => {
            defects.push(defect);
            text.into_bytes()
        }
    };
    let mut attributes: Vec<Attribute> = Vec::with_capacity(attrs.len());
    for (name, v) in attrs {
        match attribute_from_sqs(v) {
            Ok(value) => attributes.push(Attribute { name, value }),
            Err(defect) => defects.push(format!("attribute {name}: {defect}")),
        }
    }
    attributes.sort_by(|a, b| a.name.cmp(&b.name));
    Some(Received {
        id,
        handle: receipt,
        queue: queue.to_string(),
        body,
        attributes,
        delivery_count: receive_count,
        sent_at_ms,
        group_id,
        malformed: (!defects.is_empty()).then(|| defects.join("; ")),
    })
}

/// The body's bytes by its `qhost-body-encoding` attribute (`None`: the text as it is); the
/// error says what is wrong.
fn decode_body(
    text: &str,
    encoding: Option<&shapes::AttributeValue>,
) -> Result<Option<Vec<u8>>, String> {
    let Some(encoding) = encoding else {
        return Ok(None);
    };
    match encoding.string_value.as_deref() {
        Some("base64") => STANDARD.decode(text).map(Some).map_err(|e| {
            format!("the body is marked `{BODY_ENCODING} = base64` but is not base64: {e}")
        }),
        other => Err(format!(
            "`{BODY_ENCODING}` is `{}`; the only encoding qhost knows is `base64`",
            other.unwrap_or("(not a string)")
        )),
    }
}

/// A numeric system attribute: absent is `None`, unparseable a defect.
fn number<T: std::str::FromStr>(
    system: &HashMap<String, String>,
    name: &str,
    defects: &mut Vec<String>,
) -> Option<T> {
    let text = system.get(name)?;
    let parsed = text.parse().ok();
    if parsed.is_none() {
        defects.push(format!("system attribute {name} is `{text}`, not a number"));
    }
    parsed
}

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
            let sqs = attribute_to_sqs(&value);
            assert_eq!(attribute_from_sqs(sqs), Ok(value));
        }
        let custom = shapes::AttributeValue {
            data_type: "Number.int".into(),
            string_value: Some("7".into()),
            binary_value: None,
        };
        assert_eq!(
            attribute_from_sqs(custom),
            Ok(AttributeValue::Number("7".into()))
        );
    }

    fn message(json: &str) -> Message {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_received_message_reads_its_attributes_and_decodes_its_body() {
        let m = message(
            r#"{"MessageId":"m","ReceiptHandle":"r","Body":"Y2Fm6Q==",
            "Attributes":{"ApproximateReceiveCount":"3","SentTimestamp":"17","MessageGroupId":"g"},
            "MessageAttributes":{"qhost-body-encoding":{"DataType":"String","StringValue":"base64"},
            "k":{"DataType":"String","StringValue":"v"}}}"#,
        );
        let r = received("q", m).unwrap();
        assert_eq!(r.body, vec![0x63, 0x61, 0x66, 0xE9]);
        assert_eq!((r.delivery_count, r.sent_at_ms), (3, 17));
        assert_eq!(r.group_id.as_deref(), Some("g"));
        assert_eq!(
            r.attributes.len(),
            1,
            "the encoding attribute is not the handler's"
        );
        assert_eq!(r.malformed, None);
    }

    #[test]
    fn a_message_that_cannot_be_read_is_marked_not_dropped() {
        let m = message(
            r#"{"ReceiptHandle":"r","Body":"not base64!",
            "Attributes":{"ApproximateReceiveCount":"many"},
            "MessageAttributes":{"qhost-body-encoding":{"DataType":"String","StringValue":"base64"},
            "b":{"DataType":"Binary","BinaryValue":"%%"}}}"#,
        );
        let r = received("q", m).unwrap();
        assert_eq!(r.body, b"not base64!");
        let why = r.malformed.unwrap();
        for defect in [
            "no id",
            "not base64",
            "ApproximateReceiveCount",
            "attribute b",
        ] {
            assert!(why.contains(defect), "{defect}: {why}");
        }
        assert!(
            received("q", message(r#"{"Body":"x"}"#)).is_none(),
            "no receipt"
        );
    }
}
