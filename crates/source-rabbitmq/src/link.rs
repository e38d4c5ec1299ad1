//! The connection to the broker: opened on first use, on the runtime that first uses it (a
//! lane's own thread), and opened again after it drops, with exponential backoff and jitter so
//! that a fleet reconnecting after a broker restart does not arrive at once.
//!
//! A connection carries a channel for publishing per exchange (in confirm mode: a send counts
//! once the broker has it) and a channel per consumed queue (`consumer`). A link is never repaired in
//! place: when its connection drops, every delivery it held is back in its queue, so every
//! handle of it must stop working, and a new link (with a new generation) replaces it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lapin::options::ConfirmSelectOptions;
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;

use crate::settings::RabbitSettings;

/// One connection and its publishing channels, one per exchange: a publish to an exchange that
/// does not exist closes its channel, which must not fail the publishes to other exchanges in
/// flight beside it.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) connection: Connection,
    publishers: Mutex<HashMap<String, Channel>>,
}

impl Link {
    /// Whether the connection is still up.
    pub(crate) fn connected(&self) -> bool {
        self.connection.status().connected()
    }

    /// The publishing channel of `exchange`, opened (again, if the broker closed it) as
    /// needed.
    pub(crate) async fn publisher(&self, exchange: &str) -> lapin::Result<Channel> {
        let mut channels = self.publishers.lock().await;
        match channels.get(exchange) {
            Some(channel) if channel.status().connected() => Ok(channel.clone()),
            _ => {
                let channel = confirming(&self.connection).await?;
                channels.insert(exchange.to_string(), channel.clone());
                Ok(channel)
            }
        }
    }

    /// A channel of its own, for a call that may close it (a passive declare of a queue that
    /// does not exist closes its channel).
    pub(crate) async fn scratch(&self) -> lapin::Result<Channel> {
        self.connection.create_channel().await
    }
}

async fn confirming(connection: &Connection) -> lapin::Result<Channel> {
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(channel)
}

/// Opens a link to the broker of `settings`.
pub(crate) async fn open(settings: &RabbitSettings) -> lapin::Result<Link> {
    let properties = ConnectionProperties::default()
        .with_connection_name(settings.connection_name.as_str().into());
    let connection = Connection::connect(&settings.url, properties).await?;
    let default = confirming(&connection).await?;
    Ok(Link {
        connection,
        publishers: Mutex::new(HashMap::from([(String::new(), default)])),
    })
}

/// When the next attempt to connect may start, after failures in a row.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: u32,
    not_before: Option<Instant>,
}

/// The first retry's wait, doubled per failure up to [`MAX`].
const FIRST: Duration = Duration::from_millis(100);
const MAX: Duration = Duration::from_secs(10);

impl Backoff {
    /// How long to wait before the next attempt (zero after a success).
    pub(crate) fn wait(&self) -> Duration {
        (self.not_before).map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        })
    }

    /// An attempt failed: the next waits longer, with full jitter (a random share of the
    /// doubled wait).
    pub(crate) fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
        let ceiling = FIRST.saturating_mul(1 << self.failures.min(10)).min(MAX);
        let wait = ceiling.mul_f64(0.5 + fastrand::f64() / 2.0);
        self.not_before = Some(Instant::now() + wait);
    }

    /// An attempt succeeded.
    pub(crate) fn succeeded(&mut self) {
        *self = Backoff::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_with_jitter_up_to_the_cap_and_reset_on_success() {
        let mut b = Backoff::default();
        assert_eq!(b.wait(), Duration::ZERO);
        b.failed();
        let first = b.wait();
        assert!(first <= Duration::from_millis(200) && first >= Duration::from_millis(90));
        for _ in 0..20 {
            b.failed();
        }
        assert!(b.wait() <= MAX && b.wait() >= MAX / 2 - Duration::from_millis(50));
        b.succeeded();
        assert_eq!(b.wait(), Duration::ZERO);
    }
}
