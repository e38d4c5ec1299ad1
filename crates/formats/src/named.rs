//! The formats by name: what a queue's `format` says, and the [`Format`] each name reads with.

use std::sync::Arc;

use qhost_message::rules::Envelope;

use qhost_celery::ContentType;
use qhost_redis_link::RedisDeadlines;

use crate::format::Format;
use crate::results::CeleryResults;
use crate::{celery, eventbridge, qhost, s3, sns};

/// The formats qhost reads, as `format` names them.
pub const FORMATS: [&str; 5] = ["qhost", "celery", "sns", "eventbridge", "s3"];

/// How a queue's messages are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageFormat {
    /// qhost's own: the body as it is (the default).
    Qhost {
        /// A message attribute that may name a route.
        route_attribute: Option<String>,
    },
    /// Celery's task messages, as kombu's transports send them.
    Celery {
        /// The serializers read (`accept-content`): JSON only unless the queue says otherwise,
        /// as in Celery.
        accept: Vec<ContentType>,
    },
    /// SNS notifications (a topic's SQS subscription without raw delivery).
    Sns,
    /// EventBridge events (a rule's SQS target).
    EventBridge,
    /// S3 event notifications, bare or inside an SNS notification.
    S3,
}

impl MessageFormat {
    /// The format `name` names, with its defaults (Celery's: JSON and msgpack read, as
    /// `qhost inspect` reads a message without a queue), or why there is none.
    pub fn named(name: &str) -> Result<MessageFormat, String> {
        Ok(match name {
            "qhost" => MessageFormat::Qhost {
                route_attribute: None,
            },
            "celery" => MessageFormat::Celery {
                accept: vec![ContentType::Json, ContentType::Msgpack],
            },
            "sns" => MessageFormat::Sns,
            "eventbridge" => MessageFormat::EventBridge,
            "s3" => MessageFormat::S3,
            other => {
                return Err(format!(
                    "`{other}` is not a message format qhost reads ({})",
                    FORMATS.join(", ")
                ));
            }
        })
    }

    /// The format's name, as `format` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            MessageFormat::Qhost { .. } => "qhost",
            MessageFormat::Celery { .. } => "celery",
            MessageFormat::Sns => "sns",
            MessageFormat::EventBridge => "eventbridge",
            MessageFormat::S3 => "s3",
        }
    }
}

/// The formats of a host's queues, with what they share (Celery's result backend).
#[derive(Debug, Default)]
pub struct Formats {
    celery: celery::Shared,
}

impl Formats {
    /// The formats of a host whose Celery results go to `results` (none: no records are
    /// written), sharing one connection to it, reached within `deadlines`, and whose Celery
    /// follow-ups are laid out as `envelope` says (the broker's Celery producers' way).
    pub fn open(
        results: Option<&CeleryResults>,
        deadlines: RedisDeadlines,
        envelope: Envelope,
    ) -> Formats {
        Formats {
            celery: celery::Shared::open(results, deadlines, envelope),
        }
    }

    /// The format of queue `queue`, which `format` names.
    pub fn for_queue(&self, queue: &str, format: &MessageFormat) -> Arc<dyn Format> {
        match format {
            MessageFormat::Qhost { route_attribute } => {
                Arc::new(qhost::Qhost::new(route_attribute.clone()))
            }
            MessageFormat::Celery { accept } => Arc::new(self.celery.format(queue, accept.clone())),
            MessageFormat::Sns => Arc::new(sns::Sns),
            MessageFormat::EventBridge => Arc::new(eventbridge::EventBridge),
            MessageFormat::S3 => Arc::new(s3::S3),
        }
    }
}
