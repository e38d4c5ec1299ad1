//! Traces: one OpenTelemetry consumer span per delivered message, following the messaging
//! semantic conventions, with a child span for each step that leaves the process (lease,
//! payload fetch, invoke, completion, outbox send, dead letter).
//!
//! Why through the OpenTelemetry API directly rather than through `tracing` spans: a message's
//! span is opened when the message arrives, outlives several tasks, and is ended by whichever
//! fate the delivery meets; the W3C context it continues comes from the message's attributes,
//! not from the task that polled it. A value the [`Delivery`](crate::pipeline) owns says that
//! plainly, and log lines keep their own short spans.
//!
//! Off unless an OTLP endpoint is configured ([`Traces::from_env`]) and the host is given its
//! [`Tracer`] ([`Host::traced_by`](crate::Host::traced_by)): otherwise no span is built, no
//! attribute allocated, and nothing is written to outgoing messages. The tracer belongs to a
//! host, not to the process, as its metrics registry does.
//!
//! | module    | what                                                                 |
//! |-----------|----------------------------------------------------------------------|
//! | `install` | reading the `OTEL_*` environment, the exporter and its provider       |
//! | `client`  | the exporter's HTTP client, run on the host's tokio runtime            |
//! | `carrier` | `traceparent`/`tracestate` read from and written to message attributes |
//! | `span`    | a message's span and its steps                                          |

mod carrier;
mod client;
pub(crate) mod install;
mod span;

use std::sync::Arc;

use opentelemetry_sdk::trace::SdkTracer;

pub(crate) use span::{MessageSpan, StepSpan};

/// What starts a host's spans; cheap to clone.
#[derive(Clone, Debug)]
pub struct Tracer(Arc<SdkTracer>);
