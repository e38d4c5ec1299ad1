//! What a RabbitMQ source is told: where the broker is, how many deliveries a consumer may
//! hold, whether qhost declares the queues it consumes (and as what), how a delayed put-back
//! waits, which queues keep their order, how long the broker lets a delivery stay unacked,
//! and which send targets are exchanges. The host's configuration (`[source] kind = "rabbitmq"`) fills it in.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A RabbitMQ source's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RabbitSettings {
    /// `amqp://` or `amqps://` (TLS through rustls, the platform's roots), with the user and
    /// password in it and the virtual host as its path (`%2f` for `/`).
    pub url: String,
    /// How many unacknowledged deliveries each consumer may hold (`basic.qos`): the in-flight
    /// bound of one queue on one lane.
    pub prefetch: u16,
    /// Whether qhost declares the queues it consumes and their dead-letter queues, and as
    /// what; `None` uses them as they exist (a missing one is an error at start).
    pub declare: Option<QueueType>,
    /// How a delivery put back with a delay waits (a retry's backoff, a key held elsewhere).
    pub delay_by: DelayBy,
    /// Queues consumed in order: declared with RabbitMQ's single active consumer (one consumer
    /// of the whole fleet gets deliveries, the rest stand by), consumed one delivery at a time,
    /// and a delayed put-back held rather than sent round a delay queue, so each message runs
    /// after the one before it has settled.
    pub ordered: BTreeSet<String>,
    /// The broker's `consumer_timeout`: a delivery left unacknowledged longer closes its
    /// channel (30 minutes by default). A held-back delivery is requeued before it.
    pub consumer_timeout: Duration,
    /// The connection's name, as `rabbitmqctl list_connections` and the broker's logs show it.
    pub connection_name: String,
    /// Targets published to an exchange instead of a queue: a handler's outbox, `qhost send`
    /// and a grant name them as they name queues.
    pub exchanges: BTreeMap<String, ExchangeTarget>,
}

/// Where a target named in `exchanges` is published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExchangeTarget {
    /// The exchange (it must exist: qhost does not declare exchanges).
    pub exchange: String,
    /// The routing key.
    pub routing_key: String,
}

/// The kind of queue qhost declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueType {
    /// A quorum queue (replicated; counts deliveries in `x-delivery-count`), with RabbitMQ's
    /// own delivery limit: a message delivered this many times more (a host that crashes on
    /// it, again and again) goes to the dead-letter queue without qhost.
    Quorum {
        /// `x-delivery-limit`.
        delivery_limit: u32,
    },
    /// A classic queue (a delivery is only marked `redelivered`, not counted).
    Classic,
}

/// How a delivery put back with a delay waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelayBy {
    /// Republished (with confirms) to a delay queue whose messages expire after the delay and
    /// dead-letter back to their queue, then acknowledged: the delay survives the host, and
    /// holds none of the consumer's prefetch.
    DelayQueue,
    /// Held unacknowledged by the consumer until the delay passes, then requeued: nothing
    /// declared, but each waiting delivery holds one of the prefetch, and a host that dies
    /// meanwhile lets it come back at once.
    Hold,
}

impl RabbitSettings {
    /// RabbitMQ's default `consumer_timeout`.
    pub const DEFAULT_CONSUMER_TIMEOUT: Duration = Duration::from_secs(30 * 60);

    /// The longest a delivery is held back on a consumer (`DelayBy::Hold`, an ordered queue):
    /// half the broker's `consumer_timeout`, so the requeue lands well before the broker would
    /// close the channel for it. A longer delay is cut short: early, never lost.
    pub fn longest_hold(&self) -> Duration {
        self.consumer_timeout / 2
    }

    /// Whether `queue` is consumed in order.
    pub fn is_ordered(&self, queue: &str) -> bool {
        self.ordered.contains(queue)
    }

    /// The longest a delayed put-back waits (RabbitMQ's `x-message-ttl` is at most 2^32-1 ms;
    /// SQS's own bound is 12 hours, which the host already keeps).
    pub const MAX_DELAY: Duration = Duration::from_secs(12 * 3600);
}
