//! Conversions between the host's message types and the generated WIT types.

use super::bindings::qhost::handler::outbox;
use super::bindings::{
    Attribute as WitAttribute, AttributeValue as WitValue, Message, Outcome as WitOutcome,
};
use crate::handler::{HandlerMessage, Outcome};
use qhost_message::{Attribute, AttributeValue, Outgoing};

fn attribute_to_guest(a: Attribute) -> WitAttribute {
    WitAttribute {
        name: a.name,
        value: match a.value {
            AttributeValue::String(s) => WitValue::String(s),
            AttributeValue::Number(n) => WitValue::Number(n),
            AttributeValue::Binary(b) => WitValue::Binary(b),
        },
    }
}

fn attribute_from_guest(a: WitAttribute) -> Attribute {
    Attribute {
        name: a.name,
        value: match a.value {
            WitValue::String(s) => AttributeValue::String(s),
            WitValue::Number(n) => AttributeValue::Number(n),
            WitValue::Binary(b) => AttributeValue::Binary(b),
        },
    }
}

/// The WIT message for a handler message, moving its fields (the body may be large).
pub(crate) fn message_to_guest(m: HandlerMessage) -> Message {
    Message {
        id: m.id,
        idempotency_key: m.idempotency_key,
        fencing_token: m.fencing_token,
        queue: m.queue,
        body: m.body,
        attributes: m.attributes.into_iter().map(attribute_to_guest).collect(),
        receive_count: m.receive_count,
        sent_at_ms: m.sent_at_ms,
        group_id: m.group_id,
    }
}

/// The host outcome for a WIT outcome.
pub(crate) fn outcome_from_guest(o: WitOutcome) -> Outcome {
    match o {
        WitOutcome::Ack => Outcome::Ack,
        WitOutcome::Retry(s) => Outcome::Retry(s),
        WitOutcome::Reject(r) => Outcome::Reject(r),
    }
}

/// The host message for a guest's outbox message.
pub(crate) fn outgoing_from_guest(o: outbox::Outgoing) -> Outgoing {
    Outgoing {
        queue: o.queue,
        body: o.body,
        attributes: o.attributes.into_iter().map(attribute_from_guest).collect(),
        delay_seconds: o.delay_seconds,
        group_id: o.group_id,
        dedup_id: None,
    }
}
