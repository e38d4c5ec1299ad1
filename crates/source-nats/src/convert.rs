//! JetStream's messages to and from qhost's. A NATS message is bytes with headers, each a
//! string; a qhost message is bytes with typed attributes.
//!
//! - **Bodies** travel as they are.
//! - **Attributes** are headers. A string is its value; a number is its decimal text, its name
//!   listed in the header `qhost-numbers`; bytes are base64, the name listed in
//!   `qhost-binary`. A producer's header is a string attribute; NATS's own headers
//!   (`Nats-…`) are the broker's, not the message's, and are left out.
//! - **`Nats-Msg-Id`**, JetStream's deduplication id, is the message's deduplication id when
//!   it has one, else its idempotency key (`qhost-idempotency-key`, the derived key qhost
//!   stamps on each outbox message): a copy re-sent within the stream's duplicate window is
//!   dropped by the stream itself.

use async_nats::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use qhost_message::{Attribute, AttributeValue, Outgoing, wire};

/// Names the number attributes among the headers.
const NUMBERS: &str = "qhost-numbers";
/// Names the binary attributes among the headers.
const BINARY: &str = "qhost-binary";
/// JetStream's deduplication id.
pub(crate) const MSG_ID: &str = "Nats-Msg-Id";

/// The headers `m` travels with.
pub(crate) fn headers(m: &Outgoing) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let (mut numbers, mut binary) = (Vec::new(), Vec::new());
    for a in &m.attributes {
        match &a.value {
            AttributeValue::String(s) => headers.insert(a.name.as_str(), s.as_str()),
            AttributeValue::Number(n) => {
                numbers.push(a.name.as_str());
                headers.insert(a.name.as_str(), n.as_str());
            }
            AttributeValue::Binary(b) => {
                binary.push(a.name.as_str());
                headers.insert(a.name.as_str(), STANDARD.encode(b));
            }
        }
    }
    for (marker, names) in [(NUMBERS, numbers), (BINARY, binary)] {
        if !names.is_empty() {
            headers.insert(marker, names.join(","));
        }
    }
    let key = qhost_message::find_attribute(&m.attributes, wire::IDEMPOTENCY_KEY)
        .and_then(Attribute::text);
    if let Some(id) = m.dedup_id.as_deref().or(key) {
        headers.insert(MSG_ID, id);
    }
    headers
}

/// A message's attributes from its `headers`; why one cannot be read, if one cannot.
pub(crate) fn attributes(headers: Option<&HeaderMap>) -> (Vec<Attribute>, Option<String>) {
    let Some(headers) = headers else {
        return (Vec::new(), None);
    };
    let listed = |marker: &str| -> Vec<String> {
        (headers.get(marker).map(|v| v.as_str()).unwrap_or_default())
            .split(',')
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (numbers, binary) = (listed(NUMBERS), listed(BINARY));
    let (mut attributes, mut malformed) = (Vec::new(), None);
    for (name, values) in headers.iter() {
        let name: &str = name.as_ref();
        if name == NUMBERS || name == BINARY || name.starts_with("Nats-") {
            continue;
        }
        let Some(value) = values.first().map(|v| v.as_str().to_string()) else {
            continue;
        };
        let value = if numbers.iter().any(|n| n == name) {
            AttributeValue::Number(value)
        } else if binary.iter().any(|n| n == name) {
            match STANDARD.decode(&value) {
                Ok(bytes) => AttributeValue::Binary(bytes),
                Err(e) => {
                    malformed = Some(format!(
                        "header {name} is marked binary and is not base64: {e}"
                    ));
                    AttributeValue::String(value)
                }
            }
        } else {
            AttributeValue::String(value)
        };
        attributes.push(Attribute {
            name: name.to_string(),
            value,
        });
    }
    attributes.sort_by(|a, b| a.name.cmp(&b.name));
    (attributes, malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_travel_as_headers_of_their_type() {
        let m = Outgoing::new("q", "body")
            .with_attribute(Attribute::string("tenant", "acme"))
            .with_attribute(Attribute::number("n", 42))
            .with_attribute(Attribute {
                name: "raw".into(),
                value: AttributeValue::Binary(vec![0, 159, 146]),
            })
            .with_attribute(Attribute::string(wire::IDEMPOTENCY_KEY, "p:k/0"));
        let headers = headers(&m);
        assert_eq!(headers.get(MSG_ID).map(|v| v.as_str()), Some("p:k/0"));
        let (mut back, malformed) = attributes(Some(&headers));
        assert_eq!(malformed, None);
        let mut sent = m.attributes.clone();
        sent.sort_by(|a, b| a.name.cmp(&b.name));
        back.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(back, sent);
    }

    #[test]
    fn a_producers_headers_are_strings_and_nats_own_are_left_out() {
        let mut headers = HeaderMap::new();
        headers.insert("job-id", "j-1");
        headers.insert(MSG_ID, "j-1");
        let (attributes, malformed) = attributes(Some(&headers));
        assert_eq!(attributes, vec![Attribute::string("job-id", "j-1")]);
        assert_eq!(malformed, None);
    }

    #[test]
    fn a_header_marked_binary_that_is_not_base64_is_malformed() {
        let mut headers = HeaderMap::new();
        headers.insert("raw", "not base64!");
        headers.insert(BINARY, "raw");
        let (_, malformed) = attributes(Some(&headers));
        assert!(malformed.is_some_and(|m| m.contains("raw")));
    }
}
