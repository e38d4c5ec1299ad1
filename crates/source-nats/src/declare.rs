//! A consumed queue's stream and durable pull consumer, and its dead-letter stream: found, or
//! made when the settings declare queues.
//!
//! A queue `NAME` is the stream `NAME`, capturing the subject `NAME`, with work-queue
//! retention (a message leaves the stream when it is acked, so the stream is the queue), and
//! the durable pull consumer the settings name on it, acking explicitly, holding a delivery
//! for the queue's hold (`ack_wait`). A dead-letter stream keeps what it holds (limits
//! retention), so an operator can read it without taking it.

use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::stream::{self, RetentionPolicy};
use async_nats::jetstream::{self, Context};

use qhost_source::SourceError;

/// A queue's consumer, and how long it holds a delivery.
#[derive(Clone, Debug)]
pub(crate) struct Consumer {
    pub(crate) pull: PullConsumer,
    pub(crate) ack_wait: Duration,
}

/// `name` checked as a stream's name (no `.`, `*`, `>`, spaces or path separators).
pub(crate) fn stream_name(name: &str) -> Result<&str, SourceError> {
    let bad = |c: char| matches!(c, '.' | '*' | '>' | '/' | '\\') || c.is_whitespace();
    if name.is_empty() || name.len() > 255 || name.contains(bad) {
        return Err(SourceError::Refused(format!(
            "`{name}` is not a JetStream stream name: 1 to 255 characters, none of . * > / \\ or \
             white space"
        )));
    }
    Ok(name)
}

/// The stream `name`, made (capturing the subject of its name) when absent and `declare`;
/// `retention` for one made.
pub(crate) async fn stream(
    js: &Context,
    name: &str,
    declare: bool,
    retention: RetentionPolicy,
) -> Result<stream::Stream, SourceError> {
    let name = stream_name(name)?;
    match js.get_stream(name).await {
        Ok(s) => Ok(s),
        Err(e) if is_not_found(&e.to_string()) && declare => js
            .get_or_create_stream(stream::Config {
                name: name.to_string(),
                subjects: vec![name.to_string()],
                retention,
                ..Default::default()
            })
            .await
            .map_err(|e| backend(format!("creating stream `{name}`"), e)),
        Err(e) if is_not_found(&e.to_string()) => Err(SourceError::UnknownQueue(name.into())),
        Err(e) => Err(backend(format!("looking up stream `{name}`"), e)),
    }
}

/// How many messages stream `name` holds, without making anything: `None` when it does not
/// exist.
pub(crate) async fn stream_messages(js: &Context, name: &str) -> Result<Option<u64>, SourceError> {
    match js.get_stream(stream_name(name)?).await {
        Ok(mut s) => {
            let info = (s.info().await).map_err(|e| backend(format!("reading `{name}`"), e))?;
            Ok(Some(info.state.messages))
        }
        Err(e) if is_not_found(&e.to_string()) => Ok(None),
        Err(e) => Err(backend(format!("looking up stream `{name}`"), e)),
    }
}

/// The consumer `consumer` of stream `queue`, made when absent and `declare`, holding a
/// delivery for `hold` and delivering a message `max_deliver` times at most.
pub(crate) async fn consumer(
    js: &Context,
    queue: &str,
    consumer: &str,
    declare: bool,
    hold: Duration,
    max_deliver: Option<i64>,
) -> Result<Consumer, SourceError> {
    let stream = stream(js, queue, declare, RetentionPolicy::WorkQueue).await?;
    let found = stream.get_consumer::<pull::Config>(consumer).await;
    let mut pull: PullConsumer = match found {
        Ok(c) => c,
        Err(e) if is_consumer_missing(e.as_ref()) && declare => stream
            .create_consumer(pull::Config {
                durable_name: Some(consumer.to_string()),
                ack_policy: AckPolicy::Explicit,
                ack_wait: hold,
                max_deliver: max_deliver.unwrap_or(-1),
                ..Default::default()
            })
            .await
            .map_err(|e| backend(format!("creating consumer `{consumer}` on `{queue}`"), e))?,
        Err(e) if is_consumer_missing(e.as_ref()) => {
            return Err(SourceError::UnknownQueue(format!(
                "{queue} (consumer {consumer})"
            )));
        }
        Err(e) => return Err(backend(format!("looking up consumer `{consumer}`"), e)),
    };
    let info = (pull.info().await).map_err(|e| backend("reading the consumer's info", e))?;
    if info.config.ack_policy != AckPolicy::Explicit {
        return Err(SourceError::Refused(format!(
            "consumer `{consumer}` on `{queue}` does not ack explicitly: qhost acks each message \
             after its completion commits"
        )));
    }
    let ack_wait = info.config.ack_wait;
    Ok(Consumer { pull, ack_wait })
}

/// The consumer `consumer` of stream `queue` if both exist, without making anything.
pub(crate) async fn existing_consumer(
    js: &Context,
    queue: &str,
    consumer: &str,
) -> Result<Option<Consumer>, SourceError> {
    let stream = match js.get_stream(stream_name(queue)?).await {
        Ok(s) => s,
        Err(e) if is_not_found(&e.to_string()) => return Ok(None),
        Err(e) => return Err(backend(format!("looking up stream `{queue}`"), e)),
    };
    let mut pull: PullConsumer = match stream.get_consumer(consumer).await {
        Ok(c) => c,
        Err(e) if is_consumer_missing(e.as_ref()) => return Ok(None),
        Err(e) => return Err(backend(format!("looking up consumer `{consumer}`"), e)),
    };
    let info = (pull.info().await).map_err(|e| backend("reading the consumer's info", e))?;
    let ack_wait = info.config.ack_wait;
    Ok(Some(Consumer { pull, ack_wait }))
}

/// Whether a lookup failed because the stream is absent (JetStream's error 10059).
fn is_not_found(text: &str) -> bool {
    text.contains("stream not found")
}

/// Whether a lookup failed because the consumer is absent (JetStream's error 10014).
fn is_consumer_missing(e: &(dyn std::error::Error + Send + Sync)) -> bool {
    e.to_string().contains("consumer not found")
}

/// A failed call, with what it was doing.
pub(crate) fn backend(doing: impl std::fmt::Display, e: impl std::fmt::Display) -> SourceError {
    SourceError::Backend(anyhow::anyhow!("NATS JetStream, {doing}: {e}"))
}

/// JetStream's context on `client`, answering within `timeout`.
pub(crate) fn context(client: async_nats::Client, timeout: Duration) -> Context {
    let mut js = jetstream::new(client);
    js.set_timeout(timeout);
    js
}
