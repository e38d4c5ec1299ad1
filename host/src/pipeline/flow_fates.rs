//! The flow gate's rows (`gate`, `waiting`, `crate::flow`), each on the test bed with the
//! embedded store and tokio's paused clock: what a run over its key's limit does to the
//! message, its lease and its attempts (it waits on the host, or is put back), and that a
//! run's slot is given back as it ends.

use std::sync::Arc;
use std::time::Duration;

use super::fates::grant;
use super::test_bed::{JOBS, PLUGIN, TestBed};
use crate::handler::{HandlerMessage, Invocation, Outcome};
use crate::idempotency::slots::{self, Slot, SlotAnswer, SlotRequest};
use crate::idempotency::{FlowSlots, KeyStatus};

/// Keyed and flow-keyed by the `job` attribute: one run of a job at once across the fleet.
const ONE_AT_A_TIME: &str = "[idempotency]\nkey = \"attribute:job\"\n\
    [flow]\nkey = \"attribute:job\"\nmax-concurrency = 1\n[limits]\nmax-attempts = 1\n";

fn ack(_: HandlerMessage) -> Result<Invocation, crate::handler::Failure> {
    Ok(Invocation::new(Outcome::Ack))
}

/// The store key of `job`'s flow slots.
fn slots_of(bed: &TestBed, job: &str) -> String {
    slots::key(&bed.queue.shared.config.namespace, PLUGIN, job)
}

/// Another host takes job `job`'s one slot, held until released.
async fn take_their_slot(bed: &TestBed, job: &str) -> Slot {
    let theirs = SlotRequest {
        key: slots_of(bed, job),
        limit: 1,
        ttl: Duration::from_secs(60),
    };
    let (_, taken) = (bed.local.acquire_with_slots(&[], &[theirs]).await).expect("a slot");
    match taken.into_iter().next() {
        Some(Ok(SlotAnswer::Held(slot))) => slot,
        other => panic!("{other:?}"),
    }
}

/// The bed's flow key `job` as this host's console shows it.
fn key_status(bed: &TestBed, job: &str) -> crate::flow::fair::KeyStatus {
    let keys = bed.queue.shared.fair.busiest(10);
    let key = keys.into_iter().find(|k| k.key == job);
    key.unwrap_or_else(|| panic!("{job} is not among the flow keys"))
}

#[tokio::test(start_paused = true)]
async fn a_run_over_its_keys_limit_waits_hidden_and_runs_once_the_slot_is_given_back() {
    let bed = TestBed::new(ONE_AT_A_TIME, ack);
    // Another host runs job j1 for five seconds: it holds the key's one slot.
    let theirs = take_their_slot(&bed, "j1").await;
    bed.send("j1", "a").await;
    let started = tokio::time::Instant::now();
    let store = Arc::clone(&bed.local);
    let theirs_end = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        store.release_slots(&[theirs]).await.expect("released");
    });
    let delivering = bed.deliver();
    let watching = async {
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        // Waiting: hidden, its lease held, no run, nothing put back, one waiting.
        assert_eq!(bed.split(JOBS).await, (0, 1), "hidden while it waits");
        assert!(matches!(
            bed.status("j1").await,
            KeyStatus::InProgress { .. }
        ));
        let c = bed.counts();
        assert_eq!((c.invoked, c.flow_limited), (0, 0));
        assert_eq!(key_status(&bed, "j1").waiting, 1);
        // It holds none of the host's in-flight slots, but for the moments it asks the store
        // (a call on a blocking thread, so in real time: a loaded machine may take a while).
        let shared = &bed.queue.shared;
        let mut free = shared.in_flight.available_permits();
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while free != shared.config.max_in_flight && std::time::Instant::now() < give_up {
            tokio::task::yield_now().await;
            free = shared.in_flight.available_permits();
        }
        assert_eq!(free, shared.config.max_in_flight, "no in-flight slot held");
    };
    let (delivered, ()) = tokio::join!(delivering, watching);
    assert_eq!(delivered, 1);
    theirs_end.await.expect("their run ended");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_millis(5_200),
        "it ran within a poll of the slot's return: {waited:?}"
    );
    let c = bed.counts();
    assert_eq!(
        (
            c.invoked,
            c.acked,
            c.flow_limited,
            c.retried,
            c.dead_lettered
        ),
        (1, 1, 0, 0, 0)
    );
    let key = key_status(&bed, "j1");
    assert_eq!((key.waiting, key.counts.waited), (0, 1));
    // Ten store calls a second while it waited (before a run of its key has ended here, a
    // line asks every 100 ms): fifty, and the one that took the slot.
    assert!(
        (48..=53).contains(&key.counts.wait_asks),
        "{:?}",
        key.counts
    );
    assert_eq!(bed.split(JOBS).await, (0, 0), "acked");
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_run_that_waits_too_long_is_put_back_unrun_using_no_attempt() {
    let bed = TestBed::new(ONE_AT_A_TIME, ack);
    let theirs = take_their_slot(&bed, "j1").await;
    bed.send("j1", "a").await;
    let started = tokio::time::Instant::now();
    bed.deliver().await;
    assert!(started.elapsed() >= super::turns::MAX_WAIT);
    assert_eq!(
        bed.split(JOBS).await,
        (0, 1),
        "hidden until a slot is likely free"
    );
    let c = bed.counts();
    assert_eq!(
        (c.invoked, c.flow_limited, c.retried, c.dead_lettered),
        (0, 1, 0, 0)
    );
    assert_eq!(
        bed.status("j1").await,
        KeyStatus::Unknown,
        "its lease given back"
    );
    // Its key's next grant has used up no attempt (`max-attempts = 1`: a put-back that
    // used it would dead-letter the message when it comes back).
    assert_eq!(grant(&bed.local, &bed.scoped("j1")).await.failures, 0);
    bed.local
        .release_slots(std::slice::from_ref(&theirs))
        .await
        .expect("released");
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn without_a_heartbeat_to_keep_it_hidden_a_run_over_the_limit_is_put_back_at_once() {
    let queue = format!("plugin = \"{PLUGIN}\"\nheartbeat = false\n");
    let bed = TestBed::with_queue(&queue, ONE_AT_A_TIME, ack);
    let theirs = take_their_slot(&bed, "j1").await;
    bed.send("j1", "a").await;
    let started = tokio::time::Instant::now();
    bed.deliver().await;
    assert!(started.elapsed() < Duration::from_secs(1), "not kept");
    let c = bed.counts();
    assert_eq!((c.invoked, c.flow_limited), (0, 1));
    assert_eq!(bed.status("j1").await, KeyStatus::Unknown);
    assert_eq!(key_status(&bed, "j1").counts.waited, 0);
    bed.local
        .release_slots(std::slice::from_ref(&theirs))
        .await
        .expect("released");
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_runs_slot_is_given_back_as_it_ends_and_a_duplicate_takes_none() {
    let bed = TestBed::new(ONE_AT_A_TIME, ack);
    bed.send("j1", "a").await;
    bed.deliver().await;
    assert_eq!(bed.counts().acked, 1);
    let key = slots_of(&bed, "j1");
    for _ in 0..100 {
        if bed.local.slots_held(&key).await.expect("count") == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        bed.local.slots_held(&key).await.expect("count"),
        0,
        "given back"
    );
    // A duplicate of the completed job is finished without running, and holds no slot.
    bed.send("j1", "a again").await;
    bed.deliver().await;
    let c = bed.counts();
    assert_eq!((c.invoked, c.duplicates, c.flow_limited), (1, 1, 0));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(bed.local.slots_held(&key).await.expect("count"), 0);
    bed.close().await;
}

/// A flow key held to 5 runs a second; every message keyed by its own id.
const FIVE_A_SECOND: &str =
    "[flow]\nkey = \"attribute:job\"\nrate = \"5/s\"\n[limits]\nmax-attempts = 1\n";

/// On the real clock: the embedded store's rate is kept on the machine's clock.
#[tokio::test]
async fn runs_its_keys_rate_holds_back_wait_on_the_host_for_their_turn() {
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&ran);
    let bed = TestBed::new(FIVE_A_SECOND, move |_: HandlerMessage| {
        seen.lock().expect("runs").push(std::time::Instant::now());
        Ok(Invocation::new(Outcome::Ack))
    });
    for i in 0..10 {
        bed.send("tenant", &format!("m{i}")).await;
    }
    // One batch of ten: six reserve a run within a second, the other four wait on the host.
    assert_eq!(bed.deliver().await, 10);
    let c = bed.counts();
    assert_eq!((c.invoked, c.acked, c.flow_limited), (10, 10, 0));
    let key = key_status(&bed, "tenant");
    assert_eq!((key.waiting, key.counts.waited), (0, 4));
    let mut ran = ran.lock().expect("runs").clone();
    ran.sort();
    let span = ran[9] - ran[0];
    // Nine intervals of 200 ms: never faster than the rate, and no put-back's second lost.
    assert!(
        span >= Duration::from_millis(1_750) && span < Duration::from_millis(2_600),
        "ten runs at 5/s took {span:?}"
    );
    assert_eq!(bed.split(JOBS).await, (0, 0), "all acked");
    bed.close().await;
}
