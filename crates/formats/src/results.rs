//! Celery's result records, written as a Celery worker with the Redis result backend writes
//! them, so a Celery caller's `AsyncResult(id).get()` returns (or re-raises) for a task qhost ran.
//!
//! A record is the JSON `{status, result, traceback, children, date_done, task_id}` under
//! `celery-task-meta-ID`, set with an expiry and published on a channel of the same name (a
//! waiting `get()` subscribes to it, and reads the key once it has). One script sets and
//! publishes, and never replaces a `SUCCESS`: a redelivery that finds the record still pending
//! (its host crashed between the completion and the write) writes it again, but a late
//! failure of an older run never overwrites it.
//!
//! What is written: `SUCCESS` once the task's run is recorded complete, with the value the
//! handler set through `qhost:handler/result-value` (`null` if it set none), committed with
//! the completion and pending beside its outbox until written (`idempotency::pending`);
//! `FAILURE` when the task is dead-lettered after
//! its handler ran (rejected, or out of attempts), as `{"exc_type": "TaskRejected",
//! "exc_message": [REASON], "exc_module": null}`, which Celery re-raises as an exception of that
//! name. Nothing for a task sent with `ignore_result`.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::json;
use tokio::sync::OnceCell;

use qhost_celery::iso8601;
use qhost_redis_link::{RedisDeadlines, redacted};

/// Sets a record unless a `SUCCESS` is there, and publishes it (its digest computed once).
static RECORD: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RECORD_LUA));

const RECORD_LUA: &str = r"
local now = redis.call('GET', KEYS[1])
if now then
  local ok, meta = pcall(cjson.decode, now)
  if ok and type(meta) == 'table' and meta['status'] == 'SUCCESS' then
    return 0
  end
end
redis.call('SETEX', KEYS[1], ARGV[2], ARGV[1])
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
";

/// Where qhost writes Celery's result records, as a Celery worker with the Redis result backend
/// does (`[celery] result-backend`).
#[derive(Clone, PartialEq, Eq)]
pub struct CeleryResults {
    /// The Redis server's URL (`redis://…` or `rediss://…`).
    pub url: String,
    /// How long a record is kept (`result-expires-secs`; Celery's `result_expires`, a day).
    pub expires: Duration,
}

impl std::fmt::Debug for CeleryResults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CeleryResults")
            .field("url", &redacted(&self.url))
            .field("expires", &self.expires)
            .finish()
    }
}

/// How a task's run ended, as its record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TaskState {
    /// Completed, with the run's result value (JSON text).
    Success(String),
    /// Dead-lettered after running, with why.
    Failure(String),
}

/// The Redis server Celery callers read results from.
pub(crate) struct ResultBackend {
    client: redis::Client,
    config: ConnectionManagerConfig,
    conn: OnceCell<ConnectionManager>,
    expires: Duration,
    shown: String,
}

impl std::fmt::Debug for ResultBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultBackend")
            .field("url", &self.shown)
            .finish()
    }
}

impl ResultBackend {
    /// A backend for `settings`; it connects on its first record.
    pub(crate) fn new(settings: &CeleryResults, deadlines: RedisDeadlines) -> anyhow::Result<Self> {
        let shown = redacted(&settings.url);
        let client = redis::Client::open(settings.url.as_str())
            .map_err(|e| anyhow::anyhow!("celery.result-backend `{shown}`: {e}"))?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(deadlines.response))
            .set_connection_timeout(Some(deadlines.connect))
            .set_number_of_retries(2);
        Ok(ResultBackend {
            client,
            config,
            conn: OnceCell::new(),
            expires: settings.expires,
            shown,
        })
    }

    /// Records how task `id` ended; `Ok(false)` when a `SUCCESS` was there already.
    pub(crate) async fn record(&self, id: &str, state: &TaskState) -> Result<bool, String> {
        let conn = self
            .conn
            .get_or_try_init(|| {
                self.client
                    .get_connection_manager_with_config(self.config.clone())
            })
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.shown))?;
        let record = meta(id, state, SystemTime::now());
        let written: i64 = RECORD
            .key(format!("celery-task-meta-{id}"))
            .arg(record)
            .arg(self.expires.as_secs().max(1))
            .invoke_async(&mut conn.clone())
            .await
            .map_err(|e| format!("{}: {e}", self.shown))?;
        Ok(written == 1)
    }
}

/// The record's JSON, as Celery's backend writes it.
fn meta(id: &str, state: &TaskState, now: SystemTime) -> String {
    let (status, result) = match state {
        // The value was checked to be JSON when the handler set it.
        TaskState::Success(value) => ("SUCCESS", serde_json::from_str(value).unwrap_or_default()),
        TaskState::Failure(reason) => (
            "FAILURE",
            json!({"exc_type": "TaskRejected", "exc_message": [reason], "exc_module": null}),
        ),
    };
    let date_done = iso8601(now);
    json!({
        "status": status,
        "result": result,
        "traceback": null,
        "children": [],
        "date_done": date_done,
        "task_id": id,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_celery_s_json() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_669_600_123_456);
        let ok: serde_json::Value = serde_json::from_str(&meta(
            "t1",
            &TaskState::Success(r#"{"sent": [1, 2]}"#.into()),
            at,
        ))
        .unwrap();
        assert_eq!(
            ok,
            json!({"status": "SUCCESS", "result": {"sent": [1, 2]}, "traceback": null, "children": [],
                   "date_done": "2025-12-02T10:00:00.123456+00:00", "task_id": "t1"})
        );
        let failed = meta("t2", &TaskState::Failure("no such user".into()), at);
        let failed: serde_json::Value = serde_json::from_str(&failed).unwrap();
        assert_eq!(failed["status"], "FAILURE");
        assert_eq!(
            failed["result"],
            json!({"exc_type": "TaskRejected", "exc_message": ["no such user"], "exc_module": null})
        );
    }
}
