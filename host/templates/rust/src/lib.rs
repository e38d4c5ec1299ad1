//! {{name}}: a qhost handler. qhost leases the message's idempotency key before this runs and
//! remembers it once this acks, so a duplicate delivery never reaches it twice.

wit_bindgen::generate!({ path: "wit", world: "handler" });

use qhost::handler::log::{self, Level};

struct Handler;

impl Guest for Handler {
    fn handle(msg: Message) -> Outcome {
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
}

export!(Handler);
