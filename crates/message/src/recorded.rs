//! Recorded messages: the JSON Lines format `qhost replay` reads and `qhost dlq peek --jsonl`
//! writes, one message per line, so real messages can be run through a new plugin version
//! before it serves.
//!
//! ```json
//! {"id":"m-1","queue":"orders","key":"order-17","body":"{\"order\":17}",
//!  "attributes":[{"name":"tenant","value":{"string":"acme"}}],"receive_count":1,"sent_at_ms":1764000000000}
//! ```
//!
//! - `id` (required): the queue's message id; a plugin keyed by message id derives its key
//!   from it, so a replay derives the key a host derived.
//! - `body` (UTF-8 text) or `body_base64` (any bytes): exactly one.
//! - `queue`, `key` (the key derived where it was recorded, shown beside the replay's own),
//!   `attributes` (as the outbox stores them: `string`, `number` or base64 `binary`),
//!   `receive_count`, `sent_at_ms`, `group_id`: optional.
//!
//! Unknown fields are ignored, so a later qhost can add some without breaking older readers.
//! Blank lines are skipped. A line that is not a message is reported with its number, and the
//! lines after it are still read.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use super::{Attribute, Received};

/// One recorded message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedMessage {
    /// The queue's message id.
    pub id: String,
    /// The queue it came from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub queue: String,
    /// The idempotency key derived where it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// Its attributes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<Attribute>,
    /// 1 on the first delivery.
    #[serde(default = "first_delivery")]
    pub receive_count: u32,
    /// When it was first sent, in milliseconds since the Unix epoch (0: not known).
    #[serde(default)]
    pub sent_at_ms: u64,
    /// FIFO message group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
}

fn first_delivery() -> u32 {
    1
}

/// A line that is not a recorded message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LineError {
    /// Its number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl RecordedMessage {
    /// A record of message `id` with `body` (text when it is UTF-8) and nothing else set.
    pub fn new(id: String, body: &[u8]) -> Self {
        let (body, body_base64) = match std::str::from_utf8(body) {
            Ok(text) => (Some(text.to_string()), None),
            Err(_) => (None, Some(STANDARD.encode(body))),
        };
        RecordedMessage {
            id,
            queue: String::new(),
            key: None,
            body,
            body_base64,
            attributes: Vec::new(),
            receive_count: first_delivery(),
            sent_at_ms: 0,
            group_id: None,
        }
    }

    /// The record of `msg` (with `attributes` as it should be replayed), keyed `key` where known.
    pub fn of(msg: &Received, attributes: Vec<Attribute>, key: Option<String>) -> Self {
        RecordedMessage {
            queue: msg.queue.clone(),
            key,
            attributes,
            receive_count: msg.delivery_count,
            sent_at_ms: msg.sent_at_ms,
            group_id: msg.group_id.clone(),
            ..RecordedMessage::new(msg.id.clone(), &msg.body)
        }
    }

    /// The body's bytes.
    pub fn body(&self) -> Result<Vec<u8>, String> {
        match (&self.body, &self.body_base64) {
            (Some(text), None) => Ok(text.clone().into_bytes()),
            (None, Some(b64)) => STANDARD
                .decode(b64)
                .map_err(|e| format!("`body_base64` is not base64: {e}")),
            (Some(_), Some(_)) => Err("give `body` or `body_base64`, not both".into()),
            (None, None) => Err("it has no `body` (or `body_base64`)".into()),
        }
    }

    /// The message as a queue would hand it over again, on `queue` when the record names none
    /// (a line whose body does not decode was reported when it was read: its body is empty).
    pub fn received(&self, queue: &str) -> super::Received {
        let queue = match self.queue.is_empty() {
            true => queue.to_string(),
            false => self.queue.clone(),
        };
        super::Received {
            id: self.id.clone(),
            handle: String::new(),
            queue,
            body: self.body().unwrap_or_default(),
            attributes: self.attributes.clone(),
            delivery_count: self.receive_count,
            sent_at_ms: self.sent_at_ms,
            group_id: self.group_id.clone(),
            malformed: None,
        }
    }

    /// The message as one line of JSON (no newline).
    pub fn to_line(&self) -> String {
        // Strings, numbers and attribute values only: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The messages in `text`, one per non-blank line; each line that is not one, with its number.
pub fn read_lines(text: &str) -> Vec<Result<(usize, RecordedMessage), LineError>> {
    (text.lines().enumerate())
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let line = i + 1;
            let fail = |reason: String| LineError { line, reason };
            let msg: RecordedMessage =
                serde_json::from_str(l).map_err(|e| fail(format!("not a message: {e}")))?;
            msg.body().map_err(fail)?;
            Ok((line, msg))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(body: &[u8]) -> Received {
        Received {
            id: "m-1".into(),
            handle: "r".into(),
            queue: "orders".into(),
            body: body.to_vec(),
            attributes: vec![],
            delivery_count: 2,
            sent_at_ms: 7,
            group_id: None,
            malformed: None,
        }
    }

    #[test]
    fn text_and_binary_bodies_come_back_as_they_were_written() {
        let attrs = vec![
            Attribute::string("tenant", "acme"),
            Attribute::number("n", 3),
        ];
        for body in [&b"{\"order\":17}"[..], &[0xff, 0x00, 0x80][..]] {
            let record = RecordedMessage::of(&received(body), attrs.clone(), Some("k".into()));
            let line = record.to_line();
            assert!(!line.contains('\n'));
            let read = read_lines(&line);
            let (n, back) = read[0].clone().unwrap();
            assert_eq!((n, &back), (1, &record));
            assert_eq!(back.body().unwrap(), body);
        }
        let text = RecordedMessage::of(&received(b"hi"), vec![], None).to_line();
        assert_eq!(
            text,
            r#"{"id":"m-1","queue":"orders","body":"hi","receive_count":2,"sent_at_ms":7}"#
        );
    }

    #[test]
    fn a_broken_line_is_named_by_its_number_and_the_rest_are_read() {
        let text = "{\"id\":\"a\",\"body\":\"x\"}\n\n{not json\n{\"id\":\"b\"}\n{\"id\":\"c\",\"body_base64\":\"eQ==\"}\n";
        let read = read_lines(text);
        assert_eq!(read.len(), 4, "the blank line is skipped");
        assert_eq!(read[0].as_ref().unwrap().1.id, "a");
        let broken = read[1].as_ref().unwrap_err();
        assert_eq!(broken.line, 3);
        assert!(broken.to_string().starts_with("line 3: not a message"));
        let bodiless = read[2].as_ref().unwrap_err();
        assert_eq!(bodiless.line, 4);
        assert!(bodiless.reason.contains("no `body`"), "{bodiless}");
        let (line, last) = read[3].as_ref().unwrap();
        assert_eq!((*line, last.body().unwrap()), (5, b"y".to_vec()));
        assert_eq!(last.receive_count, 1, "defaults to a first delivery");
    }
}
