//! {{name}}: a qhost batch handler. qhost gathers messages for it (up to its manifest's
//! `batch.max-messages`), leases each one's idempotency key before this runs and remembers each
//! that acks, so a duplicate delivery never reaches it twice. It returns one outcome per
//! message, in order; each message then ends on its own (acked, retried, dead-lettered).

wit_bindgen::generate!({ path: "wit", world: "batch-handler" });

use qhost::handler::batch_item;
use qhost::handler::log::{self, Level};

struct Handler;

impl Guest for Handler {
    fn handle_batch(msgs: Vec<Message>) -> Vec<Outcome> {
        log::write(Level::Info, &format!("{{name}} got {} messages", msgs.len()));
        let mut outcomes = Vec::with_capacity(msgs.len());
        for (i, msg) in msgs.into_iter().enumerate() {
            // What follows is this message's: its outbox, state and result commit with it alone.
            let _ = batch_item::select(i as u32);
            outcomes.push(handle_one(msg));
        }
        outcomes
    }
}

fn handle_one(msg: Message) -> Outcome {
    let Ok(body) = String::from_utf8(msg.body) else {
        // Never retried: dead-lettered at once with this reason.
        return Outcome::Reject("the body is not UTF-8".into());
    };
    log::write(
        Level::Info,
        &format!("{{name}} handled `{body}` (key {})", msg.idempotency_key),
    );
    Outcome::Ack
}

export!(Handler);
