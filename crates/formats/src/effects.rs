//! A format's effects: what commits with a run's completion besides the handler's own outbox
//! (Celery's result record and follow-up tasks), and the grants they are checked against.

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use qhost_message::Outgoing;

/// What a run's plugin may do, as far as a format's effects ask: the host answers from the
/// plugin's manifest.
pub trait Grants {
    /// The plugin's name, for a refusal.
    fn plugin(&self) -> &str;
    /// Whether it may send Celery tasks to `queue` (its manifest's `[outbox] celery`).
    fn may_send_celery(&self, queue: &str) -> bool;
}

/// Why a format's effects did not go ahead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EffectError {
    /// The plugin may not carry them out (a follow-up to a queue it may not send to): the run
    /// is refused before it starts, for good.
    #[error("{0}")]
    NotGranted(String),
    /// The result could not be written where a caller waits on it: the delivery backs off,
    /// and its next delivery finds the result pending and writes it again.
    #[error("{0}")]
    Unwritten(String),
}

/// A format's effects of one run: what commits with its completion besides the handler's own
/// outbox, carried out once the completion is committed, and again by a delivery that finds
/// them still pending.
#[async_trait]
pub trait Effects: Send + Sync + std::fmt::Debug {
    /// Why a plugin with `grants` may not carry these effects out (a follow-up to a queue it
    /// may not send to): the run is then refused before it starts.
    fn check(&self, grants: &dyn Grants) -> Result<(), EffectError> {
        let _ = grants;
        Ok(())
    }

    /// At an ack: the outbox to commit (the handler's `outbox`, which may gain the format's own
    /// messages, each keyed by its place under `plugin` and `key`) and the result value to
    /// commit with it, from the handler's `result`.
    fn on_ack(
        &self,
        outbox: Vec<Outgoing>,
        plugin: &str,
        key: &str,
        result: Option<String>,
    ) -> (Vec<Outgoing>, Option<String>);

    /// Writes a committed result `value` where a caller waits on it, before the outbox is sent.
    async fn write_result(&self, value: &str) -> Result<(), EffectError>;

    /// The message was given up after running, with `reason`: what to write where a caller
    /// waits (best effort, run in the background), if anything.
    fn gave_up(&self, reason: &str) -> Option<BoxFuture<'static, ()>>;
}
