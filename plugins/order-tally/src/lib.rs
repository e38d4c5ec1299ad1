//! Tallies orders, many per call: a batch handler (`handle-batch`).
//!
//! Each message is an order, `{"customer": "c-17", "cents": 1250}`. For each, in its own
//! turn (`batch::each` selects it), the handler adds to two counters in its `tally` bucket —
//! `orders`, and `cents/CUSTOMER` — and, when `tallied-queue` is configured, sends one
//! `{"customer", "cents", "key"}` message there. Each order's writes and message commit with
//! that order's completion alone: an order that is retried or rejected adds nothing, and one
//! delivered twice adds once.
//!
//! For tests and demos an order may carry `"fail"`: `"retry"` asks for a retry, `"reject"`
//! rejects it, and `"panic"` panics, which fails the whole call (every order in it is retried,
//! then each alone, so only the panicking one reaches the dead-letter queue).

use qhost_guest::{BatchHandler, Message, Outcome, batch, config, log, outbox, state};
use serde::Deserialize;

/// One order.
#[derive(Deserialize)]
struct Order {
    customer: String,
    cents: u64,
    #[serde(default)]
    fail: Option<String>,
}

struct Tally;

impl BatchHandler for Tally {
    fn handle_batch(msgs: Vec<Message>) -> Vec<Outcome> {
        log::info(&format!("tallying {} orders", msgs.len()));
        let tally = match state::Bucket::open("tally") {
            Ok(bucket) => bucket,
            Err(e) => {
                return msgs
                    .iter()
                    .map(|_| Outcome::Retry(1))
                    .inspect(|_| log::warn(&e.to_string()))
                    .collect();
            }
        };
        let tallied = config::get("tallied-queue");
        batch::each(msgs)
            .map(|msg| tally_one(&tally, tallied.as_deref(), &msg))
            .collect()
    }
}

/// Tallies one order (selected): its outcome.
fn tally_one(tally: &state::Bucket, tallied: Option<&str>, msg: &Message) -> Outcome {
    let order: Order = match serde_json::from_slice(&msg.body) {
        Ok(order) => order,
        Err(e) => return Outcome::reject(format!("not an order: {e}")),
    };
    match order.fail.as_deref() {
        Some("retry") => return Outcome::Retry(0),
        Some("reject") => return Outcome::reject(format!("order {} refused", msg.idempotency_key)),
        Some("panic") => panic!("order {} cannot be tallied", msg.idempotency_key),
        _ => {}
    }
    let counted = tally
        .increment("orders", 1)
        .and_then(|_| tally.increment(&format!("cents/{}", order.customer), order.cents));
    if let Err(e) = counted {
        return Outcome::reject(format!("cannot count it: {e}"));
    }
    if let Some(queue) = tallied {
        let note = serde_json::json!({
            "customer": order.customer,
            "cents": order.cents,
            "key": msg.idempotency_key,
        });
        if let Err(e) = outbox::send(queue, note.to_string()) {
            return Outcome::reject(format!("cannot send to {queue}: {e}"));
        }
    }
    Outcome::Ack
}

qhost_guest::export_batch!(Tally);
