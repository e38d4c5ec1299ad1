//! Acks every message of a batch, selecting each as a real batch handler does before making
//! its effects: what a batch call costs the host beyond the handler's own work.

use qhost_guest::{BatchHandler, Message, Outcome, batch};

struct AckAll;

impl BatchHandler for AckAll {
    fn handle_batch(msgs: Vec<Message>) -> Vec<Outcome> {
        batch::each(msgs).map(|_| Outcome::Ack).collect()
    }
}

qhost_guest::export_batch!(AckAll);
