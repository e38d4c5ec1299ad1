//! Messages between AMQP's form and qhost's: a delivery's properties and headers into a
//! [`Received`], an [`Outgoing`] into a publish's properties.
//!
//! Attributes travel as headers: strings as long strings, numbers as integers (or doubles),
//! bytes as byte arrays. Headers the broker writes (`x-…`: `x-delivery-count`, `x-death`) and
//! qhost's own bookkeeping are not attributes. A header holding a table or an array (Celery's
//! `timelimit`, a producer's nested metadata) becomes a string attribute of its JSON, a boolean
//! the string `true` or `false`. The AMQP properties a reader of the message needs (Celery's
//! serializer, its task id) become `amqp-…` attributes (`qhost_message::wire`), and go back to
//! properties when sent; an `amqp-headers` attribute (a JSON object: the score of headers a
//! Celery task carries, past SQS's ten attributes) is sent as that many headers, typed as JSON
//! types them.

use lapin::BasicProperties;
use lapin::message::Delivery;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use qhost_message::{Attribute, AttributeValue, Outgoing, Received, wire};

/// The header qhost counts earlier deliveries in when it republishes a delivery to a delay
/// queue (RabbitMQ's own count starts again on the copy).
pub(crate) const DELIVERIES: &str = "qhost-deliveries";

/// RabbitMQ's count of a quorum queue's earlier deliveries of a message.
const X_DELIVERY_COUNT: &str = "x-delivery-count";

/// How many times the message of `delivery` has been delivered, this delivery included:
/// earlier deliveries of this copy (a quorum queue's `x-delivery-count`; on a classic queue,
/// only whether it was redelivered) and of the copies before it (`qhost-deliveries`).
pub(crate) fn delivery_count(delivery: &Delivery) -> u32 {
    let headers = delivery.properties.headers().as_ref();
    let header = |name: &str| headers.and_then(|h| h.inner().get(name)).and_then(as_u32);
    let earlier = match header(X_DELIVERY_COUNT) {
        Some(n) => n,
        None => u32::from(delivery.redelivered),
    };
    1 + earlier + header(DELIVERIES).unwrap_or(0)
}

/// The message id: the `message_id` property, which qhost's sends and most producers set;
/// without one, the body's sha256 (every delivery of one message has the same body).
pub(crate) fn message_id(properties: &BasicProperties, body: &[u8]) -> String {
    match properties.message_id() {
        Some(id) if !id.as_str().is_empty() => id.as_str().to_string(),
        _ => format!("sha256:{}", qhost_message::digest::sha256_hex(body)),
    }
}

/// `delivery` of `queue`, named by `handle`.
pub(crate) fn received(queue: &str, handle: String, delivery: &Delivery) -> Received {
    let count = delivery_count(delivery);
    received_as(queue, handle, &delivery.properties, &delivery.data, count)
}

/// A delivery of `queue` with these properties and body, its `count`-th, named by `handle`.
pub(crate) fn received_as(
    queue: &str,
    handle: String,
    properties: &BasicProperties,
    body: &[u8],
    count: u32,
) -> Received {
    let sent_at_ms = properties
        .timestamp()
        .map(|secs| secs.saturating_mul(1000))
        .unwrap_or_else(qhost_message::now_ms);
    Received {
        id: message_id(properties, body),
        handle,
        queue: queue.to_string(),
        body: body.to_vec(),
        attributes: with_properties(attributes(properties.headers().as_ref()), properties),
        delivery_count: count,
        sent_at_ms,
        group_id: None,
        malformed: None,
    }
}

/// `attributes` with the AMQP properties a reader needs, as `amqp-…` attributes.
fn with_properties(mut attributes: Vec<Attribute>, properties: &BasicProperties) -> Vec<Attribute> {
    let named = [
        (wire::AMQP_CONTENT_TYPE, properties.content_type()),
        (wire::AMQP_CONTENT_ENCODING, properties.content_encoding()),
        (wire::AMQP_CORRELATION_ID, properties.correlation_id()),
        (wire::AMQP_REPLY_TO, properties.reply_to()),
    ];
    for (name, value) in named {
        if let Some(value) = value {
            attributes.push(Attribute::string(name, value.as_str()));
        }
    }
    attributes
}

fn attributes(headers: Option<&FieldTable>) -> Vec<Attribute> {
    let Some(headers) = headers else {
        return Vec::new();
    };
    (headers.inner().iter())
        .filter(|(name, _)| !name.as_str().starts_with("x-") && name.as_str() != DELIVERIES)
        .filter_map(|(name, value)| {
            Some(Attribute {
                name: name.as_str().to_string(),
                value: attribute_value(value)?,
            })
        })
        .collect()
}

fn attribute_value(value: &AMQPValue) -> Option<AttributeValue> {
    Some(match value {
        AMQPValue::LongString(s) => {
            AttributeValue::String(String::from_utf8_lossy(s.as_bytes()).into_owned())
        }
        AMQPValue::ShortString(s) => AttributeValue::String(s.as_str().to_string()),
        AMQPValue::ByteArray(b) => AttributeValue::Binary(b.as_slice().to_vec()),
        AMQPValue::Boolean(b) => AttributeValue::String(b.to_string()),
        AMQPValue::Void => return None,
        AMQPValue::FieldArray(_) | AMQPValue::FieldTable(_) => {
            AttributeValue::String(json(value).to_string())
        }
        number => AttributeValue::Number(json(number).to_string()),
    })
}

/// A header value as JSON (numbers as numbers, byte strings as text where they are UTF-8).
fn json(value: &AMQPValue) -> serde_json::Value {
    use serde_json::Value;
    match value {
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(n) => (*n).into(),
        AMQPValue::ShortShortUInt(n) => (*n).into(),
        AMQPValue::ShortInt(n) => (*n).into(),
        AMQPValue::ShortUInt(n) => (*n).into(),
        AMQPValue::LongInt(n) => (*n).into(),
        AMQPValue::LongUInt(n) => (*n).into(),
        AMQPValue::LongLongInt(n) => (*n).into(),
        AMQPValue::Timestamp(n) => (*n).into(),
        AMQPValue::Float(n) => f64::from(*n).into(),
        AMQPValue::Double(n) => (*n).into(),
        AMQPValue::DecimalValue(d) => (f64::from(d.value) / 10f64.powi(i32::from(d.scale))).into(),
        AMQPValue::ShortString(s) => s.as_str().into(),
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into(),
        AMQPValue::ByteArray(b) => String::from_utf8_lossy(b.as_slice()).into(),
        AMQPValue::FieldArray(a) => a.as_slice().iter().map(json).collect(),
        AMQPValue::FieldTable(t) => (t.inner().iter())
            .map(|(k, v)| (k.as_str().to_string(), json(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        AMQPValue::Void => Value::Null,
    }
}

fn as_u32(value: &AMQPValue) -> Option<u32> {
    json(value).as_u64().and_then(|n| u32::try_from(n).ok())
}

/// The properties qhost publishes `msg` with, under message id `id`: persistent, stamped with
/// the time, its attributes as headers.
pub(crate) fn properties(msg: &Outgoing, id: &str) -> BasicProperties {
    let mut headers = FieldTable::default();
    let (amqp, attributes): (Vec<&Attribute>, Vec<&Attribute>) =
        (msg.attributes.iter()).partition(|a| a.name.starts_with(wire::AMQP_PREFIX));
    for a in attributes {
        headers.insert(ShortString::from(a.name.as_str()), header_value(&a.value));
    }
    let mut properties = BasicProperties::default()
        .with_message_id(ShortString::from(id))
        .with_delivery_mode(PERSISTENT)
        .with_timestamp(qhost_message::now_ms() / 1000);
    // A message that came from RabbitMQ goes back (a dead letter, a redrive) with its
    // properties, so a Celery worker still reads it; a Celery task qhost sends, likewise.
    for a in amqp {
        let Some(text) = a.text() else {
            continue;
        };
        if a.name == wire::AMQP_HEADERS {
            for (name, value) in json_headers(text) {
                headers.insert(ShortString::from(name.as_str()), value);
            }
            continue;
        }
        let text = ShortString::from(text);
        properties = match a.name.as_str() {
            wire::AMQP_CONTENT_TYPE => properties.with_content_type(text),
            wire::AMQP_CONTENT_ENCODING => properties.with_content_encoding(text),
            wire::AMQP_CORRELATION_ID => properties.with_correlation_id(text),
            wire::AMQP_REPLY_TO => properties.with_reply_to(text),
            _ => properties,
        };
    }
    properties.with_headers(headers)
}

/// The headers an `amqp-headers` attribute holds (a JSON object; anything else holds none).
fn json_headers(text: &str) -> Vec<(String, AMQPValue)> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(map)) => (map.into_iter())
            .map(|(name, value)| (name, from_json(&value)))
            .collect(),
        _ => Vec::new(),
    }
}

/// A JSON value as the AMQP value a Celery producer (py-amqp) would send for it.
fn from_json(value: &serde_json::Value) -> AMQPValue {
    use serde_json::Value;
    match value {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        Value::Array(items) => {
            AMQPValue::FieldArray(items.iter().map(from_json).collect::<Vec<_>>().into())
        }
        Value::Object(map) => {
            let mut table = FieldTable::default();
            for (k, v) in map {
                table.insert(ShortString::from(k.as_str()), from_json(v));
            }
            AMQPValue::FieldTable(table)
        }
    }
}

/// `delivery_mode` 2: the broker writes the message to disk.
pub(crate) const PERSISTENT: u8 = 2;

fn header_value(value: &AttributeValue) -> AMQPValue {
    match value {
        AttributeValue::String(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        AttributeValue::Number(n) => match (n.parse::<i64>(), n.parse::<f64>()) {
            (Ok(i), _) => AMQPValue::LongLongInt(i),
            (_, Ok(f)) => AMQPValue::Double(f),
            _ => AMQPValue::LongString(LongString::from(n.as_str())),
        },
        AttributeValue::Binary(b) => AMQPValue::ByteArray(b.clone().into()),
    }
}

/// `properties` as they go to a delay queue: the same message (its id, headers and stamp),
/// with `deliveries` counted so far.
pub(crate) fn delayed(properties: &BasicProperties, deliveries: u32) -> BasicProperties {
    let mut headers = properties.headers().clone().unwrap_or_default();
    headers.insert(
        ShortString::from(DELIVERIES),
        AMQPValue::LongUInt(deliveries),
    );
    properties
        .clone()
        .with_headers(headers)
        .with_delivery_mode(PERSISTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_travel_as_headers_and_back() {
        let msg = Outgoing::new("q", "body")
            .with_attribute(Attribute::string("idempotency-key", "job-1"))
            .with_attribute(Attribute::number("weight", 42))
            .with_attribute(Attribute::number("ratio", "0.5"))
            .with_attribute(Attribute {
                name: "raw".into(),
                value: AttributeValue::Binary(vec![0, 1, 2]),
            });
        let props = properties(&msg, "m-1");
        assert_eq!(message_id(&props, b"body"), "m-1");
        let mut back = attributes(props.headers().as_ref());
        back.sort_by(|a, b| a.name.cmp(&b.name));
        let mut sent = msg.attributes.clone();
        sent.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(back, sent);
    }

    #[test]
    fn broker_headers_are_not_attributes_and_nested_ones_are_json() {
        let mut headers = FieldTable::default();
        headers.insert("x-delivery-count".into(), AMQPValue::LongLongInt(2));
        headers.insert(DELIVERIES.into(), AMQPValue::LongUInt(1));
        headers.insert(
            "timelimit".into(),
            AMQPValue::FieldArray(vec![AMQPValue::Void, AMQPValue::LongInt(30)].into()),
        );
        let attrs = attributes(Some(&headers));
        assert_eq!(attrs, [Attribute::string("timelimit", "[null,30]")]);
    }

    #[test]
    fn amqp_properties_travel_as_amqp_attributes_and_back() {
        let msg = Outgoing::new("q", "[[], {}, {}]")
            .with_attribute(Attribute::string(
                wire::AMQP_CONTENT_TYPE,
                "application/json",
            ))
            .with_attribute(Attribute::string(wire::AMQP_CORRELATION_ID, "task-1"))
            .with_attribute(Attribute::string("task", "proj.tasks.echo"));
        let props = properties(&msg, "m-1");
        assert_eq!(
            props.content_type().as_ref().map(|t| t.as_str()),
            Some("application/json")
        );
        let headers = props.headers().as_ref().unwrap();
        assert!(!headers.inner().contains_key(wire::AMQP_CONTENT_TYPE));
        let mut back = with_properties(attributes(Some(headers)), &props);
        back.sort_by(|a, b| a.name.cmp(&b.name));
        let mut sent = msg.attributes.clone();
        sent.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(back, sent);
    }

    #[test]
    fn a_message_without_an_id_is_named_by_its_body() {
        let props = BasicProperties::default();
        assert_eq!(message_id(&props, b"a"), message_id(&props, b"a"));
        assert_ne!(message_id(&props, b"a"), message_id(&props, b"b"));
        assert!(message_id(&props, b"a").starts_with("sha256:"));
    }
}
