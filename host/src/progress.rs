//! When each consumed queue last finished a message (a delete confirmed by the queue), so
//! readiness can tell a queue that drains from one that is stuck: messages visible, none
//! finishing. Written by the ack task, read by the health check; one atomic each way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One queue's progress.
#[derive(Debug)]
pub(crate) struct Progress {
    /// What the times count from: when consuming started.
    epoch: Instant,
    /// Milliseconds after `epoch` of the last confirmed delete (0: none yet, so the clock runs
    /// from the start).
    last_ms: AtomicU64,
}

impl Progress {
    /// Progress of a queue whose consuming starts now.
    pub(crate) fn new() -> Self {
        Progress {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Progress of a queue consumed since `ago`, with nothing finished yet.
    #[cfg(test)]
    pub(crate) fn started_ago(ago: Duration) -> Self {
        Progress {
            epoch: Instant::now() - ago,
            last_ms: AtomicU64::new(0),
        }
    }

    /// Notes that messages were finished just now.
    pub(crate) fn finished(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// How long since a message was last finished (or since consuming started).
    pub(crate) fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_time_runs_from_the_start_and_from_each_finish() {
        let progress = Progress::started_ago(Duration::from_secs(90));
        assert!(progress.idle_for() >= Duration::from_secs(90));
        progress.finished();
        assert!(progress.idle_for() < Duration::from_secs(5));
    }
}
