//! Waiting on pgmq's insert notifications instead of reading an empty queue over and over.
//!
//! pgmq (1.7 and later) can notify on every insert into a queue (`pgmq.enable_notify_insert`:
//! a trigger that runs `NOTIFY "pgmq.q_NAME.INSERT"`, at most once per throttle interval). With
//! `notify = true` the host sets that up for its queues and keeps one connection of its own
//! (outside the pool) listening on their channels. A receive that finds its queue empty then
//! waits for whichever comes first: a notification, the moment the earliest held or delayed
//! message becomes visible again (which no insert announces), the end of its long poll, or
//! [`MAX_QUIET`] (a notification lost while the listener reconnected costs that at most).
//!
//! The wait is armed before the read it follows, so a notification that arrives between the
//! read and the wait is not missed.

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

/// The longest a receive waits on notifications alone.
pub(crate) const MAX_QUIET: Duration = Duration::from_secs(5);

/// The throttle the host sets up pgmq's notifications with: after a notification, inserts
/// within this long notify nobody, so a receive polls at least this long after its last
/// message before it waits on notifications.
pub(crate) const THROTTLE: Duration = Duration::from_millis(250);

/// The channel pgmq notifies on for inserts into `queue`.
pub(crate) fn channel(queue: &str) -> String {
    format!("pgmq.q_{}.INSERT", queue.to_lowercase())
}

/// A connection listening on queues' channels, and who waits on each.
pub(crate) struct Listener {
    client: tokio_postgres::Client,
    waiting: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
    /// Drives the connection; ends when it drops (the listener is then made again).
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Listener {
    /// Connects with `config` (the pool's), its notifications handed to the waiters.
    pub(crate) async fn connect(
        config: &tokio_postgres::Config,
        tls: tokio_postgres_rustls::MakeRustlsConnect,
    ) -> Result<Listener, tokio_postgres::Error> {
        let (client, mut connection) = config.connect(tls).await?;
        let waiting: Arc<Mutex<HashMap<String, Arc<Notify>>>> = Arc::default();
        let driver = tokio::spawn({
            let waiting = Arc::clone(&waiting);
            async move {
                while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
                    match message {
                        Ok(AsyncMessage::Notification(n)) => {
                            let notify = lock(&waiting).get(n.channel()).cloned();
                            if let Some(notify) = notify {
                                notify.notify_waiters();
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "the pgmq listener's connection failed; receives poll until it is back");
                            return;
                        }
                    }
                }
            }
        });
        Ok(Listener {
            client,
            waiting,
            driver,
        })
    }

    /// Whether its connection still runs.
    pub(crate) fn is_alive(&self) -> bool {
        !self.driver.is_finished() && !self.client.is_closed()
    }

    /// What waits on `queue`'s inserts: listening on its channel first, if nothing did.
    pub(crate) async fn on(&self, queue: &str) -> Result<Arc<Notify>, tokio_postgres::Error> {
        let channel = channel(queue);
        if let Some(notify) = lock(&self.waiting).get(&channel).cloned() {
            return Ok(notify);
        }
        let listen = format!("LISTEN {}", qhost_postgres_link::quoted(&channel));
        self.client.batch_execute(&listen).await?;
        let mut waiting = lock(&self.waiting);
        Ok(Arc::clone(waiting.entry(channel).or_default()))
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_channel_is_pgmq_s() {
        assert_eq!(super::channel("Jobs"), "pgmq.q_jobs.INSERT");
    }
}
