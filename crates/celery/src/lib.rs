//! Celery's task messages, read as a Celery worker reads them from SQS, so a queue that Celery
//! producers send to can be consumed by qhost without touching the producers.
//!
//! A Celery message on SQS has three layers, each decoded here the way kombu and Celery do (on
//! RabbitMQ the first is AMQP's own: headers and a content type beside the body,
//! [`decode_amqp`]):
//!
//! 1. [`envelope`]: kombu's SQS transport sends base64 of a JSON envelope (or the JSON as is,
//!    with `sqs_base64_encoding` off; kombu tells them apart by whether the body *is* strict
//!    base64 of UTF-8, and so does qhost). The envelope holds `content-type`, `headers` and
//!    `properties`, and the inner `body`, base64 again when `properties.body_encoding` says so
//!    and zlib-compressed when the `compression` header says `application/x-gzip`.
//! 2. [`content`]: the inner body by its content type. JSON (with kombu's `__type__` tags for
//!    datetimes, decimals, UUIDs and bytes, given to the handler as their strings) and msgpack
//!    are read when the queue accepts them (`accept-content`, JSON only by default, as in
//!    Celery). Pickle is refused for good and never parsed: unpickling runs code of the
//!    sender's choosing.
//! 3. [`task`]: Celery's task protocol, version 2 (the task's name, id, retries, eta, expires
//!    and time limits in the headers; the body `[args, kwargs, embed]`) or version 1 (all of it
//!    in one body dict).
//!
//! What the host does with a task (route by name, key by id, hold back until its eta, drop it
//! past its expiry) is the host's Celery format (`format::celery`); this crate reads, and writes
//! what a worker writes: tasks a handler sends ([`send`]) and a task's callbacks and chain
//! ([`follow`]). Result records, which need the configuration's backend, are the host's
//! (`celery::results`), and so is `qhost check`'s reading of a queue's samples
//! (`celery::inspect`). Both the runtime (a handler's outbox sends Celery tasks) and the formats
//! name this crate, and it names only `qhost-message`: the protocol is a leaf.

mod content;
mod envelope;
pub mod follow;
pub mod send;
mod task;

pub use content::ContentType;
pub use task::{Task, iso8601};

/// Why a message is not a Celery task qhost will run. Each is the message's own fault, so it is
/// dead-lettered with this reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not a kombu envelope.
    #[error("not a Celery message: {0}")]
    Envelope(String),
    /// Pickle, which is never read.
    #[error(
        "content type application/x-python-serialize (pickle) is refused: unpickling runs code \
         of the sender's choosing; send the task with the json or msgpack serializer"
    )]
    Pickle,
    /// A content type the queue does not accept.
    #[error("content type `{found}` is not accepted on this queue (accept-content = [{accepted}])")]
    NotAccepted {
        /// The envelope's content type.
        found: String,
        /// The queue's accepted types.
        accepted: String,
    },
    /// A compression qhost does not read, or a stream that does not inflate.
    #[error("compression: {0}")]
    Compression(String),
    /// The body does not parse as its content type says.
    #[error("the task body is not valid {content_type}: {reason}")]
    Body {
        /// The envelope's content type.
        content_type: &'static str,
        /// The parser's error.
        reason: String,
    },
    /// The body parses but is not a Celery task.
    #[error("not a Celery task: {0}")]
    Protocol(String),
    /// A task qhost does not run as Celery would (`follow`): refused before it runs.
    #[error("not run by qhost: {0}")]
    Unsupported(String),
}

/// Decodes an SQS message body sent by a Celery producer into its task, reading the content
/// types in `accepted` only.
pub fn decode(raw: &[u8], accepted: &[ContentType]) -> Result<Task, DecodeError> {
    let envelope = envelope::open(raw)?;
    let body = content::read(&envelope, accepted)?;
    task::read(envelope.headers, body)
}

/// Decodes a task as AMQP carries it (RabbitMQ): Celery's headers are the message's headers,
/// its serializer the `content_type` property, and the body `[args, kwargs, embed]` itself,
/// with no kombu envelope around it.
pub fn decode_amqp(
    body: &[u8],
    content_type: &str,
    headers: serde_json::Map<String, serde_json::Value>,
    accepted: &[ContentType],
) -> Result<Task, DecodeError> {
    let envelope = envelope::from_parts(content_type.to_string(), headers, body.to_vec())?;
    let body = content::read(&envelope, accepted)?;
    task::read(envelope.headers, body)
}

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
#[cfg(test)]
mod tests;
