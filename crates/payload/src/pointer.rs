//! Payload pointers: what a message carries in place of a body that lives in a store.
//!
//! Two formats are read, both marked by a reserved attribute holding the payload's size (a body
//! that merely looks like a pointer, without the attribute, is an ordinary body):
//!
//! - the Amazon SQS Extended Client's, written by the official Java and Python clients: the body
//!   `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"…","s3Key":"…"}]`
//!   (or the legacy class `com.amazon.sqs.javamessaging.MessageS3Pointer`) and the Number
//!   attribute `ExtendedPayloadSize` (or the legacy `SQSLargePayloadSize`);
//! - qhost's own, for its Redis and local stores: `["qhost.payload.v1",{"store":"redis",
//!   "key":"…","size":N,"sha256":"…"}]` with the Number attribute `qhost-payload-size`.
//!
//! qhost writes S3 payloads in the extended client's format, so Java and Python consumers read
//! them, and adds the String attribute `qhost-payload-sha256`, which it checks when present.

use serde_json::{Value, json};

use qhost_message::wire::{
    EXTENDED_SIZE, LEGACY_S3_POINTER_CLASS, PAYLOAD_SHA256, PAYLOAD_SIZE, POINTER_SIZES,
    QHOST_POINTER_CLASS, S3_POINTER_CLASS,
};
use qhost_message::{Attribute, find_attribute};

/// Where a payload lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// An S3 object.
    S3 {
        /// Bucket.
        bucket: String,
        /// Object key.
        key: String,
    },
    /// A key in the Redis payload store.
    Redis(String),
    /// A key in the embedded payload store.
    Local(String),
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
            Location::Redis(key) => write!(f, "redis:{key}"),
            Location::Local(key) => write!(f, "local:{key}"),
        }
    }
}

/// A parsed pointer: where the payload is and what it must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pointer {
    /// Where.
    pub location: Location,
    /// Its size in bytes.
    pub size: u64,
    /// Its sha256 in hex, if the pointer has one.
    pub sha256: Option<String>,
}

/// A received message's body, classified once when it is read: carried in the message, or a
/// pointer to its payload (parsed, with its size and digest), or a pointer that cannot be
/// followed. Routing, keying and fetching all read this one value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// The message carries its body.
    Inline,
    /// The message points to its payload.
    Pointer(Pointer),
    /// The message is marked as a pointer, but the pointer is malformed.
    BadPointer(PointerError),
}

impl Body {
    /// Classifies a message's `body` by its `attributes`: a pointer's JSON is parsed only for
    /// a message that has a pointer's size attribute.
    pub fn of(body: &[u8], attributes: &[Attribute]) -> Body {
        match parse(body, attributes) {
            Ok(None) => Body::Inline,
            Ok(Some(pointer)) => Body::Pointer(pointer),
            Err(e) => Body::BadPointer(e),
        }
    }

    /// Whether the payload is elsewhere (or was meant to be).
    pub fn is_pointer(&self) -> bool {
        !matches!(self, Body::Inline)
    }

    /// The payload's sha256 as its pointer carries it (qhost's pointers do; the Extended
    /// Client's do not).
    pub fn carried_digest(&self) -> Option<&str> {
        match self {
            Body::Pointer(p) => p.sha256.as_deref(),
            _ => None,
        }
    }
}

/// Whether a message with these attributes carries a pointer rather than its body.
pub fn is_pointer(attributes: &[Attribute]) -> bool {
    POINTER_SIZES
        .iter()
        .any(|name| find_attribute(attributes, name).is_some())
}

/// Why a message marked as a pointer cannot be followed: it never will be, so the message is
/// dead-lettered with this reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    /// The size attribute is not a number of bytes.
    #[error("attribute {0} is not a size in bytes")]
    BadSize(&'static str),
    /// The body is not a pointer of a known format.
    #[error("malformed payload pointer: {0}")]
    Malformed(String),
}

fn size_from(attributes: &[Attribute], name: &'static str) -> Option<Result<u64, PointerError>> {
    let a = find_attribute(attributes, name)?;
    Some(
        a.text()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .ok_or(PointerError::BadSize(name)),
    )
}

fn str_field<'a>(obj: &'a Value, name: &str) -> Result<&'a str, PointerError> {
    obj.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| PointerError::Malformed(format!("the pointer has no `{name}`")))
}

/// Parses the pointer a message carries. `Ok(None)`: the message carries its body.
/// `Err`: it is marked as a pointer but the pointer is malformed (the error says how).
pub(crate) fn parse(
    body: &[u8],
    attributes: &[Attribute],
) -> Result<Option<Pointer>, PointerError> {
    let size = POINTER_SIZES
        .iter()
        .find_map(|&name| size_from(attributes, name));
    let Some(size) = size else {
        return Ok(None);
    };
    let size = size?;
    let malformed = PointerError::Malformed;
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("the body is not JSON ({e})")))?;
    let (class, fields) = match value.as_array().map(Vec::as_slice) {
        Some([Value::String(class), fields @ Value::Object(_)]) => (class.as_str(), fields),
        _ => return Err(malformed("expected [CLASS, {…}]".into())),
    };
    let sha256 = find_attribute(attributes, PAYLOAD_SHA256)
        .and_then(|a| a.text())
        .map(str::to_string);
    let location = match class {
        S3_POINTER_CLASS | LEGACY_S3_POINTER_CLASS => Location::S3 {
            bucket: str_field(fields, "s3BucketName")?.into(),
            key: str_field(fields, "s3Key")?.into(),
        },
        QHOST_POINTER_CLASS => {
            let key = str_field(fields, "key")?.to_string();
            let declared = fields.get("size").and_then(Value::as_u64);
            if declared != Some(size) {
                return Err(malformed(format!(
                    "its size {declared:?} disagrees with {PAYLOAD_SIZE} = {size}"
                )));
            }
            let sha256 = str_field(fields, "sha256")?.to_string();
            let location = match str_field(fields, "store")? {
                "redis" => Location::Redis(key),
                "local" => Location::Local(key),
                other => return Err(malformed(format!("unknown store `{other}`"))),
            };
            return Ok(Some(Pointer {
                location,
                size,
                sha256: Some(sha256),
            }));
        }
        other => return Err(malformed(format!("unknown pointer class `{other}`"))),
    };
    Ok(Some(Pointer {
        location,
        size,
        sha256,
    }))
}

/// The body and attributes that stand for `pointer` in a message.
pub(crate) fn encode(pointer: &Pointer) -> (Vec<u8>, Vec<Attribute>) {
    let size = pointer.size.to_string();
    match &pointer.location {
        Location::S3 { bucket, key } => {
            let body = json!([S3_POINTER_CLASS, {"s3BucketName": bucket, "s3Key": key}]);
            let mut attributes = vec![Attribute::number(EXTENDED_SIZE, &size)];
            if let Some(sha) = &pointer.sha256 {
                attributes.push(Attribute::string(PAYLOAD_SHA256, sha));
            }
            (body.to_string().into_bytes(), attributes)
        }
        Location::Redis(key) | Location::Local(key) => {
            let store = if matches!(pointer.location, Location::Redis(_)) {
                "redis"
            } else {
                "local"
            };
            let body = json!([QHOST_POINTER_CLASS, {
                "store": store,
                "key": key,
                "size": pointer.size,
                "sha256": pointer.sha256.clone().unwrap_or_default(),
            }]);
            (
                body.to_string().into_bytes(),
                vec![Attribute::number(PAYLOAD_SIZE, &size)],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qhost_message::wire::LEGACY_EXTENDED_SIZE;

    fn size(name: &str, n: u64) -> Vec<Attribute> {
        vec![Attribute::number(name, n.to_string())]
    }

    #[test]
    fn extended_client_pointers_parse_in_every_spelling() {
        let spaced = br#"["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": "b", "s3Key": "k"}]"#;
        let legacy = br#"["com.amazon.sqs.javamessaging.MessageS3Pointer",{"s3Key":"k","s3BucketName":"b"}]"#;
        let want = Pointer {
            location: Location::S3 {
                bucket: "b".into(),
                key: "k".into(),
            },
            size: 7,
            sha256: None,
        };
        assert_eq!(
            parse(spaced, &size(EXTENDED_SIZE, 7)).unwrap(),
            Some(want.clone())
        );
        assert_eq!(
            parse(legacy, &size(LEGACY_EXTENDED_SIZE, 7)).unwrap(),
            Some(want)
        );
    }

    #[test]
    fn a_pointer_needs_its_attribute_and_a_well_formed_body() {
        assert_eq!(parse(b"[\"x\",{}]", &[]).unwrap(), None);
        let attrs = size(EXTENDED_SIZE, 1);
        for (body, why) in [
            (&b"not json"[..], "not JSON"),
            (b"{}", "expected [CLASS"),
            (b"[\"nope\",{}]", "unknown pointer class"),
            (
                br#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3Key":"k"}]"#,
                "no `s3BucketName`",
            ),
        ] {
            let e = parse(body, &attrs).unwrap_err().to_string();
            assert!(
                e.starts_with("malformed payload pointer") && e.contains(why),
                "{e}"
            );
        }
        let bad_size = vec![Attribute::string(EXTENDED_SIZE, "big")];
        let e = parse(b"[]", &bad_size).unwrap_err();
        assert!(e.to_string().contains("not a size"), "{e}");
    }

    #[test]
    fn qhost_pointers_round_trip_and_s3_ones_carry_the_hash() {
        for location in [
            Location::Redis("a".into()),
            Location::Local("b".into()),
            Location::S3 {
                bucket: "bk".into(),
                key: "p/c".into(),
            },
        ] {
            let p = Pointer {
                location,
                size: 300_000,
                sha256: Some("ab".repeat(32)),
            };
            let (body, attributes) = encode(&p);
            assert_eq!(parse(&body, &attributes).unwrap(), Some(p));
        }
    }
}
