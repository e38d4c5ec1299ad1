//! Before a lease: which plugin handles a message, and what key it is leased under.

use std::sync::Arc;

use crate::handler::Plugin;
use crate::idempotency::key::{KeySource, scoped};
use crate::message::{Received, find_attribute};
use crate::runtime::loader::valid_plugin_name;

use super::{QueueCtx, Shared};

/// The attribute outbox messages carry: `PARENT-KEY/INDEX`. A qhost consumer keyed by message
/// id uses it as the key instead, so a copy re-sent after a crash is dropped downstream.
pub const OUTBOX_KEY_ATTRIBUTE: &str = "qhost-idempotency-key";

/// A message ready for a lease.
#[derive(Debug)]
pub struct Prepared {
    /// The delivery.
    pub msg: Received,
    /// Its plugin.
    pub plugin: Arc<Plugin>,
    /// The key as the handler sees it.
    pub key: String,
    /// The key as the store holds it.
    pub scoped_key: String,
}

/// Why a message cannot be leased.
#[derive(Debug)]
pub enum Unroutable {
    /// No plugin of that name is loaded (yet): retried, then dead-lettered.
    NoPlugin {
        /// The delivery.
        msg: Received,
        /// The plugin it routes to.
        plugin: String,
    },
    /// Dead-letter at once with this reason.
    Poison {
        /// The delivery.
        msg: Received,
        /// The plugin it routes to, or the queue's own.
        plugin: String,
        /// Why.
        reason: String,
    },
}

/// Routes a message and derives its key.
pub fn prepare(
    shared: &Shared,
    queue: &QueueCtx,
    msg: Received,
) -> Result<Prepared, Box<Unroutable>> {
    let name = match route(queue, &msg) {
        Ok(name) => name,
        Err(reason) => {
            let plugin = queue.config.plugin.clone();
            return Err(Box::new(Unroutable::Poison {
                msg,
                plugin,
                reason,
            }));
        }
    };
    let Some(plugin) = shared.registry.get(&name) else {
        return Err(Box::new(Unroutable::NoPlugin { msg, plugin: name }));
    };
    let policy = &plugin.manifest.idempotency;
    let key = match derive_key(&policy.key, &msg, policy.on_missing) {
        Ok(key) => key,
        Err(reason) => {
            return Err(Box::new(Unroutable::Poison {
                msg,
                plugin: name,
                reason,
            }));
        }
    };
    let scoped_key = scoped(&shared.config.namespace, &plugin.name, &key);
    Ok(Prepared {
        msg,
        plugin,
        key,
        scoped_key,
    })
}

/// The plugin name for a message: the queue's, or a valid name from its route attribute.
fn route(queue: &QueueCtx, msg: &Received) -> Result<String, String> {
    let Some(attribute) = &queue.config.route_attribute else {
        return Ok(queue.config.plugin.clone());
    };
    match find_attribute(&msg.attributes, attribute).and_then(|a| a.text()) {
        None => Ok(queue.config.plugin.clone()),
        Some(name) if valid_plugin_name(name) => Ok(name.to_string()),
        Some(name) => Err(format!(
            "route attribute `{attribute}` holds `{name}`, which is not a plugin name"
        )),
    }
}

fn derive_key(
    source: &KeySource,
    msg: &Received,
    on_missing: crate::idempotency::key::OnMissingKey,
) -> Result<String, String> {
    if *source == KeySource::MessageId
        && let Some(key) =
            find_attribute(&msg.attributes, OUTBOX_KEY_ATTRIBUTE).and_then(|a| a.text())
    {
        return Ok(key.to_string());
    }
    source.derive_or(msg, on_missing).map_err(|e| e.to_string())
}
