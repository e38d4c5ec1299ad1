//! The task body by its content type: JSON (with kombu's type tags) and msgpack, when the queue
//! accepts them; pickle never.

use serde_json::{Map, Value};

use super::DecodeError;
use super::envelope::Envelope;

/// Pickle's content type, refused before anything else is looked at.
const PICKLE: &str = "application/x-python-serialize";

/// kombu's JSON tags whose value is given to the handler as the string kombu wrote.
const TAGS: [&str; 6] = ["datetime", "date", "time", "decimal", "uuid", "bytes"];

/// A serializer a Celery queue may accept (`accept-content`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentType {
    /// `application/json`, Celery's default.
    Json,
    /// `application/x-msgpack`.
    Msgpack,
}

impl ContentType {
    /// The serializer a configuration names (`json` or `msgpack`, or their MIME types), or why
    /// it names none qhost reads.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "json" | "application/json" => Ok(ContentType::Json),
            "msgpack" | "application/x-msgpack" => Ok(ContentType::Msgpack),
            "pickle" | PICKLE => Err(format!(
                "`{name}` is never accepted: unpickling runs code of the sender's choosing"
            )),
            "yaml" | "application/x-yaml" => Err(format!(
                "`{name}` is not read by qhost; send the task as json or msgpack"
            )),
            other => Err(format!(
                "`{other}` is not a Celery serializer qhost reads (json, msgpack)"
            )),
        }
    }

    /// Its MIME type, as kombu writes it in the envelope.
    pub fn mime(self) -> &'static str {
        match self {
            ContentType::Json => "application/json",
            ContentType::Msgpack => "application/x-msgpack",
        }
    }

    /// Its short name, as in `accept-content`.
    pub fn name(self) -> &'static str {
        match self {
            ContentType::Json => "json",
            ContentType::Msgpack => "msgpack",
        }
    }
}

/// Reads the envelope's body as its content type, if `accepted` holds it.
pub(super) fn read(envelope: &Envelope, accepted: &[ContentType]) -> Result<Value, DecodeError> {
    let found = envelope.content_type.as_str();
    if found == PICKLE {
        return Err(DecodeError::Pickle);
    }
    let Some(kind) = accepted.iter().copied().find(|k| k.mime() == found) else {
        let accepted: Vec<&str> = accepted.iter().map(|k| k.name()).collect();
        return Err(DecodeError::NotAccepted {
            found: found.to_string(),
            accepted: accepted.join(", "),
        });
    };
    let body = &envelope.body;
    let bad = |reason: String| DecodeError::Body {
        content_type: kind.mime(),
        reason,
    };
    match kind {
        ContentType::Json => {
            let value: Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
            untag(value)
        }
        ContentType::Msgpack => rmp_serde::from_slice(body).map_err(|e| bad(e.to_string())),
    }
}

/// Replaces kombu's `{"__type__": T, "__value__": V}` tags by `V`, the string kombu wrote (an
/// ISO 8601 datetime, a decimal's digits, a UUID). A tag kombu does not write is refused, as
/// kombu refuses it.
fn untag(value: Value) -> Result<Value, DecodeError> {
    Ok(match value {
        Value::Array(items) => {
            Value::Array(items.into_iter().map(untag).collect::<Result<_, _>>()?)
        }
        Value::Object(mut map) if is_tag(&map) => {
            let kind = map["__type__"].as_str().unwrap_or_default().to_string();
            if !TAGS.contains(&kind.as_str()) {
                return Err(DecodeError::Body {
                    content_type: ContentType::Json.mime(),
                    reason: format!("kombu has no decoder for the type tag `{kind}`"),
                });
            }
            map.remove("__value__").unwrap_or_default()
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| Ok((k, untag(v)?)))
                .collect::<Result<Map<_, _>, DecodeError>>()?,
        ),
        other => other,
    })
}

fn is_tag(map: &Map<String, Value>) -> bool {
    map.len() == 2
        && map.contains_key("__value__")
        && map.get("__type__").is_some_and(Value::is_string)
}
