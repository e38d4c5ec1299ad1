//! W3C trace context on queue messages. A producer instrumented with OpenTelemetry puts
//! `traceparent` (and `tracestate`) in a message's attributes; a message's span continues that
//! trace, and what its handler sends carries the span on in the same two attributes.
//!
//! An outgoing message gets them only where they fit: SQS allows 10 attributes and 1 MiB per
//! message, and a handler's message that was valid stays valid: trace context is dropped
//! before a message is.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;

use crate::message::rules::{self, SendShape};
use crate::message::{Attribute, AttributeValue, Outgoing};

/// The attributes trace context travels in, in the order they are worth room.
const NAMES: [&str; 2] = ["traceparent", "tracestate"];

/// A received message's attributes, read as a carrier.
struct Incoming<'a>(&'a [Attribute]);

impl Extractor for Incoming<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find_map(|a| match &a.value {
            AttributeValue::String(s) if a.name.eq_ignore_ascii_case(key) => Some(s.as_str()),
            _ => None,
        })
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|a| a.name.as_str()).collect()
    }
}

/// The headers a propagator writes, collected.
#[derive(Default)]
struct Headers(Vec<(String, String)>);

impl Injector for Headers {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_string(), value));
    }
}

/// The context `attributes` carry: the producer's span, or none (an empty context).
pub(super) fn extract(attributes: &[Attribute]) -> Context {
    TraceContextPropagator::new().extract(&Incoming(attributes))
}

/// Writes `cx`'s span into each of `outbox`'s messages as `traceparent`/`tracestate`, replacing
/// any copy the handler set, each only if the message still passes SQS's rules as it will be
/// sent.
pub(super) fn inject(cx: &Context, outbox: &mut [Outgoing], shape: &SendShape) {
    let mut headers = Headers::default();
    TraceContextPropagator::new().inject_context(cx, &mut headers);
    if headers.0.is_empty() {
        return;
    }
    for msg in outbox {
        msg.attributes.retain(|a| !NAMES.contains(&a.name.as_str()));
        for name in NAMES {
            let Some((_, value)) = headers.0.iter().find(|(k, _)| k == name) else {
                continue;
            };
            msg.attributes.push(Attribute::string(name, value));
            if rules::check_as_sent(msg, shape).is_err() {
                msg.attributes.pop();
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt as _;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn outgoing(attributes: usize) -> Outgoing {
        let mut msg = Outgoing::new("next", b"body".to_vec());
        for i in 0..attributes {
            msg.attributes.push(Attribute::string(format!("a{i}"), "v"));
        }
        msg
    }

    #[test]
    fn a_producers_traceparent_is_the_context_and_goes_on_unchanged_in_trace() {
        let cx = extract(&[Attribute::string("traceparent", PARENT)]);
        let span = cx.span().span_context().clone();
        assert!(span.is_valid() && span.is_remote() && span.is_sampled());
        assert_eq!(
            span.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        let mut outbox = vec![outgoing(0)];
        inject(&cx, &mut outbox, &SendShape::default());
        let written = &outbox[0].attributes;
        assert_eq!(written, &vec![Attribute::string("traceparent", PARENT)]);
    }

    #[test]
    fn a_malformed_traceparent_is_no_context() {
        for bad in [
            "",
            "00-xyz",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            let cx = extract(&[Attribute::string("traceparent", bad)]);
            assert!(!cx.span().span_context().is_valid(), "{bad}");
            let mut outbox = vec![outgoing(1)];
            inject(&cx, &mut outbox, &SendShape::default());
            assert_eq!(outbox[0].attributes.len(), 1, "nothing written for {bad}");
        }
    }

    #[test]
    fn trace_context_never_takes_a_messages_last_attribute_slots() {
        let cx = extract(&[
            Attribute::string("traceparent", PARENT),
            Attribute::string("tracestate", "vendor=1"),
        ]);
        let mut outbox = vec![outgoing(8), outgoing(9), outgoing(10)];
        inject(&cx, &mut outbox, &SendShape::default());
        let names = |m: &Outgoing| -> Vec<String> {
            m.attributes
                .iter()
                .map(|a| a.name.clone())
                .filter(|n| n.starts_with("trace"))
                .collect()
        };
        assert_eq!(names(&outbox[0]), ["traceparent", "tracestate"]);
        assert_eq!(names(&outbox[1]), ["traceparent"]);
        assert!(names(&outbox[2]).is_empty());
        for msg in &outbox {
            rules::check_as_sent(msg, &SendShape::default()).expect("still valid");
        }
    }

    #[test]
    fn the_hosts_context_replaces_a_copied_one() {
        let cx = extract(&[Attribute::string("traceparent", PARENT)]);
        let mut msg = outgoing(0);
        let stale = "00-11111111111111111111111111111111-2222222222222222-01";
        msg.attributes.push(Attribute::string("traceparent", stale));
        let mut outbox = vec![msg];
        inject(&cx, &mut outbox, &SendShape::default());
        assert_eq!(
            outbox[0].attributes,
            vec![Attribute::string("traceparent", PARENT)]
        );
    }
}
