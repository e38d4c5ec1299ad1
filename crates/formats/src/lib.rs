//! The format step: how a queue's messages are read, between the source and routing.
//!
//! Most queue traffic does not arrive as a bare body. A Celery producer sends kombu's envelope,
//! an SNS topic its notification, an EventBridge rule its event, an S3 bucket its event
//! records. A queue's `format` ([`MessageFormat`]) names which, and its [`Format`] turns each
//! received message into the [`Run`]s the host routes, leases and runs:
//!
//! - the route ([`Route`]): the names the queue's routing table ([`Routes`]) is looked up by (a
//!   task name, a topic, a detail-type, an S3 event), or the route attribute's value for
//!   qhost's own messages;
//! - what the key is derived from ([`KeyBasis`]): the queue's message id, or the id the
//!   producer retries with (SNS's `MessageId`, an event's `id`, an S3 object's sequencer), or
//!   a key the format fixes whatever the plugin's manifest says (a Celery task id);
//! - what the handler is given ([`View`]): the unwrapped body and the format's attributes;
//! - whether it may run now ([`Admit`]): a Celery task not due yet, or past its expiry;
//! - the format's effects ([`Effects`]): what commits with the run's completion besides the
//!   handler's own outbox (Celery's result record and follow-up tasks), behind one trait, so
//!   the host commits and sends them without knowing which format made them.
//!
//! A message that is not what its format says is refused with why ([`Unreadable`]), and the
//! host dead-letters it; nothing is guessed at. A message may hold several runs (an S3
//! notification's records), each leased and decided on its own, or none (S3's test event),
//! which is acked.
//!
//! The crate knows messages ([`qhost_message`]) and Celery's protocol ([`qhost_celery`]), not
//! the broker they came from nor the host that runs them: what a run's plugin may do reaches
//! it as [`Grants`], and the idempotency key is derived by the host from the [`KeyBasis`].
//!
//! | module        | format                                                              |
//! |---------------|---------------------------------------------------------------------|
//! | `qhost`       | the body as it is; routed by a route attribute, if the queue has one |
//! | `celery`      | Celery's task messages (decoding in `qhost-celery`), with `results`  |
//! | `sns`         | SNS notifications                                                   |
//! | `eventbridge` | EventBridge events                                                  |
//! | `s3`          | S3 event notifications, bare or inside an SNS notification          |

mod celery;
mod effects;
mod eventbridge;
mod format;
mod named;
mod qhost;
mod results;
mod route;
mod run;
mod s3;
mod sns;
#[cfg(test)]
mod tests;

pub use effects::{EffectError, Effects, Grants};
pub use format::{Format, Unreadable};
pub use named::{FORMATS, Formats, MessageFormat};
pub use results::CeleryResults;
pub use route::{Route, Routes, Unrouted};
pub use run::{Admit, KeyBasis, Run, View};

use qhost_message::Attribute;

/// `attributes` with `name` set to the string `value`, when there is one.
fn push_text(attributes: &mut Vec<Attribute>, name: &str, value: Option<&str>) {
    if let Some(value) = value {
        attributes.push(Attribute::string(name, value));
    }
}
