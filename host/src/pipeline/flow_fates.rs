//! The flow gate's rows (`gate`, `crate::flow`), each on the test bed with the embedded store
//! and tokio's paused clock: what a run over its key's limit does to the message, its lease
//! and its attempts, and that a run's slot is given back as it ends.

use std::time::Duration;

use super::fates::grant;
use super::test_bed::{JOBS, PLUGIN, TestBed};
use crate::handler::{HandlerMessage, Invocation, Outcome};
use crate::idempotency::slots::{self, SlotAnswer, SlotRequest};
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

#[tokio::test(start_paused = true)]
async fn a_run_over_its_keys_limit_is_put_back_unrun_using_no_attempt() {
    let bed = TestBed::new(ONE_AT_A_TIME, ack);
    // Another host runs job j1: it holds the key's one slot.
    let theirs = SlotRequest {
        key: slots_of(&bed, "j1"),
        limit: 1,
        ttl: Duration::from_secs(60),
    };
    let (_, taken) = (bed.local.acquire_with_slots(&[], &[theirs]).await).expect("a slot");
    let Ok(SlotAnswer::Held(theirs)) = &taken[0] else {
        panic!("{taken:?}");
    };
    bed.send("j1", "a").await;
    bed.deliver().await;

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
        .release_slots(std::slice::from_ref(theirs))
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
