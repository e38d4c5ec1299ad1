//! {{name}}: a qhost batch handler. qhost gathers messages for it (up to its manifest's
//! `batch.max-messages`), leases each one's idempotency key before this runs and remembers each
//! that acks, so a duplicate delivery never reaches it twice. It returns one outcome per
//! message, in order; each message then ends on its own (acked, retried, dead-lettered).

use qhost_guest::{BatchHandler, Message, Outcome, batch, log};

struct App;

impl BatchHandler for App {
    fn handle_batch(msgs: Vec<Message>) -> Vec<Outcome> {
        log::info(&format!("{{name}} got {} messages", msgs.len()));
        // Each message selected in turn: what follows is its own, and its outbox, state and
        // result commit with it alone.
        batch::each(msgs).map(|msg| handle_one(&msg)).collect()
    }
}

fn handle_one(msg: &Message) -> Outcome {
    let Ok(body) = msg.body_str() else {
        // Never retried: dead-lettered at once with this reason.
        return Outcome::reject("the body is not UTF-8");
    };
    log::info(&format!(
        "{{name}} handled `{body}` (key {})",
        msg.idempotency_key
    ));
    Outcome::Ack
}

qhost_guest::export_batch!(App);
