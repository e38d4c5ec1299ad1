//! Tallies orders, many per call: a batch handler (`handle-batch`).
//!
//! Each message is an order, `{"customer": "c-17", "cents": 1250}`. For each, in its own
//! turn (`batch::each` selects it), the handler adds to two counters in its `tally` bucket —
//! `orders`, and `cents/CUSTOMER` — and, when `tallied-queue` is configured, sends one
//! `{"customer", "cents", "key"}` message there. Each order's writes and message commit with
//! that order's completion alone: an order that is retried or rejected adds nothing, and one
//! delivered twice adds once.
//!
//! An order may carry a place in a sequence, `"group"` and `"seq"` (0, 1, 2, …): the handler
//! keeps each group's next number in state (`next/GROUP`) and rejects an order that comes out
//! of turn, so a FIFO queue's order is checked where it matters, in what was committed.
//!
//! For tests and demos an order may also carry `"sleep-ms"` (the call sleeps for the longest
//! asked, as a slow bulk write would) and `"fail"`: `"retry"` asks for a retry on the order's
//! first delivery, `"reject"` rejects it, and `"panic"` panics, which fails the whole call
//! (every order in it is retried, then each alone, so only the panicking one reaches the
//! dead-letter queue).

use qhost_guest::{BatchHandler, Message, Outcome, batch, config, log, outbox, state};
use serde::Deserialize;

/// One order.
#[derive(Deserialize)]
struct Order {
    customer: String,
    cents: u64,
    #[serde(default)]
    fail: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default, rename = "sleep-ms")]
    sleep_ms: u64,
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
        let nap = (msgs.iter())
            .filter_map(|m| serde_json::from_slice::<Order>(&m.body).ok())
            .map(|o| o.sleep_ms)
            .max()
            .unwrap_or(0);
        if nap > 0 {
            std::thread::sleep(std::time::Duration::from_millis(nap));
        }
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
        Some("retry") if msg.receive_count == 1 => return Outcome::Retry(0),
        Some("reject") => return Outcome::reject(format!("order {} refused", msg.idempotency_key)),
        Some("panic") => panic!("order {} cannot be tallied", msg.idempotency_key),
        _ => {}
    }
    if let (Some(group), Some(seq)) = (&order.group, order.seq)
        && let Err(outcome) = in_turn(tally, group, seq)
    {
        return outcome;
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

/// Takes `seq`'s turn in `group`: it must be the group's next number.
fn in_turn(tally: &state::Bucket, group: &str, seq: u64) -> Result<(), Outcome> {
    let key = format!("next/{group}");
    let next = match tally.get_text(&key) {
        Ok(next) => next.and_then(|n| n.parse::<u64>().ok()).unwrap_or(0),
        Err(e) => return Err(Outcome::reject(format!("cannot read {key}: {e}"))),
    };
    if seq != next {
        return Err(Outcome::reject(format!(
            "order {seq} of group {group} came out of turn: {next} was next"
        )));
    }
    (tally.set(&key, (seq + 1).to_string()))
        .map_err(|e| Outcome::reject(format!("cannot write {key}: {e}")))
}

qhost_guest::export_batch!(Tally);
