//! The end of `run --until-idle`: every consumed queue is empty, and stays empty long enough
//! to believe it.
//!
//! Why one empty reading is not always enough: a depth reading from SQS is three approximate
//! counts (visible, delayed, in flight), not one snapshot. A message whose retry delay ends
//! while they are taken can be counted in none of them: on a server that takes them one after
//! another (moto does), it is still hidden when the visible count is taken, and already visible
//! when the in-flight count is. The host would stop with that message
//! on the queue, and a queue's redrive policy would never get to move it. So a source whose
//! reading is approximate must read empty [`APPROXIMATE_EMPTY_READINGS`] times in a row,
//! [`IDLE_CHECK`] apart; one message cannot be between states at each of them. The embedded
//! queue counts in one query, so one reading is exact and believed at once.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::IDLE_CHECK;
use crate::config::Config;
use crate::plugin::registry::Registry;
use crate::source::QueueSource;

/// Empty readings in a row that show an approximately counted queue is empty.
const APPROXIMATE_EMPTY_READINGS: u32 = 3;

/// Cancels `idle` once all consumed queues hold no messages, visible or not, on enough
/// readings in a row. A queue whose plugin is not loaded is not consumed, so it is not waited
/// for (its messages stay).
pub(super) async fn watch(
    source: Arc<dyn QueueSource>,
    config: Arc<Config>,
    registry: Arc<Registry>,
    idle: CancellationToken,
) {
    let mut quiet = Quiet::new(source.depth_is_exact());
    while !idle.is_cancelled() {
        tokio::select! {
            _ = idle.cancelled() => return,
            _ = tokio::time::sleep(IDLE_CHECK) => {}
        }
        if quiet.observe(all_empty(source.as_ref(), &config, &registry).await) {
            idle.cancel();
        }
    }
}

/// Whether every consumed queue reads empty now. A queue whose depth cannot be read is not.
async fn all_empty(source: &dyn QueueSource, config: &Config, registry: &Registry) -> bool {
    for q in (config.queues.iter()).filter(|q| registry.get(&q.plugin).is_some()) {
        match source.depth(&q.name).await {
            Ok(d) if d.total() == 0 => {}
            Ok(_) => return false,
            Err(e) => {
                tracing::warn!(queue = %q.name, error = %e, "could not read queue depth");
                return false;
            }
        }
    }
    true
}

/// Counts empty readings in a row until there are enough to believe.
#[derive(Debug)]
struct Quiet {
    needed: u32,
    seen: u32,
}

impl Quiet {
    fn new(exact: bool) -> Self {
        let needed = if exact { 1 } else { APPROXIMATE_EMPTY_READINGS };
        Quiet { needed, seen: 0 }
    }

    /// Takes one reading; true once the last `needed` readings were all empty.
    fn observe(&mut self, empty: bool) -> bool {
        self.seen = if empty { self.seen + 1 } else { 0 };
        self.seen >= self.needed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_reading_is_believed_at_once() {
        let mut quiet = Quiet::new(true);
        assert!(!quiet.observe(false));
        assert!(quiet.observe(true));
    }

    #[test]
    fn an_approximate_empty_reading_between_others_is_not_believed() {
        let mut quiet = Quiet::new(false);
        // A message between states reads as an empty queue once; the readings around it see it.
        let readings = [false, true, false, true, true, false];
        assert!(readings.iter().all(|&empty| !quiet.observe(empty)));
        assert!(!quiet.observe(true));
        assert!(!quiet.observe(true));
        assert!(quiet.observe(true), "three empty readings in a row");
    }
}
