//! Failed calls to the backends, by operation: counted (for metrics, split into timeouts and
//! other errors) and logged once per burst.
//!
//! When a dependency fails, it fails for every message at once: sixteen deliveries whose store
//! call timed out would write sixteen identical lines, every few seconds, for as long as the
//! outage lasts. So the first failure of an operation is logged, the ones that follow within
//! [`BURST`] are only counted, and the next line logged says how many were held back. The
//! counters are exact either way.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A backend whose call failed (a network error, a server error, a timeout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// The queue service: receive, delete, visibility, send.
    Queue,
    /// The idempotency store.
    Idempotency,
    /// A payload store.
    Payload,
}

impl Backend {
    /// Every backend, in the order [`Stats::backend_errors`] reports them.
    pub(crate) const ALL: [Backend; 3] = [Backend::Queue, Backend::Idempotency, Backend::Payload];

    /// Its name in metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::Queue => "queue",
            Backend::Idempotency => "idempotency",
            Backend::Payload => "payload",
        }
    }

    /// The `error.type` a trace records for a failed call to it.
    pub(crate) fn error_type(self) -> &'static str {
        match self {
            Backend::Queue => "queue_error",
            Backend::Idempotency => "idempotency_store_error",
            Backend::Payload => "payload_store_error",
        }
    }
}

/// How long after a logged failure the same operation's failures are only counted.
pub(crate) const BURST: Duration = Duration::from_secs(10);

/// A call to a backend, as metrics and logs name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    /// `ReceiveMessage`.
    Receive,
    /// `DeleteMessageBatch`.
    Delete,
    /// `ChangeMessageVisibility`.
    ChangeVisibility,
    /// `SendMessageBatch`.
    Send,
    /// `GetQueueAttributes` (the depth the health check reads).
    Depth,
    /// Taking leases.
    Acquire,
    /// Extending a lease.
    Extend,
    /// Recording completions with their outboxes.
    Complete,
    /// Giving a lease back.
    Release,
    /// Marking a completed key's outbox sent.
    OutboxSent,
    /// The rate limit's step.
    Admit,
    /// The health check's ping.
    Ping,
    /// Fetching a payload a pointer names.
    PayloadFetch,
    /// Storing an outgoing message's payload.
    PayloadStore,
    /// Reading a handler's state while it runs (`crate::kv`).
    StateRead,
}

impl Operation {
    /// Every operation, in the order metrics list them.
    pub(crate) const ALL: [Operation; 15] = [
        Operation::Receive,
        Operation::Delete,
        Operation::ChangeVisibility,
        Operation::Send,
        Operation::Depth,
        Operation::Acquire,
        Operation::Extend,
        Operation::Complete,
        Operation::Release,
        Operation::OutboxSent,
        Operation::Admit,
        Operation::Ping,
        Operation::PayloadFetch,
        Operation::PayloadStore,
        Operation::StateRead,
    ];

    /// The backend it calls.
    pub(crate) fn backend(self) -> Backend {
        match self {
            Operation::Receive
            | Operation::Delete
            | Operation::ChangeVisibility
            | Operation::Send
            | Operation::Depth => Backend::Queue,
            Operation::PayloadFetch | Operation::PayloadStore => Backend::Payload,
            _ => Backend::Idempotency,
        }
    }

    /// Its name in metrics and logs: SQS's for queue calls, qhost's for the stores.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Operation::Receive => "ReceiveMessage",
            Operation::Delete => "DeleteMessageBatch",
            Operation::ChangeVisibility => "ChangeMessageVisibility",
            Operation::Send => "SendMessageBatch",
            Operation::Depth => "GetQueueAttributes",
            Operation::Acquire => "acquire",
            Operation::Extend => "extend",
            Operation::Complete => "complete",
            Operation::Release => "release",
            Operation::OutboxSent => "outbox_sent",
            Operation::Admit => "admit",
            Operation::Ping => "ping",
            Operation::PayloadFetch => "fetch",
            Operation::PayloadStore => "store",
            Operation::StateRead => "state_read",
        }
    }
}

/// Failures of one operation: counts, and when the last one was logged.
#[derive(Debug, Default)]
struct Failures {
    timeouts: AtomicU64,
    errors: AtomicU64,
    burst: Mutex<Burst>,
}

/// The log-once-per-burst state of one operation.
#[derive(Debug, Default)]
struct Burst {
    logged_at: Option<Instant>,
    held_back: u64,
}

impl Burst {
    /// Whether a failure at `now` is logged; if so, how many were held back before it.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.logged_at {
            Some(at) if now.duration_since(at) < BURST => {
                self.held_back += 1;
                None
            }
            _ => {
                self.logged_at = Some(now);
                Some(std::mem::take(&mut self.held_back))
            }
        }
    }
}

/// Failed calls by operation.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    by_operation: [Failures; Operation::ALL.len()],
}

impl Faults {
    /// Counts a failed call; `Some(held back)` when it should be logged now.
    pub(crate) fn failed(&self, op: Operation, timed_out: bool) -> Option<u64> {
        let failures = &self.by_operation[op as usize];
        let counter = if timed_out {
            &failures.timeouts
        } else {
            &failures.errors
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut burst = failures.burst.lock().unwrap_or_else(|e| e.into_inner());
        burst.admit(Instant::now())
    }

    /// (operation, timeouts, other errors) for every operation that failed at least once.
    pub(crate) fn counts(&self) -> Vec<(Operation, u64, u64)> {
        Operation::ALL
            .iter()
            .map(|&op| {
                let f = &self.by_operation[op as usize];
                let timeouts = f.timeouts.load(Ordering::Relaxed);
                (op, timeouts, f.errors.load(Ordering::Relaxed))
            })
            .filter(|&(_, t, e)| t + e > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_logged_once_and_the_next_line_says_how_many_were_held_back() {
        let mut burst = Burst::default();
        let start = Instant::now();
        assert_eq!(burst.admit(start), Some(0));
        for i in 1..=5 {
            assert_eq!(burst.admit(start + Duration::from_secs(i)), None);
        }
        assert_eq!(burst.admit(start + BURST + Duration::from_secs(1)), Some(5));
        assert_eq!(burst.admit(start + BURST * 3), Some(0));
    }

    #[test]
    fn failures_are_counted_by_operation_and_kind() {
        let faults = Faults::default();
        assert_eq!(faults.failed(Operation::Send, true), Some(0));
        assert_eq!(faults.failed(Operation::Send, true), None);
        assert_eq!(faults.failed(Operation::Send, false), None);
        assert_eq!(faults.failed(Operation::Acquire, false), Some(0));
        assert_eq!(
            faults.counts(),
            [(Operation::Send, 2, 1), (Operation::Acquire, 0, 1)]
        );
        assert_eq!(Operation::Send.backend(), Backend::Queue);
        assert_eq!(Operation::Complete.backend(), Backend::Idempotency);
        assert_eq!(Operation::PayloadFetch.backend(), Backend::Payload);
    }
}
