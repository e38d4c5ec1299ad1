//! Bytes in JSON as base64 text, where qhost stores messages as JSON (a pending outbox in the
//! idempotency store, attributes in the embedded queue, folded attributes on a dead letter):
//! a third of the size again, where a JSON array of numbers is up to four times it.
//!
//! Reading also accepts the array form, which earlier versions wrote.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serializer};

/// Writes `bytes` as base64 text.
pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&STANDARD.encode(bytes))
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Text(String),
    Numbers(Vec<u8>),
}

/// Reads base64 text, or an array of numbers.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    match Stored::deserialize(d)? {
        Stored::Text(text) => STANDARD.decode(text).map_err(serde::de::Error::custom),
        Stored::Numbers(bytes) => Ok(bytes),
    }
}

#[cfg(test)]
mod tests {
    use crate::{Attribute, AttributeValue, Outgoing};

    #[test]
    fn bodies_and_binary_values_are_base64_and_old_arrays_still_read() {
        let mut msg = Outgoing::new("q", vec![0u8, 255, 7]);
        msg.attributes.push(Attribute {
            name: "b".into(),
            value: AttributeValue::Binary(vec![1, 2]),
        });
        let json = serde_json::to_string(&msg).unwrap();
        assert!(json.contains(r#""body":"AP8H""#), "{json}");
        assert!(json.contains(r#"{"binary":"AQI="}"#), "{json}");
        assert_eq!(serde_json::from_str::<Outgoing>(&json).unwrap(), msg);
        let old = json
            .replace(r#""AP8H""#, "[0,255,7]")
            .replace(r#""AQI=""#, "[1,2]");
        assert_eq!(serde_json::from_str::<Outgoing>(&old).unwrap(), msg);
    }
}
