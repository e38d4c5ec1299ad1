//! The source contract's conformance suite: what every source must do with a delivery, written
//! once against [`QueueSource`] and run on every source (the embedded queue in its unit tests;
//! SQS, through the SQS-compatible server, end to end). A new broker passes it unchanged, or
//! it is not done; where a broker lacks a capability natively, the cases it declares it lacks
//! are the host's to make up, not the source's to fake.
//!
//! Each case gets the source and queues of its own, made by the caller ([`NewQueue`]: on SQS
//! they must be created), so cases run at once. Cases that wait for a hold to lapse or a
//! delay to pass wait on the real clock, a few seconds at most: a broker's clock is its own.
//!
//! Layout: `settle` (settle, depth, refusals), `holds` (put back, give back, keep holding,
//! expiry, the delivery count), `groups` (ordering groups on FIFO queues).

mod groups;
mod holds;
mod settle;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use qhost_message::{Outgoing, Received};

use crate::QueueSource;

/// Makes a new, empty queue for a case, named after `name` (a FIFO queue when `fifo`), and
/// answers its name.
pub type NewQueue =
    Arc<dyn Fn(String, bool) -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

/// What each case is given: the source, and a way to make queues of its own.
#[derive(Clone)]
pub(crate) struct Fixture {
    source: Arc<dyn QueueSource>,
    new_queue: NewQueue,
    name: String,
}

impl std::fmt::Debug for Fixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fixture")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Fixture {
    /// A new standard queue of this case.
    async fn queue(&self) -> String {
        (self.new_queue)(self.name.clone(), false).await
    }

    /// A new FIFO queue of this case.
    async fn fifo_queue(&self) -> String {
        (self.new_queue)(self.name.clone(), true).await
    }

    /// Sends `bodies` to `queue` (in `group`, on a FIFO queue), each with its own
    /// deduplication id.
    async fn send(&self, queue: &str, bodies: &[&str], group: Option<&str>) {
        let messages: Vec<Outgoing> = (bodies.iter())
            .map(|body| {
                let mut m = Outgoing::new(queue, *body);
                m.group_id = group.map(str::to_string);
                m.dedup_id = group.map(|g| format!("{g}-{body}"));
                m
            })
            .collect();
        let ids = self.source.send(&messages).await.unwrap();
        assert_eq!(ids.len(), bodies.len(), "an id per message sent");
    }

    /// What one receive of up to `max` from `queue` gives, held for `hold`, waiting at most
    /// `wait`.
    async fn receive(
        &self,
        queue: &str,
        max: usize,
        hold: Duration,
        wait: Duration,
    ) -> Vec<Received> {
        self.source.receive(queue, max, hold, wait).await.unwrap()
    }

    /// Receives from `queue` until `n` messages came or `limit` passed.
    async fn receive_n(
        &self,
        queue: &str,
        n: usize,
        hold: Duration,
        limit: Duration,
    ) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut got = Vec::new();
        while got.len() < n && tokio::time::Instant::now() < deadline {
            got.extend(
                self.receive(queue, n - got.len(), hold, Duration::from_secs(1))
                    .await,
            );
        }
        got
    }
}

/// A hold no case outlives.
const LONG: Duration = Duration::from_secs(60);

type CaseFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One behaviour: its name, and the case that shows it.
type Case = (&'static str, fn(Fixture) -> CaseFuture);

/// A module's cases: each a name and an `async fn(Fixture)`.
macro_rules! cases {
    ($($name:literal => $case:path),* $(,)?) => {
        pub(super) const CASES: &[super::Case] = &[$(($name, |f| Box::pin($case(f)))),*];
    };
}
use cases;

fn all_cases() -> Vec<Case> {
    [settle::CASES, holds::CASES, groups::CASES].concat()
}

/// Runs every case on `source` at once, each on queues `new_queue` makes for it; panics naming
/// each case that failed and why. What passed is printed, under `label`.
pub async fn assert_conforms(source: Arc<dyn QueueSource>, new_queue: NewQueue, label: &str) {
    let runs = all_cases().into_iter().map(|(name, case)| {
        let fixture = Fixture {
            source: Arc::clone(&source),
            new_queue: Arc::clone(&new_queue),
            name: name.split(':').next().unwrap_or("case").to_string(),
        };
        async move {
            let outcome = AssertUnwindSafe(case(fixture)).catch_unwind().await;
            (name, outcome.map_err(|panic| panic_text(&panic)))
        }
    });
    let outcomes = futures_util::future::join_all(runs).await;
    let failed: Vec<String> = (outcomes.iter())
        .filter_map(|(name, outcome)| Some(format!("- {name}: {}", outcome.as_ref().err()?)))
        .collect();
    println!(
        "source conformance ({label}): {} of {} cases pass",
        outcomes.len() - failed.len(),
        outcomes.len()
    );
    assert!(
        failed.is_empty(),
        "the source breaks its contract:\n{}",
        failed.join("\n")
    );
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    (panic.downcast_ref::<String>().cloned())
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}

/// The bodies of `messages`, as text.
fn bodies(messages: &[Received]) -> Vec<String> {
    (messages.iter())
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}
