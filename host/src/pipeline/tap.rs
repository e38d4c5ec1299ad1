//! How each run of a message ended, told to whoever runs messages outside a host: `qhost test`,
//! `qhost invoke` and `qhost replay` run them through this pipeline (the `alone` module) and read
//! what came of each run here, instead of repeating the pipeline's steps on the side.
//!
//! A host's queues have no tap (`QueueCtx::tap` is `None`), and what a run tells is built only
//! when one listens.

use std::sync::Mutex;

use crate::handler::Failure;
use crate::kv::StateCommit;
use crate::message::Outgoing;

/// How one run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Its manifest derives no key from the message: a host dead-letters it unrun.
    NoKey(String),
    /// The message is not what its queue's format says, or the format refuses the run: a host
    /// dead-letters it unrun.
    Refused(String),
    /// Not due yet (a Celery task's eta): a host puts it back, unrun.
    NotDue(String),
    /// Past its expiry: a host acks it unrun.
    Expired(String),
    /// Put back unrun for a reason of the host's (a flow limit, a rate, a key leased
    /// elsewhere): it runs on a later delivery.
    PutBack(String),
    /// Its key was completed already: a host finishes it as a duplicate, unrun.
    Duplicate,
    /// It acked.
    Ack,
    /// It asked for a retry after at least this many seconds.
    Retry(u32),
    /// It rejected, with this reason.
    Reject(String),
    /// It trapped, ran out of time or memory, or could not be instantiated.
    Failed(String),
}

impl Ended {
    /// The kind, which is what comparing two outcomes compares.
    pub fn kind(&self) -> &'static str {
        match self {
            Ended::NoKey(_) => "no key",
            Ended::Refused(_) => "refused",
            Ended::NotDue(_) => "not due",
            Ended::Expired(_) => "expired",
            Ended::PutBack(_) => "put back",
            Ended::Duplicate => "duplicate",
            Ended::Ack => "ack",
            Ended::Retry(_) => "retry",
            Ended::Reject(_) => "reject",
            Ended::Failed(_) => "failed",
        }
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Ack | Ended::Duplicate => f.write_str(self.kind()),
            Ended::Retry(secs) => write!(f, "retry {secs}s"),
            Ended::NoKey(why)
            | Ended::Refused(why)
            | Ended::NotDue(why)
            | Ended::Expired(why)
            | Ended::PutBack(why)
            | Ended::Reject(why)
            | Ended::Failed(why) => write!(f, "{}: {why}", self.kind()),
        }
    }
}

/// What one run of a message did.
#[derive(Debug)]
pub(crate) struct RunEnd {
    /// The key it ran under (none when it derived none, or did not get as far).
    pub(crate) key: Option<String>,
    /// How it ended.
    pub(crate) ended: Ended,
    /// How it failed, when it did.
    pub(crate) failure: Option<Failure>,
    /// What it sent: its outbox as committed (stamped, with the format's own messages) when
    /// it acked; for a duplicate, what the store still held unsent.
    pub(crate) outbox: Vec<Outgoing>,
    /// Its result value, when it acked with one.
    pub(crate) result: Option<String>,
    /// The state it committed, when it acked.
    pub(crate) state: StateCommit,
}

impl RunEnd {
    /// A run that ended `ended` under `key`, having sent and written nothing.
    pub(crate) fn bare(key: Option<String>, ended: Ended) -> RunEnd {
        RunEnd {
            key,
            ended,
            failure: None,
            outbox: Vec::new(),
            result: None,
            state: StateCommit::default(),
        }
    }
}

/// The runs that ended since it was last read, each with its message's id, in the order they
/// ended.
#[derive(Debug, Default)]
pub(crate) struct Tap {
    ends: Mutex<Vec<(String, RunEnd)>>,
}

impl Tap {
    /// Keeps how a run of message `id` ended.
    pub(crate) fn tell(&self, id: &str, end: RunEnd) {
        let mut ends = self.ends.lock().unwrap_or_else(|e| e.into_inner());
        ends.push((id.to_string(), end));
    }

    /// The runs that ended since the last take, each with its message's id.
    pub(crate) fn take(&self) -> Vec<(String, RunEnd)> {
        std::mem::take(&mut *self.ends.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
