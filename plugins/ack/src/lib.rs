//! The smallest handler: it acks every message and does nothing else.
//!
//! The benches run it where they measure what the host adds per message (receive, lease, a
//! fresh instance, the call, the slot's reset, complete, delete): its instance imports only
//! what the guest SDK and the standard library need. The test fixture (`plugins/fixtures`)
//! imports 136 functions to its 19 (sockets, HTTP, state) for its test behaviours,
//! and a fresh instance's cost grows with the functions it imports.

use qhost_guest::{Handler, Message, Outcome};

struct Ack;

impl Handler for Ack {
    fn handle(_msg: Message) -> Outcome {
        Outcome::Ack
    }
}

qhost_guest::export!(Ack);
