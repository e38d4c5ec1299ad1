//! pgmq's messages to and from qhost's. A pgmq message is JSON (`jsonb`), with headers (a JSON
//! object) beside it; a qhost message is bytes with attributes.
//!
//! - **Bodies**: a body that is JSON travels as that JSON, so a pgmq producer's message is the
//!   body a handler reads, and a handler's JSON reaches a pgmq consumer as JSON. PostgreSQL
//!   keeps `jsonb` in a normal form (keys sorted, spaces after `:` and `,`), so a body comes
//!   back equal as JSON, not byte for byte. Any other body travels as a JSON string, with the
//!   header `qhost-body-encoding` saying how: `text` (UTF-8 as it is) or `base64` (bytes).
//! - **Attributes** are headers: a string as a JSON string, a number as a JSON number, bytes as
//!   `{"base64": "…"}`. A producer's header of another JSON type reaches the handler as a
//!   string attribute holding its JSON.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use qhost_message::{Attribute, AttributeValue, Outgoing, wire};

/// What a message is stored as: its `message` and its `headers`, as JSON text.
pub(crate) fn to_pgmq(m: &Outgoing) -> (String, String) {
    let mut headers = Map::new();
    for a in &m.attributes {
        headers.insert(a.name.clone(), header(&a.value));
    }
    let message = match serde_json::from_slice::<Value>(&m.body) {
        Ok(json) => json.to_string(),
        Err(_) => {
            let (how, text) = match std::str::from_utf8(&m.body) {
                Ok(text) => ("text", text.to_string()),
                Err(_) => ("base64", STANDARD.encode(&m.body)),
            };
            headers.insert(wire::BODY_ENCODING.into(), Value::from(how));
            Value::from(text).to_string()
        }
    };
    (message, Value::Object(headers).to_string())
}

fn header(value: &AttributeValue) -> Value {
    match value {
        AttributeValue::String(s) => Value::from(s.as_str()),
        AttributeValue::Number(n) => match serde_json::from_str::<serde_json::Number>(n) {
            Ok(number) => Value::Number(number),
            Err(_) => Value::from(n.as_str()),
        },
        AttributeValue::Binary(b) => {
            let mut object = Map::new();
            object.insert("base64".into(), Value::from(STANDARD.encode(b)));
            Value::Object(object)
        }
    }
}

/// A stored message's body and attributes, from its `message` and `headers` (JSON text; the
/// headers may be absent). Why it cannot be read as qhost reads it, if it cannot.
pub(crate) fn from_pgmq(
    message: Option<&str>,
    headers: Option<&str>,
) -> (Vec<u8>, Vec<Attribute>, Option<String>) {
    let headers: Map<String, Value> = match headers.map(serde_json::from_str::<Value>) {
        Some(Ok(Value::Object(map))) => map,
        _ => Map::new(),
    };
    let encoding = headers.get(wire::BODY_ENCODING).and_then(Value::as_str);
    let message = message.unwrap_or("null");
    let (body, malformed) = match (encoding, serde_json::from_str::<Value>(message)) {
        (Some("text"), Ok(Value::String(text))) => (text.into_bytes(), None),
        (Some("base64"), Ok(Value::String(text))) => match STANDARD.decode(&text) {
            Ok(bytes) => (bytes, None),
            Err(e) => (
                text.into_bytes(),
                Some(format!("the body is marked base64 and is not: {e}")),
            ),
        },
        _ => (message.as_bytes().to_vec(), None),
    };
    let attributes = (headers.into_iter())
        .filter(|(name, _)| name != wire::BODY_ENCODING)
        .map(|(name, value)| Attribute {
            name,
            value: attribute(value),
        })
        .collect();
    (body, attributes, malformed)
}

fn attribute(value: Value) -> AttributeValue {
    match value {
        Value::String(s) => AttributeValue::String(s),
        Value::Number(n) => AttributeValue::Number(n.to_string()),
        Value::Object(o) if o.len() == 1 => match o.get("base64").and_then(Value::as_str) {
            Some(text) => match STANDARD.decode(text) {
                Ok(bytes) => AttributeValue::Binary(bytes),
                Err(_) => AttributeValue::String(Value::Object(o).to_string()),
            },
            None => AttributeValue::String(Value::Object(o).to_string()),
        },
        other => AttributeValue::String(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: &Outgoing) -> (Vec<u8>, Vec<Attribute>) {
        let (message, headers) = to_pgmq(m);
        let (body, attributes, malformed) = from_pgmq(Some(&message), Some(&headers));
        assert_eq!(malformed, None);
        (body, attributes)
    }

    #[test]
    fn json_travels_as_json_and_anything_else_as_a_marked_string() {
        let json = Outgoing::new("q", r#"{"to":"a@example.com"}"#);
        assert_eq!(to_pgmq(&json).0, r#"{"to":"a@example.com"}"#);
        assert_eq!(round_trip(&json).0, br#"{"to":"a@example.com"}"#);
        let text = Outgoing::new("q", "ack 1");
        let (message, headers) = to_pgmq(&text);
        assert_eq!(message, r#""ack 1""#);
        assert!(
            headers.contains(r#""qhost-body-encoding":"text""#),
            "{headers}"
        );
        assert_eq!(round_trip(&text), (b"ack 1".to_vec(), vec![]));
        let bytes = Outgoing::new("q", vec![0u8, 159, 146, 150]);
        assert_eq!(round_trip(&bytes).0, vec![0u8, 159, 146, 150]);
    }

    #[test]
    fn attributes_are_headers_of_their_type() {
        let m = Outgoing::new("q", "{}")
            .with_attribute(Attribute::string("job-id", "j-1"))
            .with_attribute(Attribute {
                name: "n".into(),
                value: AttributeValue::Number("3.5".into()),
            })
            .with_attribute(Attribute {
                name: "b".into(),
                value: AttributeValue::Binary(vec![1, 2]),
            });
        let (_, headers) = to_pgmq(&m);
        assert!(headers.contains(r#""job-id":"j-1""#) && headers.contains(r#""n":3.5"#));
        let (_, mut back) = round_trip(&m);
        back.sort_by(|a, b| a.name.cmp(&b.name));
        let mut sent = m.attributes.clone();
        sent.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(back, sent);
    }

    #[test]
    fn a_producer_s_message_and_headers_read_as_they_are() {
        let (body, attributes, malformed) = from_pgmq(
            Some(r#"{"a": 1}"#),
            Some(r#"{"tenant": "acme", "flags": [1]}"#),
        );
        assert_eq!((body, malformed), (br#"{"a": 1}"#.to_vec(), None));
        assert!(attributes.contains(&Attribute::string("tenant", "acme")));
        assert!(attributes.contains(&Attribute::string("flags", "[1]")));
        let (body, _, malformed) = from_pgmq(
            Some("\"%%%\""),
            Some(r#"{"qhost-body-encoding": "base64"}"#),
        );
        assert_eq!(body, b"%%%");
        assert!(malformed.is_some_and(|why| why.contains("base64")));
        let (body, attributes, _) = from_pgmq(None, None);
        assert_eq!((body, attributes), (b"null".to_vec(), vec![]));
    }
}
