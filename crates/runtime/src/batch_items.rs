//! A batch call's messages, and which one the guest's effects are for.
//!
//! A batch handler makes its effects for one message at a time: it selects a message
//! (`batch-item.select`), and until it selects another, what it sends through the outbox, the
//! result value it sets, the state it reads and writes and the idempotency keys its HTTP
//! requests carry are that message's. Each message's effects are kept apart here, so that each
//! commits with its own message's completion, and only if that message's outcome is `ack`: a
//! message that retries drops its own writes and nobody else's.
//!
//! The selected message's effects live where a one-message call keeps its own (the host
//! state's outbox, result and run state); selecting another sets them aside here and brings
//! the other's back. Before the first selection there is no current message: effects that
//! must belong to one are refused ([`NOT_SELECTED`]).

use crate::kv::run::{RunPart, RunState};
use qhost_message::Outgoing;
use qhost_store::commit::StateCommit;

/// What a guest is told when it makes an effect before selecting a message.
pub(crate) const NOT_SELECTED: &str =
    "in a batch, select the message this is for first (batch-item.select)";

/// Who one message of the call is.
#[derive(Clone, Debug)]
pub struct ItemCtx {
    /// The queue's message id.
    pub message_id: String,
    /// Its idempotency key.
    pub key: String,
    /// Its lease's fencing token.
    pub fencing_token: u64,
}

/// One message's effects while another is selected.
#[derive(Debug, Default)]
struct SetAside {
    outbox: Vec<Outgoing>,
    result: Option<String>,
    kv: RunPart,
    http_made: u32,
}

/// The selected message's effects, where the host state keeps them.
pub(crate) struct Current<'a> {
    /// Its outbox.
    pub outbox: &'a mut Vec<Outgoing>,
    /// Its result value.
    pub result: &'a mut Option<String>,
    /// The call's view of state, holding the selected message's reads and writes.
    pub kv: &'a mut RunState,
    /// HTTP requests it has made (the `N` of its requests' keys).
    pub http_made: &'a mut u32,
}

/// One message's effects at the end of the call.
#[derive(Debug)]
pub struct ItemEffects {
    /// Its outbox.
    pub outbox: Vec<Outgoing>,
    /// Its result value.
    pub result: Option<String>,
    /// Its reads and writes, to commit with its completion.
    pub state: StateCommit,
}

/// The messages of one batch call and the one selected.
#[derive(Debug)]
pub(crate) struct BatchItems {
    items: Vec<ItemCtx>,
    aside: Vec<SetAside>,
    selected: Option<usize>,
}

impl BatchItems {
    /// The call's messages, none selected.
    pub(crate) fn new(items: Vec<ItemCtx>) -> Self {
        let aside = items.iter().map(|_| SetAside::default()).collect();
        BatchItems {
            items,
            aside,
            selected: None,
        }
    }

    /// Whether a message is selected.
    pub(crate) fn has_selection(&self) -> bool {
        self.selected.is_some()
    }

    /// The key HTTP requests made before any selection carry: the same messages make the
    /// same key, in any order.
    pub(crate) fn call_key(&self) -> String {
        let mut keys: Vec<&str> = self.items.iter().map(|i| i.key.as_str()).collect();
        keys.sort_unstable();
        let digest = qhost_message::digest::sha256_hex(keys.join("\n").as_bytes());
        format!("batch-{}", &digest[..32])
    }

    /// The highest fencing token among the call's messages.
    pub(crate) fn call_token(&self) -> u64 {
        self.items
            .iter()
            .map(|i| i.fencing_token)
            .max()
            .unwrap_or(0)
    }

    /// Selects message `index`: the current effects are set aside as the selected message's,
    /// and `index`'s are brought back. Its context, for the caller to run it under.
    pub(crate) fn select(
        &mut self,
        index: u32,
        mut current: Current<'_>,
    ) -> Result<&ItemCtx, String> {
        let index = index as usize;
        if index >= self.items.len() {
            return Err(format!(
                "there is no message {index} in a batch of {}",
                self.items.len()
            ));
        }
        if self.selected != Some(index) {
            if let Some(was) = self.selected {
                swap(&mut self.aside[was], &mut current);
            } else {
                // Nothing was selected, so nothing current belongs to anyone: start clean.
                current.outbox.clear();
                *current.result = None;
                *current.http_made = 0;
            }
            swap(&mut self.aside[index], &mut current);
            self.selected = Some(index);
        }
        Ok(&self.items[index])
    }

    /// Ends the call: every message's effects, in the call's order.
    pub(crate) fn finish(mut self, mut current: Current<'_>) -> Vec<ItemEffects> {
        if let Some(was) = self.selected {
            swap(&mut self.aside[was], &mut current);
        }
        // The view now holds reads and writes of no message; each message's are swapped in
        // and taken in turn.
        let kv = current.kv;
        self.aside
            .into_iter()
            .map(|mut aside| {
                kv.swap_part(&mut aside.kv);
                ItemEffects {
                    outbox: aside.outbox,
                    result: aside.result,
                    state: kv.take(),
                }
            })
            .collect()
    }
}

/// Exchanges a set-aside message's effects with the current ones.
fn swap(aside: &mut SetAside, current: &mut Current<'_>) {
    std::mem::swap(&mut aside.outbox, current.outbox);
    std::mem::swap(&mut aside.result, current.result);
    current.kv.swap_part(&mut aside.kv);
    std::mem::swap(&mut aside.http_made, current.http_made);
}
