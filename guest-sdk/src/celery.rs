//! Celery tasks, as qhost hands them to a handler on a queue with `format = "celery"` (feature
//! `celery`).
//!
//! The host decodes Celery's wire format (kombu's envelope, protocol 1 or 2, JSON or msgpack)
//! before the handler runs, routes the task by its name and leases it by its id; the handler is
//! given the task as a JSON body, which [`Task::of`] reads:
//!
//! ```ignore
//! let task = qhost_guest::celery::Task::of(&msg)?;
//! let customer = task.arg(0).and_then(|v| v.as_str());
//! let month = task.kwarg("month");
//! ```
//!
//! Values Celery's JSON tags (datetimes, decimals, UUIDs) arrive as the strings kombu wrote.
//!
//! What the task returns, [`set_result`] gives the host: a caller waiting on the task gets it,
//! and so do the task's callbacks and the next task of its chain, first in their arguments.
//!
//! ```ignore
//! qhost_guest::celery::set_result(&serde_json::json!({"sent": 2}))?;
//! ```

use serde::{Deserialize, Serialize};
pub use serde_json::{Map, Value};

use crate::Message;

/// A Celery task.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Task {
    /// The task's registered name (`proj.tasks.send_reminder`).
    pub task: String,
    /// The task id; the host's idempotency key is this id (with the retry count on a retry).
    pub id: String,
    /// Positional arguments.
    #[serde(default)]
    pub args: Vec<Value>,
    /// Keyword arguments.
    #[serde(default)]
    pub kwargs: Map<String, Value>,
    /// Retries before this run.
    #[serde(default)]
    pub retries: u64,
    /// When the task was due, and when it expires (ISO 8601), if the sender said.
    pub eta: Option<String>,
    /// See `eta`.
    pub expires: Option<String>,
    /// The workflow's first task, the task that sent this one, and its group.
    pub root_id: Option<String>,
    /// See `root_id`.
    pub parent_id: Option<String>,
    /// See `root_id`.
    pub group: Option<String>,
}

impl Task {
    /// The task in `msg`'s body, or why the body is not one (a queue that is not a Celery
    /// queue gives the message as it was sent).
    pub fn of(msg: &Message) -> Result<Task, String> {
        serde_json::from_slice(&msg.body).map_err(|e| format!("not a Celery task body: {e}"))
    }

    /// Positional argument `i`.
    pub fn arg(&self, i: usize) -> Option<&Value> {
        self.args.get(i)
    }

    /// Keyword argument `name`.
    pub fn kwarg(&self, name: &str) -> Option<&Value> {
        self.kwargs.get(name)
    }
}

/// Sets what the task returns (see [`crate::set_result`]): kept only if the handler acks.
pub fn set_result<T: Serialize + ?Sized>(value: &T) -> Result<(), String> {
    let json = serde_json::to_string(value).map_err(|e| format!("the result is not JSON: {e}"))?;
    crate::set_result(&json)
}
