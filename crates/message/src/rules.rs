//! SQS's rules for a message to be sent, checked before anything is sent: by the outbox when a
//! handler asks to send (so the handler hears why, and can decide), and by the embedded queue
//! (so that what it accepts, SQS accepts too).
//!
//! A message is checked as it will travel: a body that is not SQS text goes base64-encoded
//! with one more attribute ([`wire::BODY_ENCODING`]), and both count. The rules are SQS's
//! documented ones; where SQS refuses with `InvalidParameterValue`, `InvalidAttributeName`,
//! `InvalidAttributeValue` or `InvalidMessageContents`, [`check`] refuses first, saying what
//! is wrong.

use super::wire::{self, MAX_MESSAGE_BYTES};
use super::{Attribute, AttributeValue, Outgoing};

/// Attributes SQS allows on one message.
pub const MAX_ATTRIBUTES: usize = 10;
/// The longest attribute name SQS allows.
pub const MAX_ATTRIBUTE_NAME: usize = 256;
/// The longest per-message delay SQS allows.
pub const MAX_DELAY_SECS: u32 = 900;
/// The longest FIFO group or deduplication id SQS allows.
pub const MAX_FIFO_ID: usize = 128;
/// Significant digits SQS keeps of a number attribute.
const MAX_NUMBER_DIGITS: usize = 38;

/// Why SQS would refuse a message; the text says exactly what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

fn refuse<T>(why: String) -> Result<T, Refused> {
    Err(Refused(why))
}

/// Whether SQS accepts `c` in a message body or a string attribute.
pub fn sqs_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// `body` as text, if it travels as it is: UTF-8 made only of characters SQS accepts.
pub fn sqs_text(body: &[u8]) -> Option<&str> {
    std::str::from_utf8(body)
        .ok()
        .filter(|text| text.chars().all(sqs_char))
}

/// Whether `body` travels as it is (see [`sqs_text`]).
pub fn is_sqs_text(body: &[u8]) -> bool {
    sqs_text(body).is_some()
}

/// How a body travels, worked out once per check (it reads the whole body).
#[derive(Clone, Copy, Debug)]
struct AsSent {
    /// Whether it goes base64-encoded, with the encoding attribute.
    encoded: bool,
    /// Its length on the wire.
    len: usize,
}

fn as_sent(body: &[u8]) -> AsSent {
    let encoded = !is_sqs_text(body);
    let len = if encoded {
        body.len().div_ceil(3) * 4
    } else {
        body.len()
    };
    AsSent { encoded, len }
}

/// The size SQS counts for `msg` as it will travel (base64 and its attribute included).
pub fn size_as_sent(msg: &Outgoing) -> usize {
    size_with(msg, as_sent(&msg.body))
}

fn size_with(msg: &Outgoing, sent: AsSent) -> usize {
    let marker = if sent.encoded {
        wire::message_size(0, &[Attribute::string(wire::BODY_ENCODING, "base64")])
    } else {
        0
    };
    wire::message_size(sent.len, &msg.attributes) + marker
}

/// How the host sends a message a handler asked for: as it is, or its body offloaded to the
/// payload store with a pointer in its place; and a message in a producer's own envelope (a
/// Celery task) laid out as the broker's own producers lay it out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendShape {
    /// How a Celery task is laid out.
    pub envelope: Envelope,
    /// Messages larger than this as sent are offloaded; `None` without a payload store.
    pub offload_above: Option<usize>,
    /// Every message is offloaded, whatever its size.
    pub offload_always: bool,
    /// Attributes the store's pointer adds to a message.
    pub pointer_attributes: usize,
}

/// How a message in a producer's envelope (a Celery task) travels on the host's broker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Envelope {
    /// In kombu's JSON envelope, the body: as Celery's producers send on SQS (and on the
    /// embedded queue, which is SQS's shape).
    #[default]
    Kombu,
    /// As AMQP properties and headers beside the body (`wire::AMQP_*` attributes): as Celery's
    /// producers send on RabbitMQ.
    Amqp,
}

impl SendShape {
    /// Whether a message of `size` bytes as sent travels offloaded.
    fn offloads_at(&self, size: usize) -> bool {
        self.offload_above
            .is_some_and(|above| self.offload_always || size > above)
    }
}

/// Checks `msg` as the host will send it: offloaded (its attributes beside the pointer's), or
/// as it is (every rule, size included).
pub fn check_as_sent(msg: &Outgoing, shape: &SendShape) -> Result<(), Refused> {
    let sent = as_sent(&msg.body);
    let size = size_with(msg, sent);
    if !shape.offloads_at(size) {
        return check_sent(msg, sent).map_err(|r| match shape.offload_above {
            None if size > MAX_MESSAGE_BYTES => {
                Refused(format!("{r}, and no payload store is configured"))
            }
            _ => r,
        });
    }
    check_queue(msg)?;
    let count = msg.attributes.len() + shape.pointer_attributes;
    if count > MAX_ATTRIBUTES {
        return refuse(format!(
            "a message to `{}` has {} attributes and its payload pointer adds {}; SQS allows {MAX_ATTRIBUTES}",
            msg.queue,
            msg.attributes.len(),
            shape.pointer_attributes
        ));
    }
    check_each_attribute(&msg.attributes)
}

/// Checks `msg` as it will travel against every rule SQS applies to a sent message.
pub fn check(msg: &Outgoing) -> Result<(), Refused> {
    check_sent(msg, as_sent(&msg.body))
}

fn check_sent(msg: &Outgoing, sent: AsSent) -> Result<(), Refused> {
    check_queue(msg)?;
    if msg.body.is_empty() {
        return refuse(format!(
            "a message to `{}` has an empty body, which SQS refuses",
            msg.queue
        ));
    }
    check_attributes(msg, sent.encoded)?;
    let size = size_with(msg, sent);
    if size > MAX_MESSAGE_BYTES {
        let how = if sent.encoded {
            " once its body is base64-encoded"
        } else {
            ""
        };
        return refuse(format!(
            "a message to `{}` is {size} bytes{how}, over SQS's {MAX_MESSAGE_BYTES}-byte limit",
            msg.queue
        ));
    }
    Ok(())
}

/// The target queue's name, and what FIFO queues require.
fn check_queue(msg: &Outgoing) -> Result<(), Refused> {
    let queue = &msg.queue;
    if !wire::valid_queue_name(queue) {
        return refuse(format!("`{queue}` is not a valid SQS queue name"));
    }
    if msg.delay_seconds > MAX_DELAY_SECS {
        return refuse(format!(
            "a delay of {} s is over SQS's {MAX_DELAY_SECS} s",
            msg.delay_seconds
        ));
    }
    let fifo = queue.ends_with(".fifo");
    if fifo && msg.group_id.is_none() {
        return refuse(format!(
            "`{queue}` is a FIFO queue: a message to it needs a group id"
        ));
    }
    if fifo && msg.delay_seconds > 0 {
        return refuse(format!(
            "`{queue}` is a FIFO queue: SQS refuses a per-message delay there"
        ));
    }
    for (what, id) in [
        ("group id", &msg.group_id),
        ("deduplication id", &msg.dedup_id),
    ] {
        if let Some(id) = id
            && !valid_fifo_id(id)
        {
            return refuse(format!(
                "the {what} `{id}` is not 1 to {MAX_FIFO_ID} printable ASCII characters"
            ));
        }
    }
    Ok(())
}

fn valid_fifo_id(id: &str) -> bool {
    (1..=MAX_FIFO_ID).contains(&id.len()) && id.chars().all(|c| c.is_ascii_graphic())
}

/// Count, names and values of the attributes, the encoding marker included.
fn check_attributes(msg: &Outgoing, encoded: bool) -> Result<(), Refused> {
    let marker = usize::from(encoded);
    let count = msg.attributes.len() + marker;
    if count > MAX_ATTRIBUTES {
        let marked = if marker == 1 {
            " (one of them the base64 marker a binary body needs)"
        } else {
            ""
        };
        return refuse(format!(
            "a message to `{}` has {count} attributes{marked}; SQS allows {MAX_ATTRIBUTES}",
            msg.queue
        ));
    }
    check_each_attribute(&msg.attributes)
}

fn check_each_attribute(attributes: &[Attribute]) -> Result<(), Refused> {
    for (i, a) in attributes.iter().enumerate() {
        check_name(&a.name)?;
        if attributes[..i].iter().any(|b| b.name == a.name) {
            return refuse(format!("attribute `{}` appears twice", a.name));
        }
        check_value(a)?;
    }
    Ok(())
}

/// SQS's attribute-name rule: 1 to 256 of `A-Z a-z 0-9 _ - .`, no leading, trailing or double
/// period, and no `AWS.` or `Amazon.` prefix in any case.
pub fn check_name(name: &str) -> Result<(), Refused> {
    let why = if name.is_empty() || name.len() > MAX_ATTRIBUTE_NAME {
        format!("is not 1 to {MAX_ATTRIBUTE_NAME} characters")
    } else if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        format!("holds {c:?}; SQS allows letters, digits, `_`, `-` and `.`")
    } else if name.starts_with('.') || name.ends_with('.') || name.contains("..") {
        "starts or ends with a period, or holds two in a row".to_string()
    } else if ["aws.", "amazon."]
        .iter()
        .any(|p| name.to_ascii_lowercase().starts_with(p))
    {
        "starts with a prefix SQS reserves (`AWS.`, `Amazon.`)".to_string()
    } else {
        return Ok(());
    };
    refuse(format!("attribute name `{name}` {why}"))
}

fn check_value(a: &Attribute) -> Result<(), Refused> {
    let name = &a.name;
    match &a.value {
        AttributeValue::String(s) | AttributeValue::Number(s) if s.is_empty() => {}
        AttributeValue::Binary(b) if b.is_empty() => {}
        AttributeValue::String(s) => {
            return match s.chars().find(|c| !sqs_char(*c)) {
                Some(c) => refuse(format!(
                    "attribute `{name}` holds {c:?}, which SQS does not allow in a string"
                )),
                None => Ok(()),
            };
        }
        AttributeValue::Number(n) => {
            return if valid_number(n) {
                Ok(())
            } else {
                refuse(format!(
                    "attribute `{name}` is `{n}`, not a number SQS accepts (up to {MAX_NUMBER_DIGITS} significant digits)"
                ))
            };
        }
        AttributeValue::Binary(_) => return Ok(()),
    }
    refuse(format!("attribute `{name}` is empty, which SQS refuses"))
}

/// A decimal number, optionally signed, with an optional fraction and exponent, and no more
/// significant digits than SQS keeps.
fn valid_number(n: &str) -> bool {
    let unsigned = n.strip_prefix(['-', '+']).unwrap_or(n);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e.strip_prefix(['-', '+']).unwrap_or(e))),
        None => (unsigned, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    let significant = format!("{whole}{fraction}");
    let significant = significant.trim_start_matches('0');
    !(whole.is_empty() && fraction.is_empty())
        && digits(whole)
        && digits(fraction)
        && exponent.is_none_or(|e| !e.is_empty() && e.len() <= 3 && digits(e))
        && significant.trim_end_matches('0').len() <= MAX_NUMBER_DIGITS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(body: &[u8], attributes: Vec<Attribute>) -> Outgoing {
        Outgoing {
            attributes,
            ..Outgoing::new("q", body)
        }
    }

    fn why(m: &Outgoing) -> String {
        check(m).expect_err("refused").0
    }

    #[test]
    fn a_plain_message_passes() {
        let attrs = (0..10)
            .map(|i| Attribute::string(format!("a{i}"), "v"))
            .collect();
        assert_eq!(check(&msg(b"hello", attrs)), Ok(()));
    }

    #[test]
    fn a_binary_body_needs_room_for_its_marker() {
        let attrs: Vec<_> = (0..10)
            .map(|i| Attribute::number(format!("n{i}"), i))
            .collect();
        let e = why(&msg(&[0xff, 0], attrs));
        assert!(
            e.contains("11 attributes") && e.contains("base64 marker"),
            "{e}"
        );
    }

    #[test]
    fn size_counts_the_body_as_encoded() {
        let fits = vec![0xffu8; 700 * 1024];
        assert_eq!(check(&msg(&fits, vec![])), Ok(()));
        assert_eq!(size_as_sent(&msg(&fits, vec![])), 955_736 + 31);
        let e = why(&msg(&vec![0xffu8; 800 * 1024], vec![]));
        assert!(e.contains("once its body is base64-encoded"), "{e}");
        let e = why(&msg(&vec![b'a'; MAX_MESSAGE_BYTES + 1], vec![]));
        assert!(e.contains("1048577 bytes, over SQS's"), "{e}");
        assert!(why(&msg(b"", vec![])).contains("empty body"));
    }

    #[test]
    fn attribute_names_follow_sqs_rules() {
        for ok in ["a", "job-id", "a.b_c-9", &"x".repeat(256)] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("", "1 to 256"),
            (&"x".repeat(257), "1 to 256"),
            ("with space", "' '"),
            ("ünï", "'ü'"),
            (".lead", "period"),
            ("trail.", "period"),
            ("a..b", "period"),
            ("AWS.trace", "reserves"),
            ("amazon.x", "reserves"),
        ] {
            let e = check_name(bad).expect_err(bad).0;
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn attribute_values_follow_sqs_rules() {
        let cases = [
            (Attribute::string("s", ""), "is empty"),
            (Attribute::string("s", "nul\0"), "'\\0'"),
            (Attribute::number("n", "1.2.3"), "not a number"),
            (Attribute::number("n", "1".repeat(39)), "not a number"),
            (Attribute::number("n", ""), "is empty"),
            (
                Attribute {
                    name: "b".into(),
                    value: AttributeValue::Binary(vec![]),
                },
                "is empty",
            ),
            (Attribute::string("d", "x"), "twice"),
        ];
        for (attribute, says) in cases {
            let mut attrs = vec![Attribute::string("d", "x")];
            attrs.push(attribute);
            let e = why(&msg(b"x", attrs));
            assert!(e.contains(says), "{says}: {e}");
        }
        for ok in [
            "0",
            "-1.5",
            "+3",
            ".5",
            "1e10",
            "6.02E+23",
            &"9".repeat(38),
            "0001",
        ] {
            assert!(valid_number(ok), "{ok}");
        }
    }

    #[test]
    fn an_offloaded_message_is_checked_beside_its_pointer() {
        let s3 = SendShape {
            envelope: Envelope::Kombu,
            offload_above: Some(1000),
            offload_always: false,
            pointer_attributes: 2,
        };
        let big = vec![0xffu8; 2 * MAX_MESSAGE_BYTES];
        let eight: Vec<_> = (0..8)
            .map(|i| Attribute::number(format!("n{i}"), i))
            .collect();
        assert_eq!(check_as_sent(&msg(&big, eight.clone()), &s3), Ok(()));
        let nine: Vec<_> = (0..9)
            .map(|i| Attribute::number(format!("n{i}"), i))
            .collect();
        let e = check_as_sent(&msg(&big, nine), &s3).unwrap_err().0;
        assert!(e.contains("its payload pointer adds 2"), "{e}");
        let none = SendShape::default();
        let e = check_as_sent(&msg(&big, eight), &none).unwrap_err().0;
        assert!(e.contains("no payload store is configured"), "{e}");
    }

    #[test]
    fn queues_delays_and_fifo_ids_follow_sqs_rules() {
        let mut m = msg(b"x", vec![]);
        m.queue = "no/slash".into();
        assert!(why(&m).contains("not a valid SQS queue name"));
        let mut m = msg(b"x", vec![]);
        m.delay_seconds = 901;
        assert!(why(&m).contains("over SQS's 900 s"));
        let mut m = msg(b"x", vec![]);
        m.queue = "jobs.fifo".into();
        assert!(why(&m).contains("needs a group id"));
        m.group_id = Some("g".into());
        m.dedup_id = Some("d".repeat(129));
        assert!(why(&m).contains("deduplication id"));
        m.dedup_id = Some(crate::digest::sha256_hex(b"k"));
        assert_eq!(check(&m), Ok(()));
    }
}
