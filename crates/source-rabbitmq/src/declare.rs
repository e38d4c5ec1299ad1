//! Declaring and checking queues. qhost declares the queues it consumes when asked (quorum by
//! default, with their dead-letter queue as RabbitMQ's dead-letter route and the broker's own
//! delivery limit), or checks that they exist; a queue declared before with other arguments
//! is a clear error, not a closed channel to decode.

use std::time::Duration;

use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};

use crate::link::Link;
use crate::settings::QueueType;
use crate::{amqp_error, delay};
use qhost_source::SourceError;

/// Declares `queue` (durable, of `kind`, with a single active consumer when `ordered`),
/// dead-lettering to `dead_letter`, declared too.
pub(crate) async fn declare(
    link: &Link,
    queue: &str,
    dead_letter: &str,
    kind: QueueType,
    ordered: bool,
) -> Result<(), SourceError> {
    declare_one(link, dead_letter, arguments(kind, None)).await?;
    declare_one(link, queue, queue_arguments(kind, dead_letter, ordered)).await
}

/// A consumed queue's arguments: dead-lettering to `dead_letter`, with a single active
/// consumer when `ordered`.
fn queue_arguments(kind: QueueType, dead_letter: &str, ordered: bool) -> FieldTable {
    let mut args = arguments(kind, Some(dead_letter));
    if ordered {
        args.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
    }
    args
}

fn arguments(kind: QueueType, dead_letter: Option<&str>) -> FieldTable {
    let text = |s: &str| AMQPValue::LongString(LongString::from(s));
    let mut args = FieldTable::default();
    match kind {
        QueueType::Quorum { delivery_limit } => {
            args.insert("x-queue-type".into(), text("quorum"));
            if dead_letter.is_some() {
                args.insert(
                    "x-delivery-limit".into(),
                    AMQPValue::LongLongInt(i64::from(delivery_limit)),
                );
            }
        }
        QueueType::Classic => {
            args.insert("x-queue-type".into(), text("classic"));
        }
    }
    if let Some(dl) = dead_letter {
        args.insert("x-dead-letter-exchange".into(), text(""));
        args.insert("x-dead-letter-routing-key".into(), text(dl));
    }
    args
}

async fn declare_one(link: &Link, queue: &str, args: FieldTable) -> Result<(), SourceError> {
    let channel = link.scratch().await.map_err(|e| amqp_error(queue, e))?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let declared = channel.queue_declare(queue.into(), durable, args).await;
    match declared {
        Ok(_) => {
            let _ = channel.close(200, "declared".into()).await;
            Ok(())
        }
        Err(e) if precondition_failed(&e) => Err(SourceError::Refused(format!(
            "queue `{queue}` exists with other arguments than qhost declares ({e}); declare it \
             as the configuration says, or set source.declare = false to use it as it is"
        ))),
        Err(e) => Err(amqp_error(queue, e)),
    }
}

fn precondition_failed(e: &lapin::Error) -> bool {
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(amqp) if amqp.get_id() == 406)
}

/// Declares the delay queue `name` of `queue` for `delay` (again on every use, which keeps it
/// from expiring while it holds messages).
pub(crate) async fn delay_queue(
    link: &Link,
    queue: &str,
    name: &str,
    delay: Duration,
) -> Result<(), SourceError> {
    declare_one(link, name, delay::arguments(queue, delay)).await
}

/// What `qhost check` says of `queue` and `dead_letter`. Declaring qhost's way (`declare`):
/// each that exists is declared again with qhost's arguments, a no-op that RabbitMQ refuses
/// when the queue was declared otherwise (so a mismatch shows now, not at `qhost run`); one
/// that does not exist yet is named as what `qhost run` will declare. Used as they are: both
/// must exist (AMQP does not show a queue's arguments, so the dead-letter route is the
/// operator's to check).
pub(crate) async fn inspect(
    link: &Link,
    queue: &str,
    dead_letter: &str,
    declare: Option<QueueType>,
    ordered: bool,
) -> Result<String, SourceError> {
    let ready = match exists(link, queue).await {
        Ok(n) => Some(n),
        Err(SourceError::UnknownQueue(_)) if declare.is_some() => None,
        Err(e) => return Err(e),
    };
    let dead_ready = match exists(link, dead_letter).await {
        Ok(n) => Some(n),
        Err(SourceError::UnknownQueue(_)) if declare.is_some() => None,
        Err(e) => return Err(e),
    };
    let Some(kind) = declare else {
        return Ok(format!(
            "exists ({} ready); its dead-letter queue `{dead_letter}` exists (declare = false: \
             check that the broker's own dead-letter route leads there)",
            ready.unwrap_or(0)
        ));
    };
    let what = match (kind, ordered) {
        (QueueType::Quorum { delivery_limit }, o) => format!(
            "quorum, delivery limit {delivery_limit}{}",
            if o { ", single active consumer" } else { "" }
        ),
        (QueueType::Classic, o) => {
            format!("classic{}", if o { ", single active consumer" } else { "" })
        }
    };
    if dead_ready.is_some() {
        declare_one(link, dead_letter, arguments(kind, None)).await?;
    }
    if let Some(n) = ready {
        declare_one(link, queue, queue_arguments(kind, dead_letter, ordered)).await?;
        return Ok(format!(
            "exists as qhost declares it ({what}, dead-lettering to `{dead_letter}`), {n} ready"
        ));
    }
    Ok(format!(
        "does not exist yet: `qhost run` declares it ({what}, dead-lettering to `{dead_letter}`)"
    ))
}

/// The number of messages ready in `queue`, which must exist.
pub(crate) async fn exists(link: &Link, queue: &str) -> Result<u64, SourceError> {
    let channel = link.scratch().await.map_err(|e| amqp_error(queue, e))?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let q = channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .map_err(|e| amqp_error(queue, e))?;
    let _ = channel.close(200, "checked".into()).await;
    Ok(u64::from(q.message_count()))
}

/// Deletes `queue` (gone already is fine).
pub(crate) async fn delete(link: &Link, queue: &str) -> Result<(), SourceError> {
    let channel = link.scratch().await.map_err(|e| amqp_error(queue, e))?;
    let deleted = channel
        .queue_delete(queue.into(), QueueDeleteOptions::default())
        .await;
    let _ = channel.close(200, "deleted".into()).await;
    match deleted.map_err(|e| amqp_error(queue, e)) {
        Ok(_) | Err(SourceError::UnknownQueue(_)) => Ok(()),
        Err(e) => Err(e),
    }
}
