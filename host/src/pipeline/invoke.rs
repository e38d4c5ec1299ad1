//! One call of a plugin for a delivery: under the plugin's own concurrency limit, in a span
//! naming the version (so every line logged during the call says which build ran), timed for
//! the metrics, and with a panicking native handler turned into a failure. Both a plain run
//! (`run`) and a canary's (`canary`) call through here; a batch handler's message goes on to
//! its plugin's gatherer (`batches`), which holds the concurrency limit for the whole call.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt as _;
use tracing::Instrument as _;

use super::batches::Gathering;
use super::delivery::Delivery;
use crate::handler::{Failure, HandlerMessage, Invocation, Outcome};
use crate::plugin::Plugin;
use crate::stats::Event;

/// What a step span says of a finished call: the handler's verdict and its outbox size.
fn invocation_attributes(invocation: &Invocation) -> Vec<opentelemetry::KeyValue> {
    let verdict = match invocation.outcome {
        Outcome::Ack => "ack",
        Outcome::Retry(_) => "retry",
        Outcome::Reject(_) => "reject",
    };
    vec![
        opentelemetry::KeyValue::new("qhost.handler.verdict", verdict),
        opentelemetry::KeyValue::new("qhost.outbox.count", invocation.outbox.len() as i64),
    ]
}

/// Waits for a slot under the plugin's own concurrency limit (if it has one), then calls it in a
/// span naming the plugin version, so that every line logged during the call says which build
/// ran. A panicking native handler is a failure, not a lost task. If this future is dropped
/// (the shutdown grace is over), the call goes with it: a wasm guest stops at its next epoch
/// yield.
pub(super) async fn invoke(
    delivery: &Delivery,
    plugin: &Arc<Plugin>,
    input: HandlerMessage,
    gathering: Gathering,
) -> Result<Invocation, Failure> {
    let slot = match plugin.slots() {
        Some(slots) if !plugin.is_batch() => {
            Some(Arc::clone(slots).acquire_owned().await.map_err(|_| {
                Failure::Instantiate("the plugin's concurrency limit was closed".into())
            })?)
        }
        _ => None,
    };
    delivery.record(Event::Invoked);
    let stats = &delivery.shared().stats;
    stats.record_invocation(&plugin.name, &plugin.version);
    let span = tracing::info_span!("invoke", plugin = %plugin.name, version = %plugin.version, trace_id = tracing::field::Empty);
    if let Some(trace_id) = delivery.span().trace_id() {
        span.record("trace_id", trace_id);
    }
    let call = async {
        if plugin.is_batch() {
            let batches = &delivery.shared().batches;
            Ok(batches
                .call(plugin, input, gathering)
                .instrument(span)
                .await)
        } else {
            AssertUnwindSafe(plugin.invoke(input).instrument(span))
                .catch_unwind()
                .await
        }
    };
    let started = std::time::Instant::now();
    let mut step = delivery.span().step("invoke");
    let ended = call.await;
    match &ended {
        Ok(Ok(invocation)) => step.set(|| invocation_attributes(invocation)),
        Ok(Err(failure)) => step.error(failure.kind(), failure),
        Err(_) => step.error("trap", "the handler panicked"),
    }
    drop(step);
    let queue = &delivery.queue().config.name;
    (delivery.shared().metrics).observe_process(
        queue,
        &plugin.name,
        &plugin.version,
        started.elapsed(),
    );
    drop(slot);
    ended.unwrap_or_else(|panic| {
        let text = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        Err(Failure::Trap(format!("handler panicked: {text}")))
    })
}
