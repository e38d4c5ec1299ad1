//! Batch handlers: one call for many messages, each message's effects its own.
//!
//! A batch handler implements [`BatchHandler`](crate::BatchHandler) and is exported with
//! [`export_batch!`](crate::export_batch). The host gathers messages for it (up to its
//! manifest's `batch.max-messages`, waiting at most `batch.max-wait-ms`), each leased on its
//! own key, and calls it once; it returns one [`Outcome`] per message, in order, and each
//! message then ends on its own: acked, retried or dead-lettered.
//!
//! What a handler does *for* a message — outbox sends, state reads and writes, its result
//! value, the idempotency keys of its HTTP requests — must be made while that message is
//! selected, so that it commits with that message alone. [`each`] selects each message in
//! turn as it hands it over:
//!
//! ```ignore
//! use qhost_guest::{BatchHandler, Message, Outcome, batch};
//!
//! struct Tally;
//!
//! impl BatchHandler for Tally {
//!     fn handle_batch(msgs: Vec<Message>) -> Vec<Outcome> {
//!         batch::each(msgs).map(|msg| {
//!             // state and outbox calls here are this message's
//!             Outcome::Ack
//!         }).collect()
//!     }
//! }
//!
//! qhost_guest::export_batch!(Tally);
//! ```
//!
//! A panic fails the whole call: every message in it is retried, each then alone, so one
//! message that panics every time reaches the dead-letter queue by itself.

use crate::Message;
use crate::batch_bindings::qhost::handler::batch_item;

/// Selects message `index` of the batch (0-based, as given): the effects that follow are its.
/// Fails on an index past the batch's end.
pub fn select(index: usize) -> Result<(), String> {
    let index = u32::try_from(index).map_err(|_| format!("no message {index}"))?;
    batch_item::select(index)
}

/// The batch's messages in order, each selected as it is handed over: what the handler does
/// between taking a message and taking the next is that message's.
pub fn each(msgs: Vec<Message>) -> impl Iterator<Item = Message> {
    msgs.into_iter().enumerate().map(|(i, msg)| {
        // Only an index past the end fails, and `i` is within the batch the host gave.
        let _ = select(i);
        msg
    })
}
