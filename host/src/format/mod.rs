//! The format step: how a queue's messages are read, between the source and routing.
//!
//! Most SQS traffic does not arrive as a bare body. A Celery producer sends kombu's envelope,
//! an SNS topic its notification, an EventBridge rule its event, an S3 bucket its event
//! records. A queue's `format` names which, and its [`Format`] turns each received message into
//! the [`Run`]s the pipeline routes, leases and runs:
//!
//! - the route: the names the queue's routing table is looked up by (a task name, a topic, a
//!   detail-type, an S3 event), or the route attribute's value for qhost's own messages;
//! - what the key is derived from ([`KeyBasis`]): the queue's message id, or the id the
//!   producer retries with (SNS's `MessageId`, an event's `id`, an S3 object's sequencer), or
//!   a key the format fixes whatever the plugin's manifest says (a Celery task id);
//! - what the handler is given ([`View`]): the unwrapped body and the format's attributes;
//! - whether it may run now ([`Admit`]): a Celery task not due yet, or past its expiry;
//! - the format's effects ([`Effects`]): what commits with the run's completion besides the
//!   handler's own outbox (Celery's result record and follow-up tasks), behind one trait, so
//!   the pipeline commits and sends them without knowing which format made them.
//!
//! A message that is not what its format says is refused with why (`Err`), and the pipeline
//! dead-letters it; nothing is guessed at. A message may hold several runs (an S3 notification's
//! records), each leased and decided on its own, or none (S3's test event), which is acked.
//!
//! | module        | format                                                              |
//! |---------------|---------------------------------------------------------------------|
//! | `qhost`       | the body as it is; routed by a route attribute, if the queue has one |
//! | `celery`      | Celery's task messages (decoding in `crate::celery`)                 |
//! | `sns`         | SNS notifications                                                   |
//! | `eventbridge` | EventBridge events                                                  |
//! | `s3`          | S3 event notifications, bare or inside an SNS notification          |
//! | `inspect`     | what qhost reads from a message, for `qhost inspect`                |

mod celery;
#[cfg(test)]
mod celery_fates;
mod eventbridge;
#[cfg(test)]
mod fates;
pub(crate) mod inspect;
mod qhost;
mod s3;
mod sns;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::BoxFuture;

use crate::config::{Config, MessageFormat, QueueConfig, Routes};
use crate::idempotency::key::KeyInput;
use crate::message::{Attribute, Outgoing, Received};
use crate::plugin::Plugin;
use crate::plugin::manifest::Manifest;

/// Why a message is not what its queue's format says it is. It is dead-lettered with this as
/// its reason: no other delivery of it reads differently.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unreadable {
    /// A Celery message kombu's rules do not decode (a pickle, a content type not accepted, a
    /// body or header that is not a task).
    #[error(transparent)]
    Celery(#[from] crate::celery::DecodeError),
    /// Not the envelope the format reads (SNS, EventBridge, an S3 event notification): what
    /// it is not, and why.
    #[error("{0}")]
    Envelope(String),
}

impl From<String> for Unreadable {
    fn from(why: String) -> Self {
        Unreadable::Envelope(why)
    }
}

/// How a queue's messages are read.
pub(crate) trait Format: Send + Sync + std::fmt::Debug {
    /// Reads `msg`, whose body and attributes are `body` and `attributes` (an offloaded
    /// payload's, fetched, when it came as a pointer and [`Format::reads_body`]): the runs it
    /// holds, in order, or why it is not what this format says.
    fn read(
        &self,
        msg: &Received,
        body: &[u8],
        attributes: &[Attribute],
    ) -> Result<Vec<Run>, Unreadable>;

    /// Whether reading needs the body: a message that points to its payload then has it
    /// fetched before it is read. qhost's own format reads only attributes, so its payloads
    /// are fetched under the lease, once the message is known to run.
    fn reads_body(&self) -> bool {
        true
    }
}

/// One run a message holds: routed, keyed and leased on its own.
#[derive(Debug)]
pub(crate) struct Run {
    /// Where it goes.
    pub(crate) route: Route,
    /// What its key is derived from.
    pub(crate) key: KeyBasis,
    /// What the handler is given; `None`: the message's own body and attributes.
    pub(crate) view: Option<View>,
    /// A deadline lower than the plugin's, from the message (a Celery task's time limit).
    pub(crate) time_limit: Option<Duration>,
    /// Whether it runs now.
    pub(crate) admit: Admit,
    /// What commits with its completion besides the handler's outbox.
    pub(crate) effects: Option<Arc<dyn Effects>>,
}

impl Run {
    /// A run of the message as it is, by `route` and `key`, admitted now, with no effects.
    pub(crate) fn plain(route: Route, key: KeyBasis, view: Option<View>) -> Run {
        Run {
            route,
            key,
            view,
            time_limit: None,
            admit: Admit::Now,
            effects: None,
        }
    }
}

impl Run {
    /// What the handler is given: the run's view, or the message's own body and attributes.
    pub(crate) fn view_of(&self, msg: &Received) -> (Vec<u8>, Vec<Attribute>) {
        match &self.view {
            Some(view) => (view.body.clone(), view.attributes.clone()),
            None => (msg.body.clone(), msg.attributes.clone()),
        }
    }

    /// The key the run is leased under by `manifest`'s key source (the default without one),
    /// as the host derives it, or why it has none.
    pub(crate) fn key_of(
        &self,
        msg: &Received,
        manifest: Option<&Manifest>,
    ) -> Result<String, String> {
        let default = Manifest::default();
        let policy = &manifest.unwrap_or(&default).idempotency;
        let (body, attributes) = self.view_of(msg);
        let input = |id| KeyInput {
            id,
            body: &body,
            attributes: &attributes,
            sha256: None,
        };
        let key = match &self.key {
            KeyBasis::Fixed(key) => return Ok(key.clone()),
            KeyBasis::Id(id) => policy.key.derive_or(input(id), policy.on_missing),
            // The message as received, whose own key (a message qhost sent) the host honours.
            KeyBasis::Message => policy.key.derive_for_run(input(&msg.id), policy.on_missing),
        };
        key.map_err(|e| e.to_string())
    }
}

/// Where a run goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// The queue's default plugin.
    Default,
    /// The first of `names` that the queue's table routes; none of them: the default plugin,
    /// or (without one) a dead letter naming `names[0]` as a `noun`.
    Named {
        /// The names to look up, in order (a topic's ARN, then its name).
        names: Vec<String>,
        /// What a name is, for the dead letter's reason (`task`, `topic`, …).
        noun: &'static str,
        /// The table's field as the format spells it (`tasks` for Celery, `routes` otherwise).
        table: &'static str,
    },
    /// A plugin the message itself chose through the queue's route attribute: one of the
    /// table's routes, or a dead letter; never the default instead.
    Chosen {
        /// The route attribute.
        attribute: String,
        /// What the message put there.
        value: String,
    },
}

impl Route {
    /// The plugin this route runs on in a queue routed by `routes`, whose plugin is
    /// `queue_plugin`: one of the queue's routes, or its default. A message never reaches a
    /// plugin the queue does not list.
    pub(crate) fn plugin<'a>(
        &self,
        routes: &'a Routes,
        queue_plugin: &'a str,
    ) -> Result<&'a str, Unrouted> {
        let default = routes.default.as_deref();
        match self {
            Route::Default => Ok(default.unwrap_or(queue_plugin)),
            Route::Named { names, noun, table } => {
                (routes.lookup(names).or(default)).ok_or_else(|| Unrouted::Unknown {
                    noun,
                    name: names.first().cloned().unwrap_or_default(),
                    table,
                    routes: routes.names(),
                })
            }
            Route::Chosen { value, .. } if default == Some(value.as_str()) => Ok(queue_plugin),
            Route::Chosen { attribute, value } => (routes.table.get(value).map(String::as_str))
                .ok_or_else(|| Unrouted::NotARoute {
                    attribute: attribute.clone(),
                    value: value.clone(),
                    routes: routes.names(),
                }),
        }
    }
}

/// Why a run's route names no plugin of its queue: the message is dead-lettered with this.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unrouted {
    /// A route the queue's table does not hold, with no default plugin.
    #[error(
        "{noun} `{name}` is not one this queue routes ({table}: {routes}) and it has no default plugin"
    )]
    Unknown {
        /// What a route is in this format.
        noun: &'static str,
        /// The route the message named.
        name: String,
        /// The routing table's field, as the format spells it.
        table: &'static str,
        /// The names the queue routes.
        routes: String,
    },
    /// The route attribute names a plugin the queue does not route to.
    #[error(
        "route attribute `{attribute}` holds `{value}`, which is not one of this queue's routes ({routes})"
    )]
    NotARoute {
        /// The queue's route attribute.
        attribute: String,
        /// What the message put there.
        value: String,
        /// The plugins it may name.
        routes: String,
    },
}

/// What a run's idempotency key is derived from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyBasis {
    /// The message as received: the plugin's key source reads its id, body and attributes.
    Message,
    /// The id the producer retries with, in place of the queue's message id: a plugin keyed by
    /// `message-id` (the default) is keyed by it; other key sources read the run's view.
    Id(String),
    /// This key, whatever the plugin's key source (a Celery task id: what makes two
    /// deliveries the same task).
    Fixed(String),
}

/// What a handler is given in place of the message's own body and attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct View {
    /// The body.
    pub(crate) body: Vec<u8>,
    /// The attributes.
    pub(crate) attributes: Vec<Attribute>,
}

/// Whether a run may run now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// It may.
    Now,
    /// Not yet: put back hidden for `wait`, using no attempt (a Celery task's eta).
    NotDue {
        /// The due time as the message wrote it.
        eta: String,
        /// How long to hide it.
        wait: Duration,
    },
    /// Never: acked without running (a Celery task past its expiry).
    Expired {
        /// The expiry as the message wrote it.
        expires: String,
    },
    /// Refused with this reason, once its route is known (a Celery task whose callbacks
    /// qhost will not send): dead-lettered.
    Refused(String),
}

/// Why a format's effects did not go ahead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EffectError {
    /// The plugin may not carry them out (a follow-up to a queue it may not send to): the run
    /// is refused before it starts, for good.
    #[error("{0}")]
    NotGranted(String),
    /// The result could not be written where a caller waits on it: the delivery backs off,
    /// and its next delivery finds the result pending and writes it again.
    #[error("{0}")]
    Unwritten(String),
}

/// A format's effects of one run: what commits with its completion besides the handler's own
/// outbox, carried out once the completion is committed, and again by a delivery that finds
/// them still pending.
#[async_trait]
pub(crate) trait Effects: Send + Sync + std::fmt::Debug {
    /// Why `plugin` may not carry these effects out (a follow-up to a queue it may not send
    /// to): the run is then refused before it starts.
    fn check(&self, plugin: &Plugin) -> Result<(), EffectError> {
        let _ = plugin;
        Ok(())
    }

    /// At an ack: the outbox to commit (the handler's `outbox`, which may gain the format's own
    /// messages, each keyed by its place under `plugin` and `key`) and the result value to
    /// commit with it, from the handler's `result`.
    fn on_ack(
        &self,
        outbox: Vec<Outgoing>,
        plugin: &str,
        key: &str,
        result: Option<String>,
    ) -> (Vec<Outgoing>, Option<String>);

    /// Writes a committed result `value` where a caller waits on it, before the outbox is sent.
    async fn write_result(&self, value: &str) -> Result<(), EffectError>;

    /// The message was given up after running, with `reason`: what to write where a caller
    /// waits (best effort, run in the background), if anything.
    fn gave_up(&self, reason: &str) -> Option<BoxFuture<'static, ()>>;
}

/// The formats of a host's queues, with what they share (Celery's result backend).
#[derive(Debug, Default)]
pub(crate) struct Formats {
    celery: celery::Shared,
}

impl Formats {
    /// The formats `config` names, sharing one connection to each backend they write to.
    pub(crate) fn open(config: &Config) -> Formats {
        Formats {
            celery: celery::Shared::open(config),
        }
    }

    /// The format of `queue`.
    pub(crate) fn for_queue(&self, queue: &QueueConfig) -> Arc<dyn Format> {
        match &queue.format {
            MessageFormat::Qhost { route_attribute } => {
                Arc::new(qhost::Qhost::new(route_attribute.clone()))
            }
            MessageFormat::Celery { accept } => {
                Arc::new(self.celery.format(&queue.name, accept.clone()))
            }
            MessageFormat::Sns => Arc::new(sns::Sns),
            MessageFormat::EventBridge => Arc::new(eventbridge::EventBridge),
            MessageFormat::S3 => Arc::new(s3::S3),
        }
    }
}

/// `attributes` with `name` set to the string `value`, when there is one.
fn push_text(attributes: &mut Vec<Attribute>, name: &str, value: Option<&str>) {
    if let Some(value) = value {
        attributes.push(Attribute::string(name, value));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::message::{Attribute, Received};

    /// A message received with `body`.
    pub(crate) fn received(body: &str) -> Received {
        Received {
            id: "sqs-id".into(),
            handle: "r".into(),
            queue: "q".into(),
            body: body.as_bytes().to_vec(),
            attributes: Vec::new(),
            delivery_count: 1,
            sent_at_ms: 0,
            group_id: None,
            malformed: None,
        }
    }

    /// The text of attribute `name`.
    pub(crate) fn attribute_text(attributes: &[Attribute], name: &str) -> Option<String> {
        crate::message::find_attribute(attributes, name)
            .and_then(Attribute::text)
            .map(str::to_string)
    }

    /// What a format cannot read comes back as what it is: Celery's decode error as itself (a
    /// caller can tell a pickle apart), an envelope's as its reason; either is the text a
    /// dead letter carries.
    #[test]
    fn an_unreadable_message_says_what_it_is_not() {
        use super::{Formats, Unreadable};
        use crate::celery::DecodeError;
        use crate::celery::fixtures::{kombu, v2_headers};
        use crate::config::Config;
        let config = Config::parse(
            "[[queue]]\nname = \"c\"\nplugin = \"p\"\nformat = \"celery\"\n[[queue]]\nname = \"s\"\nplugin = \"p\"\nformat = \"sns\"\n",
        )
        .unwrap();
        let formats = Formats::default();
        let celery = formats.for_queue(&config.queues[0]);
        let pickled = kombu(
            v2_headers("t", "id"),
            "application/x-python-serialize",
            b"x",
        );
        let msg = received(&String::from_utf8_lossy(&pickled));
        let error = celery.read(&msg, &msg.body, &[]).unwrap_err();
        assert_eq!(error, Unreadable::Celery(DecodeError::Pickle));
        assert!(error.to_string().contains("(pickle) is refused"), "{error}");
        let sns = formats.for_queue(&config.queues[1]);
        let msg = received("{}");
        let error = sns.read(&msg, &msg.body, &[]).unwrap_err();
        assert!(
            matches!(&error, Unreadable::Envelope(why) if why.starts_with("not an SNS notification")),
            "{error:?}"
        );
    }
}
