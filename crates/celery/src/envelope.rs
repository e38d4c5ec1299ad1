//! kombu's SQS envelope: the outer base64 (optional), the JSON envelope, and the inner body's
//! encoding and compression; and the same message as AMQP carries it, without an envelope.

use std::borrow::Cow;
use std::io::Read as _;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::DecodeError;

/// The most a compressed task body may inflate to. A hostile stream must not take the host's
/// memory; SQS's own limit on a message is 1 MiB, and an offloaded one is fetched whole anyway.
pub(super) const MAX_INFLATED: u64 = 64 * 1024 * 1024;

/// The `compression` header kombu's zlib compressor writes (the name is historical: the stream
/// is zlib, not gzip).
const ZLIB: &str = "application/x-gzip";

/// A kombu message: its content type, headers and the body bytes those describe.
#[derive(Debug)]
pub(super) struct Envelope {
    /// The serializer's content type (`application/json`, …).
    pub(super) content_type: String,
    /// The message headers (Celery protocol 2 keeps the task's name, id, eta… here).
    pub(super) headers: Map<String, Value>,
    /// The serialized body, its transfer encoding and compression undone.
    pub(super) body: Vec<u8>,
}

/// Opens an SQS message body as kombu's SQS transport does.
pub(super) fn open(raw: &[u8]) -> Result<Envelope, DecodeError> {
    let bad = |why: &str| DecodeError::Envelope(why.to_string());
    let text = optional_base64(raw);
    let value: Value = serde_json::from_slice(&text).map_err(|e| {
        DecodeError::Envelope(format!(
            "the body is neither a kombu JSON envelope nor base64 of one ({e})"
        ))
    })?;
    let Value::Object(mut envelope) = value else {
        return Err(bad("the body is JSON but not a kombu envelope (an object)"));
    };
    let body = match envelope.remove("body") {
        Some(Value::String(body)) => body,
        Some(_) => return Err(bad("the envelope's `body` is not a string")),
        None => return Err(bad("the envelope has no `body`")),
    };
    let content_type = match envelope.get("content-type") {
        Some(Value::String(t)) => t.clone(),
        _ => return Err(bad("the envelope has no `content-type`")),
    };
    let headers = match envelope.remove("headers") {
        Some(Value::Object(headers)) => headers,
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(bad("the envelope's `headers` is not an object")),
    };
    let encoding = (envelope.get("properties"))
        .and_then(|p| p.get("body_encoding"))
        .and_then(Value::as_str);
    let body = match encoding {
        Some("base64") => STANDARD.decode(body.trim()).map_err(|e| {
            DecodeError::Envelope(format!("the body says base64 but does not decode: {e}"))
        })?,
        None => body.into_bytes(),
        Some(other) => {
            return Err(DecodeError::Envelope(format!(
                "body_encoding `{other}` is not one kombu writes (base64)"
            )));
        }
    };
    from_parts(content_type, headers, body)
}

/// A kombu message as AMQP carries it, with no envelope: the content type a property, the
/// headers the message's own, the body as sent (compressed when the headers say so).
pub(super) fn from_parts(
    content_type: String,
    headers: Map<String, Value>,
    body: Vec<u8>,
) -> Result<Envelope, DecodeError> {
    let body = match headers.get("compression") {
        None | Some(Value::Null) => body,
        Some(Value::String(c)) if c == ZLIB || c == "zlib" => inflate(&body)?,
        Some(other) => {
            return Err(DecodeError::Compression(format!(
                "{other} is not one qhost reads ({ZLIB}, kombu's zlib, is)"
            )));
        }
    };
    Ok(Envelope {
        content_type,
        headers,
        body,
    })
}

/// kombu's rule: the body is base64 when it *is* strict, padded base64 of UTF-8 text;
/// anything else (the JSON itself, with `sqs_base64_encoding` off) is read as it is.
fn optional_base64(raw: &[u8]) -> Cow<'_, [u8]> {
    match STANDARD.decode(raw.trim_ascii()) {
        Ok(decoded) if std::str::from_utf8(&decoded).is_ok() => Cow::Owned(decoded),
        _ => Cow::Borrowed(raw),
    }
}

/// Inflates a zlib stream, up to [`MAX_INFLATED`] bytes.
fn inflate(body: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(body)
        .take(MAX_INFLATED + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Compression(format!("the body does not inflate: {e}")))?;
    if out.len() as u64 > MAX_INFLATED {
        return Err(DecodeError::Compression(format!(
            "the body inflates to more than {} MiB",
            MAX_INFLATED >> 20
        )));
    }
    Ok(out)
}
