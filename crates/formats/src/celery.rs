//! Celery's task messages (`format = "celery"`), read as a Celery worker reads them from SQS
//! (kombu's envelope) or RabbitMQ (AMQP properties and headers).
//!
//! The message is decoded (`qhost_celery`) and routed by its task name through the queue's
//! `tasks` (or its default `plugin`); nothing in the message can pick another. The lease is
//! keyed by the task id (a republished retry by the id and its retry count, see `Task::key`),
//! whatever key source the plugin's manifest names: Celery's id is what makes two deliveries
//! the same task. The handler gets the task as a JSON body with `celery-*` attributes beside
//! the message's own; the message as sent stays what is dead-lettered or redriven.
//!
//! A task not due yet (`eta`, `countdown`) is put back hidden until it is, up to just under
//! SQS's 12-hour visibility at a time, using no attempt. A task past its `expires` is acked
//! without running and counted as `expired`, as a Celery worker revokes it. A hard `timelimit`
//! below the plugin's deadline becomes the run's. What does not decode, and a task whose
//! callbacks or chain qhost will not send (see `qhost_celery::follow`; each follow-up's queue must be
//! under the plugin's `[outbox] celery`), are dead-lettered with the reason.
//!
//! Its effects ([`TaskEffects`]): the task's follow-ups join the run's outbox when it acks, and
//! its result record (when the host has a result backend and the task wants one) is committed
//! with the completion, written before the outbox goes out; a task given up after running gets
//! a `FAILURE` record.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;

use qhost_celery::follow::{self, FollowUp};
use qhost_celery::{self as decode, ContentType, Task};
use qhost_message::rules::Envelope;
use qhost_message::{Attribute, AttributeValue, Outgoing, Received, wire};
use qhost_redis_link::RedisDeadlines;

use crate::results::{CeleryResults, ResultBackend, TaskState};
use crate::{Admit, EffectError, Effects, Format, Grants, KeyBasis, Route, Run, Unreadable, View};

/// The longest a task not due yet is hidden at a time: just under SQS's 12 hours, which SQS
/// counts from the receive (a change to the full 12 hours a moment later would be refused). A
/// task due later comes back then and is hidden again, each time a receive but not an attempt.
const MAX_HIDDEN: Duration = Duration::from_secs(12 * 3600 - 300);

/// A limit of half a day or more caps nothing a plugin's deadline allows.
const NO_LIMIT_SECS: f64 = 43_200.0;

/// What every Celery queue of a host shares: the result backend, when one is configured.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    results: Option<Arc<ResultBackend>>,
    /// How follow-ups are laid out on the host's broker.
    envelope: Envelope,
}

impl Shared {
    /// The result backend `settings` names (it connects on its first record, within
    /// `deadlines`).
    pub(crate) fn open(
        settings: Option<&CeleryResults>,
        deadlines: RedisDeadlines,
        envelope: Envelope,
    ) -> Shared {
        let results = settings.and_then(|settings| match ResultBackend::new(settings, deadlines) {
            Ok(backend) => Some(Arc::new(backend)),
            Err(e) => {
                tracing::error!(error = %e, "Celery result records will not be written");
                None
            }
        });
        Shared { results, envelope }
    }

    /// The format of Celery queue `queue`, reading the serializers in `accept`.
    pub(crate) fn format(&self, queue: &str, accept: Vec<ContentType>) -> Celery {
        Celery {
            queue: queue.to_string(),
            accept,
            results: self.results.clone(),
            envelope: self.envelope,
        }
    }
}

/// A Celery queue's format.
#[derive(Debug)]
pub(crate) struct Celery {
    /// The queue it reads (a follow-up with no queue of its own goes back there).
    queue: String,
    accept: Vec<ContentType>,
    results: Option<Arc<ResultBackend>>,
    envelope: Envelope,
}

impl Format for Celery {
    fn read(
        &self,
        _: &Received,
        body: &[u8],
        attributes: &[Attribute],
    ) -> Result<Vec<Run>, Unreadable> {
        let task = match qhost_message::find_attribute(attributes, wire::AMQP_CONTENT_TYPE) {
            Some(content_type) => decode::decode_amqp(
                body,
                content_type.text().unwrap_or_default(),
                amqp_headers(attributes),
                &self.accept,
            )?,
            None => decode::decode(body, &self.accept)?,
        };
        let route = Route::Named {
            names: vec![task.name.clone()],
            noun: "task",
            table: "tasks",
        };
        let (follow_ups, admit) = match follow::follow_ups(&task, &self.queue, self.envelope) {
            Ok(follow_ups) => (follow_ups, admit(&task, SystemTime::now())),
            Err(e) => (Vec::new(), Admit::Refused(e.to_string())),
        };
        let result_for = (!task.ignore_result && self.results.is_some()).then(|| task.id.clone());
        let effects = TaskEffects {
            task: task.name.clone(),
            result_for,
            follow_ups,
            results: self.results.clone(),
        };
        let mut view_attributes = Vec::from(task.attributes());
        view_attributes.extend(attributes.iter().cloned());
        Ok(vec![Run {
            route,
            key: KeyBasis::Fixed(task.key()),
            view: Some(View {
                body: task.handler_body(),
                attributes: view_attributes,
            }),
            time_limit: (task.time_limit.0)
                .filter(|s| *s < NO_LIMIT_SECS)
                .map(Duration::from_secs_f64),
            admit,
            effects: Some(Arc::new(effects)),
        }])
    }
}

/// Celery's headers of a message from RabbitMQ, from its attributes (all but qhost's own and
/// the AMQP properties): numbers as numbers, and the strings the source wrote for a header's
/// list or boolean (`timelimit`, `ignore_result`) read back as JSON.
fn amqp_headers(attributes: &[Attribute]) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    (attributes.iter())
        .filter(|a| !a.name.starts_with(wire::AMQP_PREFIX))
        .filter(|a| !a.name.starts_with(wire::RESERVED_PREFIX))
        .filter_map(|a| {
            let value = match &a.value {
                AttributeValue::Number(n) => serde_json::from_str::<serde_json::Number>(n)
                    .map(Value::Number)
                    .unwrap_or_else(|_| Value::String(n.clone())),
                AttributeValue::String(s) if STRUCTURED.contains(&a.name.as_str()) => {
                    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                }
                AttributeValue::String(s) => Value::String(s.clone()),
                AttributeValue::Binary(_) => return None,
            };
            Some((a.name.clone(), value))
        })
        .collect()
}

/// Celery's protocol 2 headers that hold a list or a boolean.
const STRUCTURED: [&str; 4] = ["timelimit", "ignore_result", "stamped_headers", "stamps"];

/// Whether `task` runs at `now`: not past its expiry, and due.
fn admit(task: &Task, now: SystemTime) -> Admit {
    if task.expired(now) {
        let expires = (task.expires.as_ref()).map(|e| e.text.clone());
        return Admit::Expired {
            expires: expires.unwrap_or_default(),
        };
    }
    if let Some(wait) = task.due_in(now) {
        let eta = task
            .eta
            .as_ref()
            .map(|e| e.text.clone())
            .unwrap_or_default();
        let wait = wait.min(MAX_HIDDEN);
        return Admit::NotDue { eta, wait };
    }
    Admit::Now
}

/// A task's effects: its follow-ups, and its result record.
#[derive(Debug)]
struct TaskEffects {
    /// The task's name, for refusals.
    task: String,
    /// The task id whose result record the run writes, if it writes one.
    result_for: Option<String>,
    /// The tasks it sends once its run acks (callbacks, the chain's next).
    follow_ups: Vec<FollowUp>,
    results: Option<Arc<ResultBackend>>,
}

#[async_trait]
impl Effects for TaskEffects {
    fn check(&self, grants: &dyn Grants) -> Result<(), EffectError> {
        let Some(f) = (self.follow_ups.iter()).find(|f| !grants.may_send_celery(&f.queue)) else {
            return Ok(());
        };
        Err(EffectError::NotGranted(format!(
            "task `{}` sends a callback or its chain's next task to queue `{}`, and plugin `{}` \
             may not send Celery tasks there (its manifest's [outbox] celery must name it)",
            self.task,
            f.queue,
            grants.plugin()
        )))
    }

    /// The follow-ups after the handler's outbox, each named by its place in the outbox as the
    /// handler's own messages are (`wire::derived_key`), so they commit with the completion:
    /// sent once, and only for a run that acked. A follow-up gets the run's result value first
    /// as Celery passes a parent's return value (`null` when there is none), and the result
    /// record holds it too.
    fn on_ack(
        &self,
        mut outbox: Vec<Outgoing>,
        plugin: &str,
        key: &str,
        result: Option<String>,
    ) -> (Vec<Outgoing>, Option<String>) {
        if !self.follow_ups.is_empty() {
            // The value was checked to be JSON when the handler set it.
            let parent =
                (result.as_deref().and_then(|r| serde_json::from_str(r).ok())).unwrap_or_default();
            for f in &self.follow_ups {
                let derived = wire::derived_key(plugin, key, outbox.len());
                outbox.push(f.outgoing(&derived, &parent));
            }
        }
        let record = self
            .result_for
            .as_ref()
            .map(|_| result.unwrap_or_else(|| "null".into()));
        (outbox, record)
    }

    /// Writes the task's `SUCCESS` record, when the host has a result backend (it may have been
    /// dropped from the configuration since the run: nothing to write to then).
    async fn write_result(&self, value: &str) -> Result<(), EffectError> {
        let (Some(id), Some(backend)) = (&self.result_for, &self.results) else {
            return Ok(());
        };
        let state = TaskState::Success(value.to_string());
        (backend.record(id, &state).await)
            .map(drop)
            .map_err(EffectError::Unwritten)
    }

    fn gave_up(&self, reason: &str) -> Option<BoxFuture<'static, ()>> {
        let (id, backend) = (self.result_for.clone()?, Arc::clone(self.results.as_ref()?));
        let state = TaskState::Failure(reason.to_string());
        let write = async move {
            if let Err(e) = backend.record(&id, &state).await {
                tracing::warn!(task_id = %id, error = %e, "could not write the Celery result record");
            }
        };
        Some(write.boxed())
    }
}
