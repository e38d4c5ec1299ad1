//! Batch handlers through the real pipeline on in-memory parts: messages gathered into one
//! call, each ended by its own outcome, a failed call failing every message in it, and a
//! message that failed before called alone.

use std::sync::{Arc, Mutex};

use super::test_bed::{JOBS, OUT, TestBed};
use crate::handler::{Failure, HandlerMessage, Invocation, Invoke, Outcome, one_of};
use crate::idempotency::KeyStatus;
use crate::message::Outgoing;
use crate::message::find_attribute;
use crate::message::wire::DEAD_LETTER_REASON;

/// A native batch handler: a function from a batch of messages to one invocation each, in
/// order, which returns promptly (see the function impl of [`Invoke`]): these tests'
/// batch handlers.
struct BatchFn<F>(F);

impl<F> std::fmt::Debug for BatchFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchFn")
    }
}

#[async_trait::async_trait]
impl<F> Invoke for BatchFn<F>
where
    F: Fn(Vec<HandlerMessage>) -> Result<Vec<Invocation>, Failure> + Send + Sync + 'static,
{
    async fn invoke(&self, msg: HandlerMessage) -> Result<Invocation, Failure> {
        one_of(self.invoke_batch(vec![msg]).await)
    }

    fn is_batch(&self) -> bool {
        true
    }

    async fn invoke_batch(&self, msgs: Vec<HandlerMessage>) -> Result<Vec<Invocation>, Failure> {
        (self.0)(msgs)
    }
}

/// Keyed by the `job` attribute, may send to `out`, gives up after `attempts` runs.
fn manifest(attempts: u32) -> String {
    format!(
        "[idempotency]\nkey = \"attribute:job\"\n[outbox]\nqueues = [\"{OUT}\"]\n\
         [limits]\nmax-attempts = {attempts}\n[batch]\nmax-messages = 10\nmax-wait-ms = 50\n"
    )
}

/// The sizes of the calls a handler was given, in order.
type Calls = Arc<Mutex<Vec<usize>>>;

/// A batch handler answering each message by its body: `retry`, `reject`, or an ack that
/// sends `done BODY` to `out`; a body `poison` fails the whole call (as a trap would).
fn by_body(
    calls: &Calls,
) -> BatchFn<impl Fn(Vec<HandlerMessage>) -> Result<Vec<Invocation>, Failure> + use<>> {
    let calls = Arc::clone(calls);
    BatchFn(move |msgs: Vec<HandlerMessage>| {
        calls.lock().unwrap().push(msgs.len());
        if msgs.iter().any(|m| m.body == b"poison") {
            return Err(Failure::Trap("poisoned".into()));
        }
        Ok(msgs.iter().map(answer).collect())
    })
}

fn answer(msg: &HandlerMessage) -> Invocation {
    match msg.body.as_slice() {
        b"retry" => Invocation::new(Outcome::Retry(0)),
        b"reject" => Invocation::new(Outcome::Reject("no such order".into())),
        body => {
            let mut run = Invocation::new(Outcome::Ack);
            let out = format!("done {}", String::from_utf8_lossy(body));
            run.outbox.push(Outgoing::new(OUT, out));
            run
        }
    }
}

fn sizes(calls: &Calls) -> Vec<usize> {
    std::mem::take(&mut *calls.lock().unwrap())
}

fn bodies(msgs: &[crate::message::Received]) -> Vec<String> {
    let mut b: Vec<String> = msgs
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into())
        .collect();
    b.sort();
    b
}

#[tokio::test(start_paused = true)]
async fn one_call_for_the_received_messages_each_ending_by_its_own_outcome() {
    let calls = Calls::default();
    let bed = TestBed::new(&manifest(3), by_body(&calls));
    for (job, body) in [
        ("a", "a"),
        ("b", "b"),
        ("r", "retry"),
        ("x", "reject"),
        ("c", "c"),
    ] {
        bed.send(job, body).await;
    }
    assert_eq!(bed.deliver().await, 5);
    assert_eq!(sizes(&calls), [5], "one call for all five");

    let out = bed.contents(OUT).await;
    assert_eq!(
        bodies(&out),
        ["done a", "done b", "done c"],
        "only the acked ones' outboxes"
    );
    let c = bed.counts();
    assert_eq!(
        (c.acked, c.retried, c.dead_lettered, c.invoked),
        (3, 1, 1, 5)
    );
    assert_eq!(
        bed.status("a").await,
        KeyStatus::Completed { pending_outbox: 0 }
    );
    let dead = bed.contents(&bed.queue.config.dead_letter).await;
    let reason = dead
        .first()
        .and_then(|m| find_attribute(&m.attributes, DEAD_LETTER_REASON));
    assert_eq!(reason.and_then(|a| a.text()), Some("no such order"));

    // The retried one comes back alone: it has failed before.
    bed.source.reveal(JOBS).await;
    assert_eq!(bed.deliver().await, 1);
    assert_eq!(sizes(&calls), [1]);
    assert_eq!(
        bed.depth(JOBS).await.total(),
        1,
        "it asked again: kept, to come back"
    );
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_poisoned_call_fails_everyone_once_then_the_rest_run_without_it() {
    let calls = Calls::default();
    let bed = TestBed::new(&manifest(2), by_body(&calls));
    for job in ["a", "b", "c", "d"] {
        bed.send(job, job).await;
    }
    bed.send("p", "poison").await;
    assert_eq!(bed.deliver().await, 5);
    assert_eq!(sizes(&calls), [5]);
    let c = bed.counts();
    assert_eq!(
        (c.acked, c.retried, c.failures),
        (0, 5, 5),
        "every message failed once"
    );

    bed.source.reveal(JOBS).await;
    assert_eq!(bed.deliver().await, 5);
    assert_eq!(sizes(&calls), [1, 1, 1, 1, 1], "each alone this time");
    let c = bed.counts();
    assert_eq!(
        (c.acked, c.dead_lettered),
        (4, 1),
        "only the poison is dead-lettered"
    );
    assert_eq!(
        bodies(&bed.contents(OUT).await),
        ["done a", "done b", "done c", "done d"]
    );
    let dead = bed.contents(&bed.queue.config.dead_letter).await;
    assert_eq!(bodies(&dead), ["poison"]);
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_wrong_number_of_outcomes_fails_every_message_in_the_call() {
    let short = BatchFn(|msgs: Vec<HandlerMessage>| {
        Ok(msgs
            .iter()
            .skip(1)
            .map(|_| Invocation::new(Outcome::Ack))
            .collect())
    });
    let bed = TestBed::new(&manifest(3), short);
    bed.send("a", "a").await;
    bed.send("b", "b").await;
    bed.deliver().await;
    let c = bed.counts();
    assert_eq!((c.acked, c.retried, c.failures), (0, 2, 2));
    assert_eq!(bed.depth(JOBS).await.total(), 2, "both kept, to come back");
    bed.close().await;
}
