//! Publishing with confirms: a message counts as sent once the broker confirms it. Sent to the
//! default exchange with the queue's name as routing key (or to a configured exchange with its
//! routing key) and `mandatory` set, so a message nothing would receive comes back as a
//! refusal instead of vanishing. A batch is published first and
//! its confirmations awaited after, so it costs one round trip, not one per message.

use lapin::BasicProperties;
use lapin::options::BasicPublishOptions;
use lapin::{Confirmation, PublisherConfirm};
use qhost_source::SourceError;

use crate::link::Link;
use crate::{amqp_error, backend};

/// Where a publish goes: an exchange and its routing key (the default exchange, `""`, routes
/// by queue name), and the target's name as a sender named it, for errors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Route<'a> {
    pub(crate) target: &'a str,
    pub(crate) exchange: &'a str,
    pub(crate) routing_key: &'a str,
}

impl<'a> Route<'a> {
    /// Queue `queue`, through the default exchange.
    pub(crate) fn queue(queue: &'a str) -> Route<'a> {
        Route {
            target: queue,
            exchange: "",
            routing_key: queue,
        }
    }

    /// What a failed publish on this route means to its sender.
    fn error(&self, e: lapin::Error) -> SourceError {
        match amqp_error(self.target, e) {
            SourceError::UnknownQueue(_) if !self.exchange.is_empty() => {
                SourceError::Refused(format!(
                    "exchange `{}` (target `{}`) does not exist; qhost does not declare exchanges",
                    self.exchange, self.target
                ))
            }
            other => other,
        }
    }
}

/// Publishes `body` to `queue` and waits for the broker's confirmation.
pub(crate) async fn confirmed(
    link: &Link,
    queue: &str,
    body: &[u8],
    properties: BasicProperties,
) -> Result<(), SourceError> {
    let route = Route::queue(queue);
    let pending = publish(link, route, body, properties).await?;
    confirm(route, pending).await
}

/// Publishes `body` on `route`; the broker's confirmation is to be awaited ([`confirm`]), so
/// that many publishes share one wait.
pub(crate) async fn publish(
    link: &Link,
    route: Route<'_>,
    body: &[u8],
    properties: BasicProperties,
) -> Result<PublisherConfirm, SourceError> {
    let channel = (link.publisher(route.exchange).await).map_err(|e| route.error(e))?;
    let mandatory = BasicPublishOptions {
        mandatory: true,
        ..Default::default()
    };
    let exchange = route.exchange.into();
    channel
        .basic_publish(
            exchange,
            route.routing_key.into(),
            mandatory,
            body,
            properties,
        )
        .await
        .map_err(|e| route.error(e))
}

/// Waits for the broker's confirmation of a publish on `route`. A message the broker could
/// route nowhere comes back: a queue that does not exist, or an exchange with no queue bound
/// for the key, each refused, never dropped in silence.
pub(crate) async fn confirm(
    route: Route<'_>,
    pending: PublisherConfirm,
) -> Result<(), SourceError> {
    match pending.await.map_err(|e| route.error(e))? {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(_)) if route.exchange.is_empty() => {
            Err(SourceError::UnknownQueue(route.target.to_string()))
        }
        Confirmation::Ack(Some(_)) => Err(SourceError::Refused(format!(
            "exchange `{}` routes nothing for routing key `{}` (target `{}`): no queue is bound, \
             so the message would be lost",
            route.exchange, route.routing_key, route.target
        ))),
        Confirmation::Nack(_) => Err(backend(format!(
            "RabbitMQ refused to store a message for `{}` (a negative confirm)",
            route.target
        ))),
        Confirmation::NotRequested => Err(backend(
            "the publishing channel is not in confirm mode".to_string(),
        )),
    }
}
