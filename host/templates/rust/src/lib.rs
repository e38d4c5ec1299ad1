//! {{name}}: a qhost handler. qhost leases the message's idempotency key before this runs and
//! remembers it once this acks, so a duplicate delivery never reaches it twice.

use qhost_guest::{Handler, Message, Outcome, log};

struct App;

impl Handler for App {
    fn handle(msg: Message) -> Outcome {
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
}

qhost_guest::export!(App);
