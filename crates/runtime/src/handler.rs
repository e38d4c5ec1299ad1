//! What the pipeline invokes: a named, versioned plugin with its policy and an invoker.
//!
//! The invoker is a WebAssembly component in production; native Rust handlers implement the
//! same trait, which lets benchmarks measure the sandbox against a baseline and lets qhost be
//! embedded as a library. The pipeline cannot tell the two apart.

use std::time::Duration;

use crate::Costs;
use crate::kv::StateCommit;
use qhost_message::{Attribute, Outgoing};

/// The message a handler sees: the queue's message plus what the host decided about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerMessage {
    /// The queue's message id.
    pub id: String,
    /// The key the host holds a lease on.
    pub idempotency_key: String,
    /// Grows with every lease granted on the key.
    pub fencing_token: u64,
    /// The source queue name.
    pub queue: String,
    /// The body, with any offloaded payload already fetched.
    pub body: Vec<u8>,
    /// Message attributes.
    pub attributes: Vec<Attribute>,
    /// 1 on the first delivery.
    pub receive_count: u32,
    /// Send time, in milliseconds since the Unix epoch.
    pub sent_at_ms: u64,
    /// FIFO message group.
    pub group_id: Option<String>,
    /// A deadline for this message lower than the plugin's own `timeout-ms` (a Celery task's
    /// hard `timelimit`); it never raises the plugin's.
    pub time_limit: Option<Duration>,
}

/// What a handler decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done: commit the outbox, remember the key, delete the message.
    Ack,
    /// Try again after at least this many seconds.
    Retry(u32),
    /// Dead-letter with this reason.
    Reject(String),
}

/// A handler's answer: its outcome, the messages it asked to send and its result value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// The outcome.
    pub outcome: Outcome,
    /// Outbox messages, sent only if the outcome is `Ack`.
    pub outbox: Vec<Outgoing>,
    /// The run's result value (JSON text), kept only if the outcome is `Ack`: what a Celery
    /// caller's `AsyncResult.get()` returns, and what the task's callbacks get first.
    pub result: Option<String>,
    /// What the run read and wrote of its state, committed only if the outcome is `Ack`
    /// (wasm plugins granted `wasi:keyvalue` buckets; see `crate::kv`).
    pub state: StateCommit,
}

impl Invocation {
    /// An outcome with an empty outbox, no result value and no state.
    pub fn new(outcome: Outcome) -> Self {
        Invocation {
            outcome,
            outbox: Vec::new(),
            result: None,
            state: StateCommit::default(),
        }
    }
}

/// Why a handler produced no outcome. Each counts as a retry, and as poison after the
/// plugin's max attempts, except a state store that did not answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The guest trapped (a panic, an unreachable, an exception in an interpreter guest).
    #[error("plugin trapped: {0}")]
    Trap(String),
    /// The guest ran past its timeout and was interrupted.
    #[error("plugin timed out after {0:?}")]
    Timeout(Duration),
    /// The guest tried to grow its memory past its limit.
    #[error("plugin exceeded its memory limit of {0} MiB")]
    MemoryLimit(u64),
    /// The component could not be instantiated.
    #[error("plugin could not be instantiated: {0}")]
    Instantiate(String),
    /// The store did not answer a read of the handler's state: the run was ended there (its
    /// answer could not be trusted), and the message goes back without using an attempt, as
    /// when the idempotency store is down.
    #[error("the state store did not answer: {0}")]
    StateUnavailable(String),
}

impl Failure {
    /// A short name for the kind of failure, as traces record it in `error.type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Trap(_) => "trap",
            Failure::Timeout(_) => "timeout",
            Failure::MemoryLimit(_) => "memory_limit",
            Failure::Instantiate(_) => "instantiate",
            Failure::StateUnavailable(_) => "state_unavailable",
        }
    }
}

/// Runs a handler on one message. A wasm plugin's call is cancellable: dropping the future
/// stops the guest at its next epoch yield (every tick) and drops its instance.
#[async_trait::async_trait]
pub trait Invoke: Send + Sync + 'static {
    /// Handles one message (given by value: the pipeline has no further use for it, and the
    /// body may be large).
    async fn invoke(&self, msg: HandlerMessage) -> Result<Invocation, Failure>;

    /// Whether it is a batch handler: it takes many messages per call ([`Invoke::invoke_batch`]),
    /// and the host gathers them for it. Its `invoke` handles a batch of one.
    fn is_batch(&self) -> bool {
        false
    }

    /// Handles a batch: one invocation per message, in order. A failure is every message's.
    /// Only batch handlers implement it; the others refuse.
    async fn invoke_batch(&self, msgs: Vec<HandlerMessage>) -> Result<Vec<Invocation>, Failure> {
        let _ = msgs;
        Err(Failure::Instantiate(
            "this handler takes one message per call".into(),
        ))
    }

    /// Where the invoker's time went so far, for those that count it (wasm plugins).
    fn costs(&self) -> Option<Costs> {
        None
    }

    /// Outbound HTTP requests by result (`runtime::http`), for those that make them.
    fn http_requests(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// A native handler: a function that returns promptly, called on the async threads. One that
/// blocks (file or network I/O, a sleep) should implement [`Invoke`] itself and move the work
/// off them (`tokio::task::spawn_blocking`), or wait asynchronously.
#[async_trait::async_trait]
impl<F> Invoke for F
where
    F: Fn(HandlerMessage) -> Result<Invocation, Failure> + Send + Sync + 'static,
{
    async fn invoke(&self, msg: HandlerMessage) -> Result<Invocation, Failure> {
        self(msg)
    }
}

/// The one invocation of a batch of one.
pub fn one_of(batch: Result<Vec<Invocation>, Failure>) -> Result<Invocation, Failure> {
    let mut invocations = batch?;
    outcome_count(1, invocations.len())?;
    Ok(invocations.remove(0))
}

/// A batch handler's answer of `got` outcomes for `n` messages is a failure of every message
/// unless the counts match.
pub fn outcome_count(n: usize, got: usize) -> Result<(), Failure> {
    if got == n {
        return Ok(());
    }
    Err(Failure::Trap(format!(
        "the handler returned {got} outcomes for a batch of {n} messages"
    )))
}
