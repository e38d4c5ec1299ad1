//! A message's span and the spans of its steps.
//!
//! [`MessageSpan`] is the `process QUEUE` consumer span of one delivery, with the messaging
//! semantic conventions' attributes and qhost's own (plugin, version, idempotency key, fencing
//! token, outcome, `error.type`). The delivery owns it, so it ends when the delivery does, by
//! whichever fate. [`StepSpan`] is a child for one step, ended when dropped.
//!
//! Both are empty (and free) when traces are off.

use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::Span as SdkSpan;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Tracer, carrier};
use crate::message::rules::SendShape;
use crate::message::{Outgoing, Received};

/// The span of one delivery.
#[derive(Debug, Default)]
pub(crate) struct MessageSpan {
    /// The context holding the span, and the tracer for its steps; `None` when traces are off.
    cx: Option<(Context, Tracer)>,
    /// Whether the span is marked failed: the first cause names the error.
    failed: AtomicBool,
}

impl MessageSpan {
    /// Starts the span of `msg`, received from a `system` queue, continuing the trace its
    /// attributes carry; an empty span without a tracer.
    pub(crate) fn start(tracer: Option<&Tracer>, system: &'static str, msg: &Received) -> Self {
        let Some(traced) = tracer else {
            return MessageSpan::default();
        };
        let tracer = &*traced.0;
        let parent = carrier::extract(&msg.attributes);
        let mut attributes = vec![
            KeyValue::new("messaging.system", system),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.operation.name", "process"),
            KeyValue::new("messaging.destination.name", msg.queue.clone()),
            KeyValue::new("messaging.message.id", msg.id.clone()),
            KeyValue::new("messaging.message.body.size", msg.body.len() as i64),
            KeyValue::new("qhost.receive_count", i64::from(msg.delivery_count)),
        ];
        if let Some(group) = &msg.group_id {
            attributes.push(KeyValue::new("qhost.message.group_id", group.clone()));
        }
        let span = tracer
            .span_builder(format!("process {}", msg.queue))
            .with_kind(SpanKind::Consumer)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        MessageSpan {
            cx: Some((parent.with_span(span), traced.clone())),
            failed: AtomicBool::new(false),
        }
    }

    /// Sets attributes, built only when traces are on.
    pub(crate) fn set(&self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some((cx, _)) = &self.cx {
            cx.span().set_attributes(attributes());
        }
    }

    /// Records how the delivery ended (`acked`, `duplicate`, `retried`, …).
    pub(crate) fn outcome(&self, outcome: &'static str) {
        self.set(|| vec![KeyValue::new("qhost.outcome", outcome)]);
    }

    /// Marks the span failed: `kind` is a short, low-cardinality `error.type`, `description`
    /// says what happened (formatted only when traces are on). The first cause stays (a timeout that ends in a dead letter is a
    /// timeout, and `qhost.outcome` says how it ended).
    pub(crate) fn error(&self, kind: &'static str, description: impl std::fmt::Display) {
        if let Some((cx, _)) = &self.cx
            && !self.failed.swap(true, Ordering::Relaxed)
        {
            let span = cx.span();
            span.set_attribute(KeyValue::new("error.type", kind));
            span.set_status(Status::error(description.to_string()));
        }
    }

    /// The trace id, as hex, when the span is sampled: log lines carry it, to find the trace.
    pub(crate) fn trace_id(&self) -> Option<String> {
        let (cx, _) = self.cx.as_ref()?;
        let span = cx.span();
        let context = span.span_context();
        context.is_sampled().then(|| context.trace_id().to_string())
    }

    /// Starts a child span for one step.
    pub(crate) fn step(&self, name: &'static str) -> StepSpan {
        let span = self.cx.as_ref().map(|(cx, tracer)| {
            let tracer = &*tracer.0;
            tracer
                .span_builder(name)
                .with_kind(SpanKind::Internal)
                .start_with_context(tracer, cx)
        });
        StepSpan(span)
    }

    /// Writes this span's context into `outbox` where it fits (see [`carrier::inject`]).
    pub(crate) fn propagate(&self, outbox: &mut [Outgoing], shape: &SendShape) {
        if let Some((cx, _)) = &self.cx {
            carrier::inject(cx, outbox, shape);
        }
    }
}

impl Drop for MessageSpan {
    fn drop(&mut self) {
        if let Some((cx, _)) = &self.cx {
            cx.span().end();
        }
    }
}

/// One step of a delivery, ended when dropped.
#[derive(Debug)]
#[must_use = "a step span ends when dropped"]
pub(crate) struct StepSpan(Option<SdkSpan>);

impl StepSpan {
    /// Sets attributes, built only when traces are on.
    pub(crate) fn set(&mut self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(span) = &mut self.0 {
            span.set_attributes(attributes());
        }
    }

    /// Marks the step failed, as [`MessageSpan::error`] does.
    pub(crate) fn error(&mut self, kind: &'static str, description: impl std::fmt::Display) {
        if let Some(span) = &mut self.0 {
            span.set_attribute(KeyValue::new("error.type", kind));
            span.set_status(Status::error(description.to_string()));
        }
    }
}
