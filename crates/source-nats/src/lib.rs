//! qhost's source contract on NATS JetStream: each queue a stream with a durable pull
//! consumer, so producers publishing to its subject (with any NATS client) send to qhost, and
//! JetStream's at-least-once delivery gains qhost's leases, outbox and state.
//!
//! How each operation of the contract lands (`docs/design.md` has the table for every broker):
//!
//! - **receive with a hold**: a pull request for up to `max` messages that expires after
//!   `wait` (a long poll). JetStream holds each delivery for the consumer's `ack_wait`; a
//!   receive asking for another hold sets it with a `-NAK` carrying that delay, which JetStream
//!   takes as "deliver again after this long": a visibility change, as on SQS.
//! - **settle**: `+ACK`, sent as a request so the server confirms it (a double ack) before the
//!   delivery counts as settled.
//! - **put back**: `-NAK` with the delay (none: at once).
//! - **keep holding**: `+WPI` (in progress: `ack_wait` starts again) when the hold is the
//!   consumer's `ack_wait`, otherwise `-NAK` with the hold as its delay.
//! - **handles** are the deliveries' reply subjects (`$JS.ACK.…`). JetStream acks name the
//!   message, not the delivery: a handle of an earlier delivery acts on the message's current
//!   one. The host settles only after its completion commits under a live lease, so a late
//!   settle acks a message whose work is done; a late put back or hold moves the current
//!   delivery's time, which the next delivery's lease makes safe.
//! - **send**: a JetStream publish, awaited until the stream acknowledges it, with
//!   `Nats-Msg-Id` (see `convert`) so the stream drops a copy re-sent within its duplicate
//!   window; a subject no stream captures is refused with why (NATS would drop it silently).
//! - **delivery count**: `num_delivered`, from the delivery's metadata.
//!
//! Layout: `settings`, `declare` (streams and consumers found or made), `convert` (headers to
//! and from attributes).

mod convert;
mod declare;
mod settings;

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::Context;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::AckKind;
use async_nats::jetstream::stream::RetentionPolicy;
use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt as _;

use qhost_message::{Outgoing, Received};
use qhost_source::{Capabilities, Holds, Purged, QueueAdmin, QueueDepth, QueueSource, SourceError};

use declare::{Consumer, backend};
pub use settings::{NatsAuth, NatsSettings};

/// NATS JetStream's streams, as a source.
pub struct NatsQueue {
    settings: NatsSettings,
    client: async_nats::Client,
    js: Context,
    /// Each consumed queue's consumer, found or made on first use.
    consumers: tokio::sync::Mutex<HashMap<String, Consumer>>,
}

impl std::fmt::Debug for NatsQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsQueue")
            .field("servers", &self.settings.servers)
            .finish_non_exhaustive()
    }
}

impl NatsQueue {
    /// A source on the servers of `settings`. It connects in the background and reconnects
    /// after a server loss, with growing pauses; calls made meanwhile wait up to the settings'
    /// timeout.
    pub async fn connect(settings: NatsSettings) -> anyhow::Result<NatsQueue> {
        let mut options = async_nats::ConnectOptions::new()
            .name("qhost")
            .retry_on_initial_connect()
            .connection_timeout(settings.timeout)
            .request_timeout(Some(settings.timeout));
        options = match &settings.auth {
            NatsAuth::None => options,
            NatsAuth::Token(token) => options.token(token.clone()),
            NatsAuth::UserPassword(user, password) => {
                options.user_and_password(user.clone(), password.clone())
            }
            NatsAuth::Nkey(seed) => options.nkey(seed.clone()),
            NatsAuth::Credentials(text) => options.credentials(text)?,
        };
        if let Some(tls) = &settings.tls {
            options = options.tls_client_config((**tls).clone());
        }
        let servers: Vec<async_nats::ServerAddr> = (settings.servers.iter())
            .map(|s| s.parse())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("a NATS server URL: {e}"))?;
        let client = options.connect(servers).await?;
        let js = declare::context(client.clone(), settings.timeout);
        Ok(NatsQueue {
            settings,
            client,
            js,
            consumers: Default::default(),
        })
    }

    /// Makes `queue` ready (its stream and consumer found, or made when the settings declare
    /// queues) and its `dead_letter` stream.
    pub async fn prepare(&self, queue: &str, dead_letter: &str) -> Result<(), SourceError> {
        self.consumer(queue).await?;
        let retention = RetentionPolicy::Limits;
        declare::stream(&self.js, dead_letter, self.settings.declare, retention).await?;
        Ok(())
    }

    /// Deletes stream `name` (tests clean up with it).
    pub async fn delete_stream(&self, name: &str) -> Result<(), SourceError> {
        self.consumers.lock().await.remove(name);
        (self.js.delete_stream(name).await)
            .map(drop)
            .map_err(|e| backend(format!("deleting stream `{name}`"), e))
    }

    /// `queue`'s consumer.
    async fn consumer(&self, queue: &str) -> Result<Consumer, SourceError> {
        if let Some(c) = self.consumers.lock().await.get(queue) {
            return Ok(c.clone());
        }
        let s = &self.settings;
        let made = declare::consumer(
            &self.js,
            queue,
            &s.consumer,
            s.declare,
            s.hold(queue),
            s.max_deliver,
        )
        .await?;
        self.consumers
            .lock()
            .await
            .insert(queue.into(), made.clone());
        Ok(made)
    }

    /// Sends `kind` for the delivery `handle`, and waits for the server to confirm it.
    async fn ack(&self, handle: &str, kind: AckKind) -> Result<(), SourceError> {
        if !handle.starts_with("$JS.ACK.") {
            return Err(SourceError::HandleExpired);
        }
        let answer = self
            .client
            .request(handle.to_string(), Bytes::from(kind))
            .await;
        answer.map(drop).map_err(|e| {
            use async_nats::RequestErrorKind;
            match e.kind() {
                RequestErrorKind::TimedOut => {
                    SourceError::TimedOut("a JetStream acknowledgement".into())
                }
                // No consumer answers for it any more: the consumer was deleted.
                RequestErrorKind::NoResponders => SourceError::HandleExpired,
                _ => backend("acknowledging a delivery", e),
            }
        })
    }

    /// How many messages the stream capturing `subject` holds: `None` when no stream does.
    async fn subject_messages(&self, subject: &str) -> Result<Option<u64>, SourceError> {
        match self.js.stream_by_subject(subject).await {
            Ok(stream) => declare::stream_messages(&self.js, &stream).await,
            Err(e)
                if e.to_string().contains("not found") || e.to_string().contains("no stream") =>
            {
                Ok(None)
            }
            Err(e) => Err(backend(format!("looking up the stream of `{subject}`"), e)),
        }
    }

    /// What a hold of `hold` asks of JetStream, for a consumer that holds for `ack_wait`.
    fn hold_kind(hold: Duration, ack_wait: Duration) -> AckKind {
        if hold == ack_wait {
            AckKind::Progress
        } else {
            AckKind::Nak(Some(hold.max(Duration::from_millis(1))))
        }
    }

    /// Publishes `m`, waiting for the stream's acknowledgement: `STREAM:SEQUENCE`.
    async fn publish(&self, m: &Outgoing) -> Result<String, SourceError> {
        let headers = convert::headers(m);
        let payload = Bytes::from(m.body.clone());
        let refused = |e: &dyn std::fmt::Display| {
            SourceError::Refused(format!("publishing to `{}`: {e}", m.queue))
        };
        let sent = (self
            .js
            .publish_with_headers(m.queue.clone(), headers, payload)
            .await)
            .map_err(|e| match e.kind() {
                PublishErrorKind::MaxPayloadExceeded => refused(&e),
                _ => backend(format!("publishing to `{}`", m.queue), e),
            })?;
        let ack = sent.await.map_err(|e| match e.kind() {
            PublishErrorKind::StreamNotFound => SourceError::Refused(format!(
                "no JetStream stream captures subject `{}`: NATS would drop the message",
                m.queue
            )),
            PublishErrorKind::TimedOut => {
                SourceError::TimedOut(format!("publishing to `{}`", m.queue))
            }
            PublishErrorKind::MaxPayloadExceeded => refused(&e),
            _ => backend(format!("publishing to `{}`", m.queue), e),
        })?;
        Ok(format!("{}:{}", ack.stream, ack.sequence))
    }
}

/// A delivery as qhost reads it.
fn received(queue: &str, m: async_nats::jetstream::Message) -> Result<Received, SourceError> {
    let info = m
        .info()
        .map_err(|e| backend("reading a delivery's metadata", e))?;
    let (id, delivery_count) = (
        format!("{}:{}", info.stream, info.stream_sequence),
        info.delivered,
    );
    let sent_at_ms = (info.published.unix_timestamp_nanos() / 1_000_000).max(0) as u64;
    let (attributes, malformed) = convert::attributes(m.headers.as_ref());
    let handle = (m.reply.as_ref()).map_or_else(String::new, |r| r.to_string());
    Ok(Received {
        id,
        handle,
        queue: queue.to_string(),
        body: m.payload.to_vec(),
        attributes,
        delivery_count: u32::try_from(delivery_count).unwrap_or(u32::MAX),
        sent_at_ms,
        group_id: None,
        malformed,
    })
}

#[async_trait]
impl QueueSource for NatsQueue {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            delay: true,
            holds: Holds::Expire,
            delivery_count: true,
            ordering_groups: false,
        }
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        hold: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, SourceError> {
        let consumer = self.consumer(queue).await?;
        let pulled = match wait.is_zero() {
            true => consumer.pull.fetch().max_messages(max).messages().await,
            false => {
                let batch = consumer.pull.batch().max_messages(max).expires(wait);
                batch.messages().await
            }
        };
        let mut batch = pulled.map_err(|e| backend(format!("pulling from `{queue}`"), e))?;
        let mut got = Vec::new();
        while let Some(next) = batch.next().await {
            match next {
                Ok(m) => got.push(m),
                // What came before the failure is held and handled; the rest waits.
                Err(e) if !got.is_empty() => {
                    tracing::debug!(error = %e, "a pull ended early");
                    break;
                }
                Err(e) => return Err(backend(format!("pulling from `{queue}`"), e)),
            }
        }
        let out: Vec<Received> = (got.into_iter())
            .map(|m| received(queue, m))
            .collect::<Result<_, _>>()?;
        if hold != consumer.ack_wait {
            let holds = out
                .iter()
                .map(|r| self.ack(&r.handle, AckKind::Nak(Some(hold))));
            for held in futures_util::future::join_all(holds).await {
                held?;
            }
        }
        Ok(out)
    }

    async fn settle(
        &self,
        _queue: &str,
        handles: &[String],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        let acks = handles.iter().map(|h| self.ack(h, AckKind::Ack));
        Ok(futures_util::future::join_all(acks).await)
    }

    async fn put_back(
        &self,
        _queue: &str,
        handle: &str,
        after: Duration,
    ) -> Result<(), SourceError> {
        let delay = (!after.is_zero()).then_some(after);
        self.ack(handle, AckKind::Nak(delay)).await
    }

    async fn hold(&self, queue: &str, handle: &str, hold: Duration) -> Result<(), SourceError> {
        let consumer = self.consumer(queue).await?;
        self.ack(handle, Self::hold_kind(hold, consumer.ack_wait))
            .await
    }

    async fn send(&self, messages: &[Outgoing]) -> Result<Vec<String>, SourceError> {
        for m in messages {
            qhost_message::rules::check(m).map_err(|r| SourceError::Refused(r.0))?;
        }
        let sends = messages.iter().map(|m| self.publish(m));
        futures_util::future::join_all(sends)
            .await
            .into_iter()
            .collect()
    }

    /// A consumed queue's depth is its consumer's; a stream no consumer of qhost's reads (a
    /// dead-letter stream) holds what it holds; a subject (a send's target) has the depth of
    /// the stream that captures it, and none captures it is an unknown queue.
    async fn depth(&self, queue: &str) -> Result<QueueDepth, SourceError> {
        let cached = self.consumers.lock().await.get(queue).cloned();
        let found = match (cached, declare::stream_name(queue)) {
            (Some(c), _) => Some(c),
            (None, Ok(_)) => {
                declare::existing_consumer(&self.js, queue, &self.settings.consumer).await?
            }
            (None, Err(_)) => None,
        };
        let Some(mut consumer) = found else {
            let held = match declare::stream_name(queue) {
                Ok(_) => declare::stream_messages(&self.js, queue).await?,
                Err(_) => None,
            };
            let held = match held {
                Some(n) => Some(n),
                None => self.subject_messages(queue).await?,
            };
            let visible = held.ok_or_else(|| SourceError::UnknownQueue(queue.into()))?;
            return Ok(QueueDepth {
                visible,
                invisible: 0,
            });
        };
        let info = (consumer.pull.info().await)
            .map_err(|e| backend(format!("reading `{queue}`'s consumer"), e))?;
        Ok(QueueDepth {
            visible: info.num_pending,
            invisible: info.num_ack_pending as u64,
        })
    }

    fn depth_is_exact(&self) -> bool {
        true
    }
}

#[async_trait]
impl QueueAdmin for NatsQueue {
    /// What `qhost check` says of `queue`: its stream and consumer (how long it holds a
    /// delivery, how many times it delivers one), and its dead-letter stream; read without
    /// making anything.
    async fn inspect(&self, queue: &str, dead_letter: &str) -> Result<String, SourceError> {
        let s = &self.settings;
        let Some(_) = declare::stream_messages(&self.js, queue).await? else {
            return Ok(match s.declare {
                true => format!(
                    "stream `{queue}` absent: `qhost run` creates it, with consumer `{}` and \
                     dead-letter stream `{dead_letter}`",
                    s.consumer
                ),
                false => return Err(SourceError::UnknownQueue(queue.into())),
            });
        };
        let consumer = match self.consumers.lock().await.get(queue).cloned() {
            Some(c) => Some(c),
            None => declare::existing_consumer(&self.js, queue, &s.consumer).await?,
        };
        let consumer = match consumer {
            Some(mut c) => {
                let info = (c.pull.info().await).map_err(|e| backend("reading the consumer", e))?;
                let limit = match info.config.max_deliver {
                    n if n > 0 => format!("delivers a message {n} times at most"),
                    _ => "delivers a message until it is acked".into(),
                };
                format!(
                    "consumer `{}` ({} waiting, {} held; holds a delivery {:?}, {limit})",
                    s.consumer, info.num_pending, info.num_ack_pending, c.ack_wait
                )
            }
            None => format!("consumer `{}` absent: `qhost run` creates it", s.consumer),
        };
        let dead = match declare::stream_messages(&self.js, dead_letter).await? {
            Some(n) => format!("dead-letter stream `{dead_letter}` exists ({n} messages)"),
            None => format!("dead-letter stream `{dead_letter}` absent"),
        };
        Ok(format!("stream `{queue}` exists; {consumer}; {dead}"))
    }

    async fn purge(&self, queue: &str) -> Result<Purged, SourceError> {
        let stream = declare::stream(&self.js, queue, false, RetentionPolicy::WorkQueue).await?;
        let purged =
            (stream.purge().await).map_err(|e| backend(format!("purging `{queue}`"), e))?;
        Ok(Purged::Deleted(purged.purged))
    }
}
