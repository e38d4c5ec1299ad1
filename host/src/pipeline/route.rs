//! Route and key: which plugin handles a message, and what key it is leased under.
//!
//! Every received message passes here once (a Celery queue's through `pipeline::celery`, which
//! ends the same way) and becomes a [`Delivery`]: [`Routed`] (a loaded plugin and a key, ready
//! for a lease) or [`Unroutable`] (ended at once: put back, using no attempt, while its plugin
//! is not loaded or a task is not due; acked unrun when a task expired; dead-lettered when the
//! message itself is at fault).

use std::sync::Arc;
use std::time::Duration;

use super::context::QueueCtx;
use super::delivery::{Delivery, Fate, Key, PluginRef};
use crate::celery::DecodeError;
use crate::idempotency::LeaseRequest;
use crate::idempotency::key::{KeyInput, KeySource, MissingKey, OnMissingKey, scoped};
use crate::message::wire;
use crate::message::{Outgoing, Received, find_attribute};
use crate::payload::{Resolved, pointer};
use crate::plugin::Plugin;
use crate::stats::Event;
use opentelemetry::KeyValue;

/// A delivery routed to a loaded plugin and keyed: ready for a lease.
#[derive(Debug)]
#[must_use = "a delivery ends through one of its fate methods"]
pub(crate) struct Routed {
    /// The delivery.
    pub(crate) delivery: Delivery,
    /// Its plugin.
    pub(crate) plugin: Arc<Plugin>,
    /// Its key.
    pub(crate) key: Key,
    /// The lease to ask for.
    pub(crate) request: LeaseRequest,
    /// The offloaded payload, when it was fetched (and verified) to derive the key; for a
    /// Celery task, the task as the handler is given it.
    pub(crate) resolved: Option<Resolved>,
    /// A deadline lower than the plugin's, from the message (a Celery task's time limit).
    pub(crate) time_limit: Option<Duration>,
}

impl Routed {
    /// A duplicate of completed work: sends the outbox and writes the result record still
    /// pending (if any) and deletes the message, without running the handler.
    pub(crate) async fn finish(self, outbox: Vec<Outgoing>, result: Option<String>) -> Fate {
        self.delivery.finish(outbox, result, &self.key).await
    }
}

/// Why a message cannot be leased.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RouteError {
    /// No plugin of that name is loaded (yet): put back, no attempt used. A deploy mistake
    /// is not the message's fault.
    #[error("plugin `{name}` is not loaded: {why}")]
    NoPlugin {
        /// The plugin the message routes to.
        name: String,
        /// Its last load error, or that no file loaded.
        why: String,
    },
    /// The route attribute names a plugin this queue does not route to: dead-lettered.
    #[error(
        "route attribute `{attribute}` holds `{value}`, which is not one of this queue's routes ({routes})"
    )]
    BadRoute {
        /// The queue's route attribute.
        attribute: String,
        /// What the message put there.
        value: String,
        /// The plugins it may name.
        routes: String,
    },
    /// The plugin's key source is missing from the message: dead-lettered.
    #[error(transparent)]
    NoKey(#[from] MissingKey),
    /// A Celery queue's message that is not a task qhost runs: dead-lettered.
    #[error(transparent)]
    Celery(#[from] DecodeError),
    /// A Celery task whose name the queue does not route, with no default plugin:
    /// dead-lettered.
    #[error(
        "task `{task}` is not one this queue routes (tasks: {routed}) and it has no default plugin"
    )]
    UnknownTask {
        /// The task name.
        task: String,
        /// The names the queue routes.
        routed: String,
    },
    /// A Celery task whose callbacks or chain send to a queue its plugin may not send Celery
    /// tasks to: dead-lettered before it runs.
    #[error(
        "task `{task}` sends a callback or its chain's next task to queue `{queue}`, and plugin \
         `{plugin}` may not send Celery tasks there (its manifest's [outbox] celery must name it)"
    )]
    UngrantedFollowUp {
        /// The task name.
        task: String,
        /// Where the follow-up would go.
        queue: String,
        /// The task's plugin.
        plugin: String,
    },
    /// A Celery task not due yet: put back hidden until it is, no attempt used.
    #[error("not due until its eta {eta}")]
    NotDue {
        /// The eta as the message wrote it.
        eta: String,
        /// How long to hide it: until then, or as long as SQS allows at a time.
        wait: Duration,
    },
    /// A Celery task past its expiry: acked without running.
    #[error("expired at {expires}")]
    Expired {
        /// The expiry as the message wrote it.
        expires: String,
    },
}

/// A delivery that cannot be leased, and why.
#[derive(Debug)]
pub(crate) struct Unroutable {
    pub(super) delivery: Delivery,
    pub(super) error: RouteError,
}

impl Unroutable {
    /// Ends the delivery: a plugin not loaded puts it back on the retry schedule, using no
    /// attempt (the queue's own redrive policy is the safety net); anything else is the
    /// message's own fault and is dead-lettered.
    pub(crate) async fn end(self) -> Fate {
        let reason = self.error.to_string();
        match self.error {
            RouteError::NoPlugin { .. } => {
                tracing::warn!(%reason, "putting the message back until its plugin loads");
                let delay = self.delivery.backoff_delay(0);
                self.delivery.put_back(delay, Event::Deferred).await
            }
            RouteError::NotDue { wait, .. } => {
                tracing::debug!(%reason, "putting the task back until it is due");
                self.delivery.put_back(wait, Event::Deferred).await
            }
            RouteError::Expired { .. } => {
                tracing::info!(%reason, "acking the task without running it");
                self.delivery.record(Event::Expired);
                self.delivery.delete()
            }
            RouteError::BadRoute { .. }
            | RouteError::NoKey(_)
            | RouteError::Celery(_)
            | RouteError::UnknownTask { .. }
            | RouteError::UngrantedFollowUp { .. } => self.delivery.dead_letter(reason).await,
        }
    }
}

/// Whether the message's key is in a payload it only points to: its plugin keys by the body
/// (`json:/…`, or `body-sha256` with no digest beside the pointer), so the payload is fetched
/// before the key is derived.
pub(crate) fn needs_payload(queue: &QueueCtx, msg: &Received) -> bool {
    if !pointer::is_pointer(&msg.attributes) {
        return false;
    }
    if queue.config.celery.is_some() {
        // The task's envelope, and so its name and id, is the payload.
        return true;
    }
    match plugin_for(queue, msg).map(|p| p.manifest.idempotency.key.clone()) {
        Ok(KeySource::JsonPointer(_)) => true,
        Ok(KeySource::BodySha256) => pointer::carried_digest(&msg.body, &msg.attributes).is_none(),
        _ => false,
    }
}

/// Routes a message whose key may come from its fetched payload, `resolved`.
pub(crate) fn route_with(
    queue: &Arc<QueueCtx>,
    msg: Received,
    resolved: Option<Resolved>,
) -> Result<Routed, Box<Unroutable>> {
    let keyed = plugin_for(queue, &msg).and_then(|plugin| {
        let policy = &plugin.manifest.idempotency;
        // Only `body-sha256` keys take a pointer's digest: no other message pays for the parse.
        let digest = (resolved.is_none()
            && policy.key == KeySource::BodySha256
            && pointer::is_pointer(&msg.attributes))
        .then(|| pointer::carried_digest(&msg.body, &msg.attributes))
        .flatten();
        let input = key_input(&msg, resolved.as_ref(), digest.as_deref());
        match derive_key(&policy.key, input, policy.on_missing) {
            Ok(key) => Ok((plugin, key)),
            Err(e) => Err((PluginRef::Loaded(plugin), e)),
        }
    });
    match keyed {
        Ok((plugin, key)) => {
            let mut routed = routed(queue, msg, plugin, key);
            if resolved.is_some() {
                routed.delivery.payload_verified();
            }
            routed.resolved = resolved;
            Ok(routed)
        }
        Err((plugin, error)) => {
            let delivery = Delivery::received(Arc::clone(queue), msg, plugin);
            Err(Box::new(Unroutable { delivery, error }))
        }
    }
}

/// A keyed delivery for `plugin`, with the lease request for its key.
pub(super) fn routed(
    queue: &Arc<QueueCtx>,
    msg: Received,
    plugin: Arc<Plugin>,
    key: String,
) -> Routed {
    let key = Key {
        scoped: scoped(&queue.shared.config.namespace, &plugin.name, &key),
        handler: key,
    };
    let request = LeaseRequest {
        key: key.scoped.clone(),
        ttl: queue.config.visibility,
        window: plugin.manifest.dedup_window(),
    };
    let loaded = PluginRef::Loaded(Arc::clone(&plugin));
    let delivery = Delivery::received(Arc::clone(queue), msg, loaded);
    let handler_key = &key.handler;
    (delivery.span()).set(|| vec![KeyValue::new("qhost.idempotency_key", handler_key.clone())]);
    Routed {
        delivery,
        plugin,
        key,
        request,
        resolved: None,
        time_limit: None,
    }
}

/// What the key is derived from: the fetched payload if there is one, otherwise the message
/// (with, for a pointer, the payload digest it carries).
fn key_input<'a>(
    msg: &'a Received,
    resolved: Option<&'a Resolved>,
    digest: Option<&'a str>,
) -> KeyInput<'a> {
    match resolved {
        Some(r) => KeyInput {
            id: &msg.id,
            body: &r.body,
            attributes: &r.attributes,
            sha256: None,
        },
        None => KeyInput {
            sha256: digest,
            ..KeyInput::from(msg)
        },
    }
}

/// The plugin a message goes to, loaded or by name, for a delivery that ends before routing.
pub(crate) fn plugin_ref(queue: &QueueCtx, msg: &Received) -> PluginRef {
    plugin_for(queue, msg).map_or_else(|(named, _)| named, PluginRef::Loaded)
}

/// The loaded plugin for a message; the error names the plugin it would have gone to.
fn plugin_for(queue: &QueueCtx, msg: &Received) -> Result<Arc<Plugin>, (PluginRef, RouteError)> {
    let name =
        route_name(queue, msg).map_err(|e| (PluginRef::Named(queue.config.plugin.clone()), e))?;
    loaded(queue, name)
}

/// The loaded plugin `name`; the error says why it is not serving.
pub(super) fn loaded(queue: &QueueCtx, name: &str) -> Result<Arc<Plugin>, (PluginRef, RouteError)> {
    let registry = &queue.shared.registry;
    registry.get(name).ok_or_else(|| {
        let error = RouteError::NoPlugin {
            name: name.to_string(),
            why: registry.why_not_serving(name),
        };
        (PluginRef::Named(name.to_string()), error)
    })
}

/// The plugin name for a message: the queue's, or one of the queue's routes named by its route
/// attribute. A message never chooses a plugin the queue does not list.
fn route_name<'a>(queue: &'a QueueCtx, msg: &'a Received) -> Result<&'a str, RouteError> {
    let config = &queue.config;
    let Some(attribute) = &config.route_attribute else {
        return Ok(&config.plugin);
    };
    match find_attribute(&msg.attributes, attribute).and_then(|a| a.text()) {
        None => Ok(&config.plugin),
        Some(name) if name == config.plugin || config.routes.iter().any(|r| r == name) => Ok(name),
        Some(name) => Err(RouteError::BadRoute {
            attribute: attribute.clone(),
            value: name.to_string(),
            routes: config.routes.join(", "),
        }),
    }
}

/// The key: an outbox message's derived key when the plugin keys by message id (so a copy
/// re-sent after a crash is dropped), otherwise what the plugin's key source says.
fn derive_key(
    source: &KeySource,
    msg: KeyInput<'_>,
    on_missing: OnMissingKey,
) -> Result<String, RouteError> {
    if *source == KeySource::MessageId
        && let Some(key) =
            find_attribute(msg.attributes, wire::IDEMPOTENCY_KEY).and_then(|a| a.text())
    {
        return Ok(key.to_string());
    }
    Ok(source.derive_or(msg, on_missing)?)
}
