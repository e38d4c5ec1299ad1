//! Celery's task messages: the protocol (kombu's envelope, content types, task protocols 1 and
//! 2, the tasks a handler sends, callbacks and chains) is the `qhost-celery` crate's, named here
//! under the path the host's code has always used, and its format with the result records is
//! `qhost-formats`'. What needs the host's configuration stays here: `qhost check`'s reading of
//! a queue's sample messages ([`inspect`]).

pub(crate) mod inspect;

#[cfg(test)]
pub(crate) use qhost_celery::fixtures;
pub(crate) use qhost_celery::{ContentType, decode, send};
