//! The fate table of [`super::delivery`], row by row: what each ending does to the message, the
//! lease and the counts, through the real pipeline (routing, the batch's lease call, the
//! handler, the fate) on in-memory parts and tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use super::test_bed::{JOBS, OUT, TestBed};
use crate::handler::{Failure, HandlerMessage, Invocation, Invoke, Outcome};
use crate::idempotency::local::LocalStore;
use crate::idempotency::rate::{Admission, Rate};
use crate::idempotency::slots::{Slot, SlotRequest};
use crate::idempotency::{
    Acquired, Claimed, Claims, Committed, Completion, FleetRate, FlowSlots, IdempotencyError,
    IdempotencyStore, KeyStatus, Lease, LeaseRequest, LeasesAndSlots, Released, SharedRecords,
    StateReads, StoreResult,
};
use crate::message::wire::{DEAD_LETTER_REASON, IDEMPOTENCY_KEY};
use crate::message::{Outgoing, Received, find_attribute};

/// Keyed by the `job` attribute; may send to `out`; `attempts` runs before giving up.
fn manifest(attempts: u32) -> String {
    format!(
        "[idempotency]\nkey = \"attribute:job\"\n[outbox]\nqueues = [\"{OUT}\"]\n\
         [limits]\nmax-attempts = {attempts}\n"
    )
}

/// A handler that answers `outcome` and sends `done BODY` to `out` when it acks.
fn answering(outcome: Outcome) -> impl Invoke {
    move |msg: HandlerMessage| {
        let mut run = Invocation::new(outcome.clone());
        if outcome == Outcome::Ack {
            let body = format!("done {}", String::from_utf8_lossy(&msg.body));
            run.outbox.push(Outgoing::new(OUT, body));
        }
        Ok(run)
    }
}

fn attr<'a>(msg: &'a Received, name: &str) -> Option<&'a str> {
    find_attribute(&msg.attributes, name).and_then(|a| a.text())
}

/// A fresh lease request for `key`, as another worker would make it.
fn request(key: &str) -> LeaseRequest {
    LeaseRequest {
        key: key.to_string(),
        ttl: Duration::from_secs(60),
        window: Duration::from_secs(600),
    }
}

/// Leases `key` as another worker would; it must be granted.
pub(super) async fn grant(store: &LocalStore, key: &str) -> Lease {
    match store
        .acquire(&[request(key)])
        .await
        .expect("acquire")
        .remove(0)
    {
        Ok(Acquired::Granted(lease)) => lease,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Completes `job` with an outbox of one message to `out` that is never marked sent, as a
/// host that died between its commit and its send leaves it.
async fn completed_unsent(bed: &TestBed, job: &str) {
    let completion = Completion {
        lease: grant(&bed.local, &bed.scoped(job)).await,
        outbox: vec![Outgoing::new(OUT, "committed")],
        result: None,
        window: Duration::from_secs(600),
        digest: None,
        state: Default::default(),
    };
    assert_eq!(
        bed.local.complete(&[completion]).await,
        Ok(vec![Ok(Committed::Pending)])
    );
}

#[tokio::test(start_paused = true)]
async fn ack_commits_the_outbox_completes_the_key_and_deletes_the_message() {
    let bed = TestBed::new(&manifest(3), answering(Outcome::Ack));
    bed.send("j1", "a").await;
    assert_eq!(bed.deliver().await, 1);

    assert_eq!(bed.depth(JOBS).await.total(), 0, "deleted");
    let out = bed.contents(OUT).await;
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].body, b"done a");
    assert_eq!(attr(&out[0], IDEMPOTENCY_KEY), Some("p:j1/0"));
    assert_eq!(
        bed.status("j1").await,
        KeyStatus::Completed { pending_outbox: 0 },
        "completed, its outbox marked sent"
    );
    let c = bed.counts();
    assert_eq!(
        (c.received, c.invoked, c.acked, c.outbox_sent),
        (1, 1, 1, 1)
    );
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_of_completed_work_is_finished_without_running() {
    let bed = TestBed::new(&manifest(3), answering(Outcome::Ack));
    bed.send("j1", "a").await;
    bed.deliver().await;
    bed.send("j1", "a again").await;
    assert_eq!(bed.deliver().await, 1);

    assert_eq!(bed.depth(JOBS).await.total(), 0, "the duplicate is deleted");
    assert_eq!(bed.contents(OUT).await.len(), 1, "and sends nothing again");
    let c = bed.counts();
    assert_eq!((c.received, c.invoked, c.acked, c.duplicates), (2, 1, 1, 1));
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn finish_sends_an_outbox_committed_but_never_sent_then_deletes() {
    // Its commit an hour old: past the visibility timeout, a crash's leftover, not an outbox
    // its completer is still sending.
    let aged = Leases::Aged(Duration::from_secs(3600));
    let bed = TestBed::with_store(&manifest(3), answering(Outcome::Ack), |local| {
        Arc::new(Skewed(local, aged))
    });
    completed_unsent(&bed, "j1").await;
    bed.send("j1", "redelivered").await;
    bed.deliver().await;

    let out = bed.contents(OUT).await;
    assert_eq!(out.len(), 1, "the committed outbox is sent");
    assert_eq!(out[0].body, b"committed");
    assert_eq!(
        bed.depth(JOBS).await.total(),
        0,
        "then the message is deleted"
    );
    assert_eq!(bed.counts().invoked, 0, "without running the handler");
    assert_eq!(
        bed.status("j1").await,
        KeyStatus::Completed { pending_outbox: 0 }
    );
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn put_back_while_the_completer_may_still_be_sending_the_outbox() {
    let bed = TestBed::new(&manifest(3), answering(Outcome::Ack));
    completed_unsent(&bed, "j1").await;
    bed.send("j1", "redelivered").await;
    bed.deliver().await;

    assert_eq!(
        bed.contents(OUT).await.len(),
        0,
        "no second copy of a fresh outbox"
    );
    assert_eq!(bed.depth(JOBS).await.total(), 1, "looked at again later");
    let c = bed.counts();
    assert_eq!((c.invoked, c.busy, c.duplicates), (0, 1, 0));
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn put_back_while_another_worker_holds_the_key_leaves_its_lease_alone() {
    let bed = TestBed::new(&manifest(3), answering(Outcome::Ack));
    let theirs = grant(&bed.local, &bed.scoped("j1")).await;
    bed.send("j1", "a").await;
    bed.deliver().await;

    assert_eq!(bed.depth(JOBS).await.total(), 1, "still in the queue");
    let c = bed.counts();
    assert_eq!((c.invoked, c.busy, c.retried, c.failures), (0, 1, 0, 0));
    match bed.status("j1").await {
        KeyStatus::InProgress { owner, .. } => assert_eq!(owner, theirs.owner),
        other => panic!("the other worker's lease stands: {other:?}"),
    }
    // Given back unrun, the key's next grant has used up no attempt.
    bed.local
        .release(&theirs, Released::NotRun)
        .await
        .expect("released");
    assert_eq!(grant(&bed.local, &bed.scoped("j1")).await.failures, 0);
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn back_off_when_the_store_does_not_answer_runs_nothing_and_uses_no_attempt() {
    let bed = TestBed::with_store(&manifest(1), answering(Outcome::Ack), |local| {
        Arc::new(Skewed(local, Leases::Unanswered))
    });
    bed.send("j1", "a").await;
    bed.deliver().await;

    assert_eq!(bed.split(JOBS).await, (0, 1), "hidden until its retry");
    let c = bed.counts();
    assert_eq!((c.invoked, c.deferred, c.retried), (0, 1, 0));
    assert_eq!(bed.depth(&bed.queue.config.dead_letter).await.total(), 0);
    assert_eq!(
        bed.status("j1").await,
        KeyStatus::Unknown,
        "no lease was taken"
    );
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn retry_puts_the_message_back_hidden_and_counts_the_failed_run() {
    // Asked for by the handler, or a trap (counted as a failure too).
    type Handler = fn(HandlerMessage) -> Result<Invocation, Failure>;
    let failing: [(Handler, u64); 2] = [
        (|_| Ok(Invocation::new(Outcome::Retry(30))), 0),
        (|_| Err(Failure::Trap("boom".into())), 1),
    ];
    for (failing, trapped) in failing {
        let bed = TestBed::new(&manifest(3), failing);
        bed.send("j1", "a").await;
        bed.deliver().await;

        assert_eq!(bed.split(JOBS).await, (0, 1), "hidden for its delay");
        assert_eq!(bed.contents(OUT).await.len(), 0, "no outbox without an ack");
        let c = bed.counts();
        assert_eq!((c.invoked, c.retried, c.failures), (1, 1, trapped));
        let next = grant(&bed.local, &bed.scoped("j1")).await;
        assert_eq!(next.failures, 1, "released, one failed run counted");
        bed.close().await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_last_attempt_dead_letters_with_why_and_forgets_the_count() {
    let bed = TestBed::new(&manifest(1), answering(Outcome::Retry(30)));
    bed.send("j1", "a").await;
    bed.deliver().await;

    assert_eq!(bed.depth(JOBS).await.total(), 0, "deleted from its queue");
    let dead = bed.contents(&bed.queue.config.dead_letter).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].body, b"a");
    let reason = attr(&dead[0], DEAD_LETTER_REASON).expect("a reason");
    assert!(reason.contains("gave up after 1 attempt"), "{reason}");
    let c = bed.counts();
    assert_eq!((c.invoked, c.dead_lettered), (1, 1));
    let next = grant(&bed.local, &bed.scoped("j1")).await;
    assert_eq!(next.failures, 0, "a redriven copy starts afresh");
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn reject_dead_letters_at_once_with_the_handler_s_reason() {
    let bed = TestBed::new(
        &manifest(5),
        answering(Outcome::Reject("no such user".into())),
    );
    bed.send("j1", "a").await;
    bed.deliver().await;

    assert_eq!(bed.depth(JOBS).await.total(), 0);
    let dead = bed.contents(&bed.queue.config.dead_letter).await;
    assert_eq!(dead.len(), 1);
    let reason = attr(&dead[0], DEAD_LETTER_REASON).expect("a reason");
    assert!(reason.contains("no such user"), "{reason}");
    let c = bed.counts();
    assert_eq!((c.invoked, c.dead_lettered, c.retried), (1, 1, 0));
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn let_lapse_drops_a_result_reached_after_the_lease_passed_on() {
    let store = Arc::new(LocalStore::open(None).expect("a store"));
    let bed = TestBed::with_store(&manifest(3), Stealing(Arc::clone(&store)), {
        let store = Arc::clone(&store);
        move |_| store
    });
    bed.send("j1", "a").await;
    bed.deliver().await;

    assert_eq!(
        bed.contents(OUT).await.len(),
        0,
        "the dropped run sends nothing"
    );
    assert_eq!(
        bed.split(JOBS).await,
        (0, 1),
        "left to its visibility timeout"
    );
    let c = bed.counts();
    assert_eq!((c.invoked, c.acked, c.lost_leases), (1, 0, 1));
    match store.status(&bed.scoped("j1")).await.expect("a status") {
        KeyStatus::InProgress { fencing_token, .. } => assert_eq!(fencing_token, 2),
        other => panic!("the new owner's lease stands: {other:?}"),
    }
    bed.close().await;
}

/// A handler during whose run another worker takes the key over (the lease given up and
/// granted again), then acks.
struct Stealing(Arc<LocalStore>);

#[async_trait::async_trait]
impl Invoke for Stealing {
    async fn invoke(&self, msg: HandlerMessage) -> Result<Invocation, Failure> {
        let key = crate::idempotency::key::scoped("qhost", "p", &msg.idempotency_key);
        let KeyStatus::InProgress {
            owner,
            fencing_token,
        } = self.0.status(&key).await.expect("a status")
        else {
            panic!("the run holds the key");
        };
        let ours = Lease {
            key: key.clone(),
            owner,
            fencing_token,
            failures: 0,
            window: Duration::from_secs(600),
        };
        self.0
            .release(&ours, Released::NotRun)
            .await
            .expect("given up");
        grant(&self.0, &key).await;
        answering(Outcome::Ack).invoke(msg).await
    }
}

/// How [`Skewed`] answers lease requests.
#[derive(Clone, Copy, Debug)]
enum Leases {
    /// Never: each one times out, as a store that does not answer.
    Unanswered,
    /// As the embedded store does, with every pending outbox this much older (the store
    /// keeps the wall clock's time, which the paused test clock does not move).
    Aged(Duration),
}

/// The embedded store, its lease answers changed as [`Leases`] says.
#[derive(Debug)]
struct Skewed(Arc<LocalStore>, Leases);

#[async_trait::async_trait]
impl IdempotencyStore for Skewed {
    async fn acquire(&self, requests: &[LeaseRequest]) -> StoreResult<Vec<StoreResult<Acquired>>> {
        let age = match self.1 {
            Leases::Unanswered => {
                let timed_out = IdempotencyError::TimedOut("injected".into());
                return Ok(requests.iter().map(|_| Err(timed_out.clone())).collect());
            }
            Leases::Aged(age) => age,
        };
        let mut answers = self.0.acquire(requests).await?;
        for answer in &mut answers {
            if let Ok(Acquired::Completed { pending_for, .. }) = answer {
                *pending_for += age;
            }
        }
        Ok(answers)
    }
    async fn extend(&self, lease: &Lease, ttl: Duration) -> StoreResult<()> {
        self.0.extend(lease, ttl).await
    }
    async fn complete(&self, done: &[Completion]) -> StoreResult<Vec<StoreResult<Committed>>> {
        self.0.complete(done).await
    }
    async fn outbox_sent(&self, key: &str) -> StoreResult<()> {
        self.0.outbox_sent(key).await
    }
    async fn release(&self, lease: &Lease, why: Released) -> StoreResult<()> {
        self.0.release(lease, why).await
    }
    async fn ping(&self) -> StoreResult<()> {
        self.0.ping().await
    }
}

#[async_trait::async_trait]
impl FleetRate for Skewed {
    async fn admit(&self, key: &str, rate: Rate) -> StoreResult<Admission> {
        self.0.admit(key, rate).await
    }
}

#[async_trait::async_trait]
impl FlowSlots for Skewed {
    async fn acquire_with_slots(
        &self,
        leases: &[LeaseRequest],
        slots: &[SlotRequest],
    ) -> StoreResult<LeasesAndSlots> {
        self.0.acquire_with_slots(leases, slots).await
    }
    async fn extend_slot(&self, slot: &Slot, ttl: Duration) -> StoreResult<bool> {
        self.0.extend_slot(slot, ttl).await
    }
    async fn release_slots(&self, slots: &[Slot]) -> StoreResult<()> {
        self.0.release_slots(slots).await
    }
    async fn slots_held(&self, key: &str) -> StoreResult<u32> {
        self.0.slots_held(key).await
    }
}

#[async_trait::async_trait]
impl SharedRecords for Skewed {
    async fn record(&self, key: &str) -> StoreResult<Option<String>> {
        self.0.record(key).await
    }
    async fn swap_record(
        &self,
        key: &str,
        old: Option<&str>,
        new: &str,
        keep: Duration,
    ) -> StoreResult<bool> {
        self.0.swap_record(key, old, new, keep).await
    }
}

#[async_trait::async_trait]
impl Claims for Skewed {
    async fn claim(
        &self,
        key: &str,
        outbox: &[Outgoing],
        window: Duration,
    ) -> StoreResult<Claimed> {
        self.0.claim(key, outbox, window).await
    }
    async fn take_over(&self, key: &str, after: Duration) -> StoreResult<Option<Vec<Outgoing>>> {
        self.0.take_over(key, after).await
    }
    async fn status(&self, key: &str) -> StoreResult<KeyStatus> {
        Claims::status(self.0.as_ref(), key).await
    }
    async fn time(&self) -> StoreResult<std::time::SystemTime> {
        self.0.time().await
    }
}

#[async_trait::async_trait]
impl StateReads for Skewed {
    async fn kv_get(&self, bucket: &str, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        self.0.kv_get(bucket, keys).await
    }
    async fn kv_list(&self, bucket: &str, limit: usize) -> StoreResult<Vec<String>> {
        self.0.kv_list(bucket, limit).await
    }
}
