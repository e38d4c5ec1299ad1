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

/// Declares `queue` (durable, of `kind`), dead-lettering to `dead_letter`, declared too.
pub(crate) async fn declare(
    link: &Link,
    queue: &str,
    dead_letter: &str,
    kind: QueueType,
) -> Result<(), SourceError> {
    declare_one(link, dead_letter, arguments(kind, None)).await?;
    declare_one(link, queue, arguments(kind, Some(dead_letter))).await
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
