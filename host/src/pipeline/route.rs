//! Read, route and key: what a message holds (its queue's format), which plugin handles each
//! run of it, and what key that run is leased under.
//!
//! Every received message passes here once: [`read`] asks the queue's format for its runs
//! (`crate::format`) and makes each a delivery: [`Routed`] (a loaded plugin and a key, ready for
//! a lease) or [`Unroutable`] (ended at once: put back, using no attempt, while its plugin is not
//! loaded or it is not due; acked unrun when it expired; dead-lettered when the message itself is
//! at fault). A message of several runs (an S3 notification's records) makes a delivery per run,
//! each a part of the message (`parts`).

use std::sync::Arc;
use std::time::Duration;

use super::context::QueueCtx;
use super::delivery::{Delivery, Fate, Key, PluginRef};
use super::part::{Part, Parts};
use super::tap::{Ended, RunEnd};
use crate::digest::sha256_hex;
use crate::flow::FlowPolicy;
use crate::flow::policy::{FlowInput, FlowKeySource};
use crate::format::{Admit, KeyBasis, Run, Unrouted, View};
use crate::idempotency::LeaseRequest;
use crate::idempotency::key::{KeyInput, KeySource, MissingKey, scoped};
use crate::message::{Outgoing, Received};
use crate::payload::{Body, Resolved};
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
    /// What the handler is given when it is not the message as received: its fetched payload,
    /// or what the queue's format read from it.
    pub(crate) resolved: Option<Resolved>,
    /// A deadline lower than the plugin's, from the message (a task's own time limit).
    pub(crate) time_limit: Option<Duration>,
    /// Its flow key, when its plugin controls flow (`crate::flow`): the empty key is the
    /// default flow.
    pub(crate) flow: Option<String>,
}

impl Routed {
    /// A duplicate of completed work: carries out the effects still pending (the result record
    /// and the outbox) and deletes the message, without running the handler.
    pub(crate) async fn finish(self, outbox: Vec<Outgoing>, result: Option<String>) -> Fate {
        self.delivery.finish(outbox, result, &self.key).await
    }

    /// The sha256 of the body the handler runs on, when it is known without fetching: what
    /// the format read, a fetched payload's, the body's own, or the digest a qhost pointer
    /// carries (`None` for a pointer without one).
    pub(crate) fn body_digest(&self) -> Option<String> {
        if let Some(resolved) = &self.resolved {
            return Some(resolved.sha256.clone());
        }
        let delivery = &self.delivery;
        match delivery.body() {
            Body::Inline => Some(sha256_hex(&delivery.msg().body)),
            body => body.carried_digest().map(str::to_string),
        }
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
    /// A route the queue does not hold: dead-lettered.
    #[error(transparent)]
    Unrouted(#[from] Unrouted),
    /// The plugin's key source is missing from the message: dead-lettered.
    #[error(transparent)]
    NoKey(#[from] MissingKey),
    /// Not what the queue's format says it is, or a run the format refuses: dead-lettered.
    #[error("{0}")]
    Refused(String),
    /// Not due yet: put back hidden until it is, no attempt used.
    #[error("not due until its eta {eta}")]
    NotDue {
        /// The eta as the message wrote it.
        eta: String,
        /// How long to hide it: until then, or as long as SQS allows at a time.
        wait: Duration,
    },
    /// Past its expiry: acked without running.
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
        self.delivery.tell(|| {
            let ended = match &self.error {
                RouteError::NotDue { eta, .. } => Ended::NotDue(eta.clone()),
                RouteError::Expired { expires } => Ended::Expired(expires.clone()),
                RouteError::NoKey(_) => Ended::NoKey(reason.clone()),
                RouteError::NoPlugin { .. } => Ended::Failed(reason.clone()),
                RouteError::Unrouted(_) | RouteError::Refused(_) => Ended::Refused(reason.clone()),
            };
            RunEnd::bare(None, ended)
        });
        match self.error {
            RouteError::NoPlugin { .. } => {
                tracing::warn!(%reason, "putting the message back until its plugin loads");
                let delay = self.delivery.backoff_delay(0);
                self.delivery.put_back(delay, Event::Deferred).await
            }
            RouteError::NotDue { wait, .. } => {
                tracing::debug!(%reason, "putting the message back until it is due");
                self.delivery.put_back(wait, Event::Deferred).await
            }
            RouteError::Expired { .. } => {
                tracing::info!(%reason, "acking the message without running it");
                self.delivery.record(Event::Expired);
                self.delivery.delete()
            }
            RouteError::Unrouted(_) | RouteError::NoKey(_) | RouteError::Refused(_) => {
                self.delivery.dead_letter(reason).await
            }
        }
    }
}

/// What reading a message came to.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "matched as soon as it is made; boxing the common variant would cost an allocation per message"
)]
pub(crate) enum Read {
    /// Its one run.
    One(Result<Routed, Box<Unroutable>>),
    /// Its runs, each a part of it, to run in order (an S3 notification's records).
    Parts {
        /// The message.
        msg: Received,
        /// Its body.
        body: Body,
        /// Its runs.
        runs: Vec<Result<Routed, Box<Unroutable>>>,
    },
    /// Nothing to run (S3's test event): to be acked.
    Nothing(Delivery),
}

/// Reads `msg` (classified as `body`) by its queue's format and routes each run; `fetched` is
/// its payload, when it pointed to one that was fetched first.
pub(crate) fn read(
    queue: &Arc<QueueCtx>,
    msg: Received,
    body: Body,
    fetched: Option<Resolved>,
) -> Read {
    let (bytes, attributes) = match &fetched {
        Some(r) => (&r.body[..], &r.attributes[..]),
        None => (&msg.body[..], &msg.attributes[..]),
    };
    let default = || PluginRef::Named(queue.config.plugin.clone());
    let mut runs = match queue.format.read(&msg, bytes, attributes) {
        Ok(runs) => runs,
        Err(why) => {
            let delivery = Delivery::received(Arc::clone(queue), msg, body, default());
            let error = RouteError::Refused(why.to_string());
            return Read::One(Err(Box::new(Unroutable { delivery, error })));
        }
    };
    if runs.len() > 1 {
        let parts = Parts::new(runs.len());
        let runs = (runs.into_iter().enumerate())
            .map(|(i, run)| {
                let arrived = Arrived {
                    msg: msg.clone(),
                    body: body.clone(),
                    fetched: fetched.clone(),
                };
                route(queue, arrived, run, Some(parts.part(i)))
            })
            .collect();
        return Read::Parts { msg, body, runs };
    }
    match runs.pop() {
        Some(run) => Read::One(route(queue, Arrived { msg, body, fetched }, run, None)),
        None => Read::Nothing(Delivery::received(Arc::clone(queue), msg, body, default())),
    }
}

/// A message as it arrived: what was received, its body as classified, and its payload when it
/// pointed to one that was fetched before it was read.
struct Arrived {
    msg: Received,
    body: Body,
    fetched: Option<Resolved>,
}

/// What a run's key is derived from: the message, its body, and what the handler is given
/// when that is not the message as it came (a format's view, or a fetched payload).
struct KeyFrom<'a> {
    msg: &'a Received,
    body: &'a Body,
    resolved: Option<&'a Resolved>,
}

/// Routes and keys one run of a message.
fn route(
    queue: &Arc<QueueCtx>,
    arrived: Arrived,
    run: Run,
    part: Option<Part>,
) -> Result<Routed, Box<Unroutable>> {
    let Arrived { msg, body, fetched } = arrived;
    let ended = |plugin: PluginRef, error: RouteError, msg, body, part| {
        let mut delivery = Delivery::received(Arc::clone(queue), msg, body, plugin);
        delivery.as_part(part);
        Err(Box::new(Unroutable { delivery, error }))
    };
    let plugin = match admitted(queue, &run) {
        Ok(plugin) => plugin,
        Err((plugin, error)) => return ended(plugin, error, msg, body, part),
    };
    let resolved = match run.view {
        Some(View { body, attributes }) => Some(Resolved {
            sha256: sha256_hex(&body),
            body,
            attributes,
        }),
        None => fetched,
    };
    let from = KeyFrom {
        msg: &msg,
        body: &body,
        resolved: resolved.as_ref(),
    };
    let key = match key_of(&plugin, &run.key, from) {
        Ok(key) => key,
        Err(e) => return ended(PluginRef::Loaded(plugin), e, msg, body, part),
    };
    let verified = body.is_pointer() && resolved.is_some();
    let loaded = PluginRef::Loaded(Arc::clone(&plugin));
    let delivery = Delivery::received(Arc::clone(queue), msg, body, loaded);
    let mut routed = routed(queue, delivery, plugin, key);
    routed.delivery.as_part(part);
    routed.delivery.carries(run.effects);
    if verified {
        routed.delivery.payload_verified();
    }
    routed.flow = flow_of(
        &routed.plugin.manifest.flow,
        &routed.delivery,
        resolved.as_ref(),
    );
    routed.resolved = resolved;
    routed.time_limit = run.time_limit;
    Ok(routed)
}

/// The loaded plugin `run` goes to, when it may run now; otherwise the plugin its delivery
/// names as it ends, and why.
fn admitted(queue: &QueueCtx, run: &Run) -> Result<Arc<Plugin>, (PluginRef, RouteError)> {
    let config = &queue.config;
    let name = (run.route.plugin(&config.routes, &config.plugin))
        .map_err(|e| (PluginRef::Named(config.plugin.clone()), e.into()))?;
    let refused = match &run.admit {
        Admit::Now => None,
        Admit::NotDue { eta, wait } => Some(RouteError::NotDue {
            eta: eta.clone(),
            wait: *wait,
        }),
        Admit::Expired { expires } => Some(RouteError::Expired {
            expires: expires.clone(),
        }),
        Admit::Refused(why) => Some(RouteError::Refused(why.clone())),
    };
    if let Some(error) = refused {
        return Err((PluginRef::Named(name.to_string()), error));
    }
    let plugin = loaded(queue, name)?;
    match run.effects.as_ref().map(|e| e.check(plugin.as_ref())) {
        Some(Err(why)) => Err((
            PluginRef::Loaded(plugin),
            RouteError::Refused(why.to_string()),
        )),
        _ => Ok(plugin),
    }
}

/// The key of a run for `plugin`, derived from what `basis` says.
fn key_of(plugin: &Plugin, basis: &KeyBasis, from: KeyFrom<'_>) -> Result<String, RouteError> {
    let KeyFrom {
        msg,
        body,
        resolved,
    } = from;
    let policy = &plugin.manifest.idempotency;
    let id = match basis {
        KeyBasis::Fixed(key) => return Ok(key.clone()),
        KeyBasis::Id(id) => id.as_str(),
        KeyBasis::Message => &msg.id,
    };
    let input = match resolved {
        Some(r) => KeyInput {
            id,
            body: &r.body,
            attributes: &r.attributes,
            sha256: Some(&r.sha256),
        },
        // Only `body-sha256` keys read a pointer's digest.
        None => KeyInput {
            id,
            body: &msg.body,
            attributes: &msg.attributes,
            sha256: body.carried_digest(),
        },
    };
    if *basis == KeyBasis::Message {
        return Ok(policy.key.derive_for_run(input, policy.on_missing)?);
    }
    Ok(policy.key.derive_or(input, policy.on_missing)?)
}

/// Whether a message's key is in a payload it only points to: its format reads the body, or
/// its plugin keys by the body (`json:/…`, or `body-sha256` with no digest beside the pointer)
/// or reads its flow key there, so the payload is fetched before the message is read.
pub(crate) fn needs_payload(queue: &QueueCtx, msg: &Received, body: &Body) -> bool {
    if !body.is_pointer() {
        return false;
    }
    if queue.format.reads_body() {
        return true;
    }
    let runs = queue.format.read(msg, &msg.body, &msg.attributes);
    let Some(run) = runs.ok().and_then(|mut runs| runs.pop()) else {
        return false;
    };
    let name = run
        .route
        .plugin(&queue.config.routes, &queue.config.plugin)
        .ok();
    match name.and_then(|name| queue.shared.registry.get(name)) {
        Some(p)
            if p.manifest
                .flow
                .key
                .as_ref()
                .is_some_and(FlowKeySource::reads_body) =>
        {
            true
        }
        Some(p) => match &p.manifest.idempotency.key {
            KeySource::JsonPointer(_) => true,
            KeySource::BodySha256 => body.carried_digest().is_none(),
            _ => false,
        },
        None => false,
    }
}

/// `delivery` keyed for `plugin`, with the lease request for its key.
fn routed(queue: &QueueCtx, delivery: Delivery, plugin: Arc<Plugin>, key: String) -> Routed {
    let key = Key {
        scoped: scoped(&queue.shared.config.namespace, &plugin.name, &key),
        handler: key,
    };
    let request = LeaseRequest {
        key: key.scoped.clone(),
        ttl: queue.config.visibility,
        window: plugin.manifest.dedup_window(),
    };
    let handler_key = &key.handler;
    (delivery.span()).set(|| vec![KeyValue::new("qhost.idempotency_key", handler_key.clone())]);
    Routed {
        delivery,
        plugin,
        key,
        request,
        resolved: None,
        time_limit: None,
        flow: None,
    }
}

/// The flow key of a delivery under `policy`, read from what its handler sees; `None` when
/// the plugin does not control flow.
fn flow_of(
    policy: &FlowPolicy,
    delivery: &Delivery,
    resolved: Option<&Resolved>,
) -> Option<String> {
    if !policy.is_gated() {
        return None;
    }
    let msg = delivery.msg();
    let (body, attributes) = match resolved {
        Some(r) => (&r.body[..], &r.attributes[..]),
        None => (&msg.body[..], &msg.attributes[..]),
    };
    let input = FlowInput {
        body,
        attributes,
        group: msg.group_id.as_deref(),
    };
    Some(
        (policy.key.as_ref())
            .and_then(|k| k.derive(input))
            .unwrap_or_default(),
    )
}

/// The loaded plugin `name`; the error says why it is not serving.
fn loaded(queue: &QueueCtx, name: &str) -> Result<Arc<Plugin>, (PluginRef, RouteError)> {
    let registry = &queue.shared.registry;
    registry.get(name).ok_or_else(|| {
        let error = RouteError::NoPlugin {
            name: name.to_string(),
            why: registry.why_not_serving(name),
        };
        (PluginRef::Named(name.to_string()), error)
    })
}
