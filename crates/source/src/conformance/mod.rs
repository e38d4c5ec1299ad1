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
//! Cases follow the source's [`Capabilities`](crate::Capabilities): where holds end with the
//! consumer's connection ([`Holds::WithConnection`], RabbitMQ) rather than by time, the caller
//! gives the suite a way to drop what holds a queue's deliveries ([`DropHolds`]: a consumer's
//! channel or connection closing, as when a host dies), and the cases that let a hold lapse
//! drop it instead of waiting.
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

use crate::{Holds, QueueSource};

/// Makes a new, empty queue for a case, named after `name` (a FIFO queue when `fifo`), and
/// answers its name.
pub type NewQueue =
    Arc<dyn Fn(String, bool) -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

/// Drops what holds the deliveries of a queue (the source's consumer of it: its channel or its
/// connection), so that every delivery of it the source holds goes back to the queue, as when
/// a host dies: for sources whose holds end with the connection. Other queues' cases run
/// meanwhile, so it drops no more than the named queue's holds need.
pub type DropHolds = Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// What each case is given: the source, and a way to make queues of its own.
#[derive(Clone)]
pub(crate) struct Fixture {
    source: Arc<dyn QueueSource>,
    new_queue: NewQueue,
    drop_holds: Option<DropHolds>,
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

    /// Lets the holds the source has given on `queue` end: where they end with the
    /// connection, drops them (the caller's [`DropHolds`]); where they expire, nothing (a
    /// case's short holds lapse).
    async fn end_holds(&self, queue: &str) {
        if let Some(drop_holds) = &self.drop_holds {
            drop_holds(queue.to_string()).await;
        }
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

/// A module's cases: each a name and an `async fn(Fixture)`; in `CASES`, or in a list named
/// first (`LIST: "name" => case, …`) for cases that apply to some sources only.
macro_rules! cases {
    ($list:ident: $($name:literal => $case:path),* $(,)?) => {
        pub(super) const $list: &[super::Case] = &[$(($name, |f| Box::pin($case(f)))),*];
    };
    ($($name:literal => $case:path),* $(,)?) => {
        cases!(CASES: $($name => $case),*);
    };
}
use cases;

/// The cases for a source whose holds `expire` (or end with the connection), and that keeps
/// ordering groups or not.
fn all_cases(expire: bool, source_groups: bool) -> Vec<Case> {
    let holds = if expire {
        holds::EXPIRING
    } else {
        holds::WITH_CONNECTION
    };
    let groups = if source_groups { groups::CASES } else { &[] };
    [settle::CASES, holds::CASES, holds, groups].concat()
}

/// Runs every case on `source` at once, each on queues `new_queue` makes for it; panics naming
/// each case that failed and why. What passed is printed, under `label`. For a source whose
/// holds expire; see [`assert_conforms_dropping`] for one whose holds end with its connection.
pub async fn assert_conforms(source: Arc<dyn QueueSource>, new_queue: NewQueue, label: &str) {
    run_cases(source, new_queue, None, label).await;
}

/// As [`assert_conforms`], for a source whose holds end with its connection:
/// `drop_holds` drops its connections where a case lets holds end.
pub async fn assert_conforms_dropping(
    source: Arc<dyn QueueSource>,
    new_queue: NewQueue,
    drop_holds: DropHolds,
    label: &str,
) {
    run_cases(source, new_queue, Some(drop_holds), label).await;
}

async fn run_cases(
    source: Arc<dyn QueueSource>,
    new_queue: NewQueue,
    drop_holds: Option<DropHolds>,
    label: &str,
) {
    let capabilities = source.capabilities();
    let expire = capabilities.holds == Holds::Expire;
    assert_eq!(
        expire,
        drop_holds.is_none(),
        "a source whose holds end with its connection is checked with assert_conforms_dropping, \
         one whose holds expire with assert_conforms"
    );
    let runs = all_cases(expire, capabilities.ordering_groups)
        .into_iter()
        .map(|(name, case)| {
            let fixture = Fixture {
                source: Arc::clone(&source),
                new_queue: Arc::clone(&new_queue),
                drop_holds: drop_holds.clone(),
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
