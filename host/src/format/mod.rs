//! The format step in the host: the formats are the `qhost-formats` crate's; what needs the
//! host's configuration, plugins and key derivation stays here.
//!
//! - [`open`]: the formats of a host's configuration, and each queue's;
//! - [`key_of`]: the key a run is leased under by its plugin's manifest;
//! - the plugin's grants as a format's effects are checked against them ([`Grants`] for
//!   [`Plugin`]);
//! - `inspect`: what qhost reads from a message, for `qhost inspect` and `qhost check`;
//! - the formats' fates through the host's pipeline (`fates`, `celery_fates`, tests).

#[cfg(test)]
mod celery_fates;
#[cfg(test)]
mod fates;
pub(crate) mod inspect;

use std::sync::Arc;

pub(crate) use qhost_formats::{
    Admit, EffectError, Effects, Format, Formats, Grants, KeyBasis, Route, Run, Unrouted, View,
};

use crate::config::{Config, QueueConfig};
use crate::idempotency::key::KeyInput;
use crate::message::Received;
use crate::plugin::Plugin;
use crate::plugin::manifest::Manifest;

/// The formats `config` names, sharing one connection to each backend they write to.
pub(crate) fn open(config: &Config) -> Formats {
    Formats::open(
        config.celery_results.as_ref(),
        config.deadlines.redis,
        config.source.envelope(),
    )
}

/// The format of `queue` among `formats`.
pub(crate) fn for_queue(formats: &Formats, queue: &QueueConfig) -> Arc<dyn Format> {
    formats.for_queue(&queue.name, &queue.format)
}

impl Grants for Plugin {
    fn plugin(&self) -> &str {
        &self.name
    }

    fn may_send_celery(&self, queue: &str) -> bool {
        self.manifest.outbox.is_celery(queue)
    }
}

/// The key `run` of `msg` is leased under by `manifest`'s key source (the default without
/// one), as the host derives it, or why it has none.
pub(crate) fn key_of(
    run: &Run,
    msg: &Received,
    manifest: Option<&Manifest>,
) -> Result<String, String> {
    let default = Manifest::default();
    let policy = &manifest.unwrap_or(&default).idempotency;
    let (body, attributes) = run.view_of(msg);
    let input = |id| KeyInput {
        id,
        body: &body,
        attributes: &attributes,
        sha256: None,
    };
    let key = match &run.key {
        KeyBasis::Fixed(key) => return Ok(key.clone()),
        KeyBasis::Id(id) => policy.key.derive_or(input(id), policy.on_missing),
        // The message as received, whose own key (a message qhost sent) the host honours.
        KeyBasis::Message => policy.key.derive_for_run(input(&msg.id), policy.on_missing),
    };
    key.map_err(|e| e.to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::message::Received;

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
}
