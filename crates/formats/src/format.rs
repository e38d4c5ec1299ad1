//! The one thing every format does: read a received message into its runs, or say why it
//! cannot.

use qhost_message::{Attribute, Received};

use crate::run::Run;

/// Why a message is not what its queue's format says it is. It is dead-lettered with this as
/// its reason: no other delivery of it reads differently.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    /// A Celery message kombu's rules do not decode (a pickle, a content type not accepted, a
    /// body or header that is not a task).
    #[error(transparent)]
    Celery(#[from] qhost_celery::DecodeError),
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
pub trait Format: Send + Sync + std::fmt::Debug {
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
