//! Outbox stamping: what qhost adds to each message a handler asks to send, so that a copy
//! re-sent after a crash is recognisable downstream ([`wire::stamp`]).

use crate::message::Outgoing;
use crate::message::wire;
use crate::plugin::Plugin;

/// Stamps each outbox message with its derived key (`PLUGIN:KEY/INDEX`) and the producing
/// plugin's name and version. A wasm plugin's outbox is stamped as the handler sends (so it is
/// checked as it will travel); stamping again here gives the same result, and covers any
/// other handler.
pub(crate) fn stamp(key: &str, producer: &Plugin, mut outbox: Vec<Outgoing>) -> Vec<Outgoing> {
    if outbox.is_empty() {
        return outbox; // most handlers send nothing: no per-message allocation for them
    }
    let produced_by = format!("{}@{}", producer.name, producer.version);
    for (i, m) in outbox.iter_mut().enumerate() {
        wire::stamp(m, &wire::derived_key(&producer.name, key, i), &produced_by);
    }
    outbox
}
