//! Route and key for a Celery task message (a queue with `format = "celery"`).
//!
//! The message is decoded (`crate::celery`) and routed by its task name to one of the queue's
//! `tasks` plugins (or its default `plugin`); nothing in the message can pick another. The lease
//! is keyed by the task id (a republished retry by the id and its retry count, see
//! `Task::key`), whatever key source the plugin's manifest names: Celery's id is what makes two
//! deliveries the same task. The handler gets the task as a JSON body with `celery-*` attributes
//! beside the message's own; the message as sent stays what is dead-lettered or redriven.
//!
//! A task not due yet (`eta`, `countdown`) is put back hidden until it is, up to just under
//! SQS's 12-hour visibility at a time, using no attempt. A task past its `expires` is acked
//! without running and counted as `expired`, as a Celery worker revokes it. A hard `timelimit`
//! below the plugin's deadline becomes the run's. What does not decode, a task name the
//! queue does not route, and a task whose callbacks or chain qhost will not send (see
//! `celery::follow`; each follow-up's queue must be under the plugin's `[outbox] celery`) are
//! dead-lettered with the reason. A task's follow-ups join its run's outbox when it acks.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::context::QueueCtx;
use super::delivery::{Delivery, PluginRef};
use super::route::{RouteError, Routed, Unroutable, loaded, routed};
use crate::celery;
use crate::celery::follow::FollowUp;
use crate::config::celery::CeleryQueue;
use crate::digest::sha256_hex;
use crate::message::Received;
use crate::payload::Resolved;
use crate::plugin::Plugin;

/// The longest a task not due yet is hidden at a time: just under SQS's 12 hours, which SQS
/// counts from the receive (a change to the full 12 hours a moment later would be refused). A
/// task due later comes back then and is hidden again, each time a receive but not an attempt.
const MAX_HIDDEN: Duration = Duration::from_secs(12 * 3600 - 300);

/// Routes a Celery task message; `resolved` is its payload when it came offloaded (the envelope
/// is then the payload).
pub(super) fn route(
    queue: &Arc<QueueCtx>,
    msg: Received,
    resolved: Option<Resolved>,
    celery: &CeleryQueue,
) -> Result<Routed, Box<Unroutable>> {
    let raw = resolved.as_ref().map_or(&msg.body, |r| &r.body);
    let named = |name: &str| PluginRef::Named(name.to_string());
    let task = match celery::decode(raw, &celery.accept) {
        Ok(task) => task,
        Err(e) => return unroutable(queue, msg, named(&queue.config.plugin), e.into()),
    };
    let Some(name) = celery.plugin_for(&task.name) else {
        let error = RouteError::UnknownTask {
            task: task.name,
            routed: celery.tasks.keys().cloned().collect::<Vec<_>>().join(", "),
        };
        return unroutable(queue, msg, named(&queue.config.plugin), error);
    };
    let follow_ups = match celery::follow::follow_ups(&task, &queue.config.name) {
        Ok(follow_ups) => follow_ups,
        Err(e) => return unroutable(queue, msg, named(name), e.into()),
    };
    let now = SystemTime::now();
    if task.expired(now) {
        let expires = task.expires.map(|e| e.text).unwrap_or_default();
        return unroutable(queue, msg, named(name), RouteError::Expired { expires });
    }
    if let Some(wait) = task.due_in(now) {
        let eta = task.eta.map(|e| e.text).unwrap_or_default();
        let wait = wait.min(MAX_HIDDEN);
        return unroutable(queue, msg, named(name), RouteError::NotDue { eta, wait });
    }
    let plugin = match loaded(queue, name) {
        Ok(plugin) => plugin,
        Err((plugin, error)) => return unroutable(queue, msg, plugin, error),
    };
    if let Some(error) = ungranted(&task.name, &plugin, &follow_ups) {
        return unroutable(queue, msg, PluginRef::Loaded(plugin), error);
    }
    let from_payload = resolved.is_some();
    let mut attributes = match resolved {
        Some(r) => r.attributes,
        None => msg.attributes.clone(),
    };
    attributes.splice(0..0, task.attributes());
    let mut routed = routed(queue, msg, plugin, task.key());
    if !task.ignore_result {
        routed.delivery.records_result_of(task.id.clone());
    }
    if from_payload {
        routed.delivery.payload_verified();
    }
    routed.delivery.follows_with(follow_ups);
    // A limit of half a day or more caps nothing a plugin's deadline allows.
    routed.time_limit = (task.time_limit.0)
        .filter(|s| *s < 43_200.0)
        .map(Duration::from_secs_f64);
    let body = task.handler_body();
    routed.resolved = Some(Resolved {
        sha256: sha256_hex(&body),
        body,
        attributes,
    });
    Ok(routed)
}

/// The refusal of a task whose follow-ups go to a queue `plugin` may not send Celery tasks to.
fn ungranted(task: &str, plugin: &Plugin, follow_ups: &[FollowUp]) -> Option<RouteError> {
    let f = (follow_ups.iter()).find(|f| !plugin.manifest.outbox.is_celery(&f.queue))?;
    Some(RouteError::UngrantedFollowUp {
        task: task.to_string(),
        queue: f.queue.clone(),
        plugin: plugin.name.clone(),
    })
}

fn unroutable(
    queue: &Arc<QueueCtx>,
    msg: Received,
    plugin: PluginRef,
    error: RouteError,
) -> Result<Routed, Box<Unroutable>> {
    let delivery = Delivery::received(Arc::clone(queue), msg, plugin);
    Err(Box::new(Unroutable { delivery, error }))
}
