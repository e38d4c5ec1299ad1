//! Publishing with confirms: a message counts as sent once the broker confirms it. Sent to the
//! default exchange with the queue's name as routing key and `mandatory` set, so a queue that
//! does not exist comes back as a refusal instead of vanishing. A batch is published first and
//! its confirmations awaited after, so it costs one round trip, not one per message.

use lapin::BasicProperties;
use lapin::options::BasicPublishOptions;
use lapin::{Confirmation, PublisherConfirm};
use qhost_source::SourceError;

use crate::link::Link;
use crate::{amqp_error, backend};

/// Publishes `body` to `queue` and waits for the broker's confirmation.
pub(crate) async fn confirmed(
    link: &Link,
    queue: &str,
    body: &[u8],
    properties: BasicProperties,
) -> Result<(), SourceError> {
    let pending = publish(link, queue, body, properties).await?;
    confirm(queue, pending).await
}

/// Publishes `body` to `queue`; the broker's confirmation is to be awaited ([`confirm`]), so
/// that many publishes share one wait.
pub(crate) async fn publish(
    link: &Link,
    queue: &str,
    body: &[u8],
    properties: BasicProperties,
) -> Result<PublisherConfirm, SourceError> {
    let channel = link.publisher().await.map_err(|e| amqp_error(queue, e))?;
    let mandatory = BasicPublishOptions {
        mandatory: true,
        ..Default::default()
    };
    channel
        .basic_publish("".into(), queue.into(), mandatory, body, properties)
        .await
        .map_err(|e| amqp_error(queue, e))
}

/// Waits for the broker's confirmation of a publish to `queue`.
pub(crate) async fn confirm(queue: &str, pending: PublisherConfirm) -> Result<(), SourceError> {
    match pending.await.map_err(|e| amqp_error(queue, e))? {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(_returned)) => Err(SourceError::UnknownQueue(queue.to_string())),
        Confirmation::Nack(_) => Err(backend(format!(
            "RabbitMQ refused to store a message for `{queue}` (a negative confirm)"
        ))),
        Confirmation::NotRequested => Err(backend(
            "the publishing channel is not in confirm mode".to_string(),
        )),
    }
}
