//! Traces from a real `qhost run`, exported over OTLP/HTTP to a receiver in the test: each
//! message has a `process QUEUE` consumer span with the messaging and qhost attributes and a
//! child span per step; it continues the producer's trace, and the message its handler sends
//! carries the trace on in `traceparent`. Failures say what failed in `error.type`.

use std::time::Duration;

use qhost::sources::LocalQueue;
use qhost::sources::QueueSource as _;
use qhost::{Attribute, Outgoing};
use qhost_e2e::harness::{TestEnv, attr, queue_toml};
use qhost_e2e::otlp::{Receiver, Span};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";
/// OTLP's span kinds.
const INTERNAL: i32 = 1;
const CONSUMER: i32 = 5;
/// OTLP's error status.
const ERROR: i32 = 2;

fn message(body: &str, traceparent: Option<&str>) -> Outgoing {
    let mut msg = Outgoing::new("jobs", body.as_bytes().to_vec());
    if let Some(tp) = traceparent {
        msg.attributes.push(Attribute::string("traceparent", tp));
    }
    msg
}

/// Runs `qhost --config CONFIG run --until-idle` with `vars` set and the OTLP ones not.
fn run_until_idle(config: &std::path::Path, vars: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(qhost_e2e::processes::qhost_binary())
        .arg("--config")
        .arg(config)
        .args(["run", "--until-idle"])
        .envs(qhost_e2e::processes::qhost_env())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .envs(vars.iter().copied())
        .output()
        .expect("running qhost")
}

/// The `traceparent` of the one message the handler sent to `next`.
async fn sent_traceparent(queue: &LocalQueue) -> Option<String> {
    let next = queue
        .receive("next", 10, Duration::from_secs(30), Duration::ZERO)
        .await
        .expect("receiving from next");
    assert_eq!(next.len(), 1, "{next:?}");
    attr(&next[0], "traceparent").map(str::to_string)
}

/// The process span of the message with id `id`.
fn process_span<'a>(spans: &'a [Span], id: &str) -> &'a Span {
    spans
        .iter()
        .find(|s| s.kind == CONSUMER && s.attr("messaging.message.id") == Some(id))
        .unwrap_or_else(|| panic!("no process span for {id} in {spans:#?}"))
}

/// The names of `parent`'s children, sorted.
fn children(spans: &[Span], parent: &Span) -> Vec<String> {
    let mut names: Vec<String> = spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id)
        .inspect(|s| {
            assert_eq!(s.trace_id, parent.trace_id, "{s:?}");
            assert_eq!(s.kind, INTERNAL, "{s:?}");
        })
        .map(|s| s.name.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn a_messages_trace_runs_from_its_producer_through_the_handler_to_its_outbox() {
    let receiver = Receiver::start().await;
    let env = TestEnv::new();
    env.install("fixture", "fixture", "[limits]\nmax-attempts = 1\n");
    let config = env.config_file(&queue_toml("jobs", "fixture"));
    let queue = env.queue();
    let traceparent = format!("00-{TRACE_ID}-{PRODUCER_SPAN}-01");
    let ids = queue
        .send(&[
            message("log:hello;send:next:hello", Some(&traceparent)),
            message("reject:not for us", None),
            message("trap", None),
        ])
        .await
        .expect("sending");

    let endpoint = receiver.endpoint();
    let ran = tokio::task::spawn_blocking(move || {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("QHOST_LOG_FORMAT", "json"),
        ];
        run_until_idle(&config, &vars)
    })
    .await
    .expect("qhost ran");
    let log = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "{log}");
    assert!(log.contains("exporting traces over OTLP"), "{log}");
    // Shutdown exports what is queued: every span is in by the time the process is gone.
    let spans = receiver.spans();

    // The message with a producer's context continues its trace, as the producer's child.
    let sent = process_span(&spans, &ids[0]);
    assert_eq!(sent.name, "process jobs");
    assert_eq!(sent.service, "qhost");
    assert_eq!(sent.trace_id, TRACE_ID);
    assert_eq!(sent.parent_span_id, PRODUCER_SPAN);
    for (name, value) in [
        ("messaging.system", "qhost_local"),
        ("messaging.operation.type", "process"),
        ("messaging.destination.name", "jobs"),
        ("qhost.plugin", "fixture"),
        ("qhost.idempotency_key", ids[0].as_str()),
        ("qhost.fencing_token", "1"),
        ("qhost.outcome", "acked"),
    ] {
        assert_eq!(sent.attr(name), Some(value), "{name}: {sent:#?}");
    }
    assert!(
        sent.attr("qhost.plugin.version")
            .is_some_and(|v| v.len() == 12)
    );
    assert_eq!(sent.attr("error.type"), None);
    assert_ne!(sent.status_code, ERROR);
    assert_eq!(
        children(&spans, sent),
        ["complete", "invoke", "lease", "outbox send"]
    );
    let invoke = spans
        .iter()
        .find(|s| s.parent_span_id == sent.span_id && s.name == "invoke")
        .expect("the invoke span");
    assert_eq!(invoke.attr("qhost.handler.verdict"), Some("ack"));
    assert_eq!(invoke.attr("qhost.outbox.count"), Some("1"));

    // What the handler logged carries the trace id.
    let logged = log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["target"] == "qhost::plugin")
        .unwrap_or_else(|| panic!("no handler line in {log}"));
    assert_eq!(logged["span"]["trace_id"], TRACE_ID, "{logged}");

    // What the handler sent carries the trace on, as the process span's child.
    let expected = format!("00-{TRACE_ID}-{}-01", sent.span_id);
    assert_eq!(sent_traceparent(&queue).await, Some(expected));

    // A message without a context starts a trace of its own; a reject says why it failed.
    let rejected = process_span(&spans, &ids[1]);
    assert_ne!(rejected.trace_id, TRACE_ID);
    assert!(rejected.parent_span_id.is_empty(), "{rejected:#?}");
    assert_eq!(rejected.attr("qhost.outcome"), Some("dead_lettered"));
    assert_eq!(rejected.attr("error.type"), Some("rejected"));
    assert_eq!(rejected.status_code, ERROR);
    assert_eq!(rejected.status_message, "not for us");
    assert_eq!(
        children(&spans, rejected),
        ["dead letter send", "invoke", "lease"]
    );

    // The first cause names the error (a trap), and the outcome says how it ended.
    let trapped = process_span(&spans, &ids[2]);
    assert_eq!(trapped.attr("qhost.outcome"), Some("dead_lettered"));
    assert_eq!(trapped.attr("error.type"), Some("trap"));
    // The guest's own error (a Rust panic here), not the runtime's trap plumbing.
    let reason = &trapped.status_message;
    assert!(
        reason.starts_with("plugin trapped: panicked at plugins/fixtures/src/lib.rs:")
            && reason.ends_with(": fixture asked to trap"),
        "{trapped:#?}"
    );
    let trap = spans
        .iter()
        .find(|s| s.parent_span_id == trapped.span_id && s.name == "invoke")
        .expect("the trapped invoke span");
    assert_eq!(
        (trap.attr("error.type"), trap.status_code),
        (Some("trap"), ERROR)
    );
}

/// With no endpoint configured nothing is traced, and nothing is added to what handlers send.
#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_nothing_is_traced_or_written() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let config = env.config_file(&queue_toml("jobs", "fixture"));
    let queue = env.queue();
    let traceparent = format!("00-{TRACE_ID}-{PRODUCER_SPAN}-01");
    queue
        .send(&[message("send:next:hello", Some(&traceparent))])
        .await
        .expect("sending");
    let ran = tokio::task::spawn_blocking(move || run_until_idle(&config, &[]))
        .await
        .expect("qhost ran");
    let log = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "{log}");
    assert!(!log.contains("exporting traces"), "{log}");
    assert_eq!(sent_traceparent(&queue).await, None);
}

/// A protocol qhost cannot export is refused before anything runs, naming the variable.
#[test]
fn a_grpc_protocol_is_refused_at_start() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let config = env.config_file(&queue_toml("jobs", "fixture"));
    let vars = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ];
    let ran = run_until_idle(&config, &vars);
    let log = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(1), "{log}");
    assert!(
        log.contains(
            "OTEL_EXPORTER_OTLP_PROTOCOL is `grpc`: qhost exports OTLP over HTTP as protobuf"
        ),
        "{log}"
    );
}
