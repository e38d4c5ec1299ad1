//! The store contract's conformance suite: every behaviour a store promises, written once
//! against the capability traits and run on every backend (the embedded store in the unit
//! tests; Redis and a Redis Cluster in the end-to-end tests). A new backend passes it
//! unchanged, or it is not done; a behaviour that differs between two backends shows up as one
//! case failing on one of them, not as two hand-written tests drifting apart.
//!
//! A backend runs it from its own tests: `assert_conforms(Arc::new(store), "a-unique-prefix")`.
//!
//! Each case gets the store and a prefix of its own ([`Fixture`]), so cases run at once on one
//! store, and on a shared server beside other tests. Cases that wait for an expiry wait on the
//! real clock (a few hundred milliseconds): a store's expiry is its own clock's, which a paused
//! tokio clock cannot move.
//!
//! Layout: `leases` (grants, fencing, owners, failed runs), `completion` (the completed record,
//! its outbox and result, the dedup window), `claims` (claim and take-over, the store's clock),
//! `records` (shared records' compare-and-set), `rate` (the fleet rate), `slots` (flow slots),
//! `state` (state commits and conflicts).

mod claims;
mod completion;
mod leases;
mod rate;
mod records;
mod slots;
mod state;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;

use super::{Acquired, Lease, LeaseRequest, Store};

/// What each case is given: the store, and a prefix no other case or test uses.
#[derive(Clone, Debug)]
pub(crate) struct Fixture {
    store: Arc<dyn Store>,
    prefix: String,
}

impl Fixture {
    /// A store key of this case: `PREFIX:{NAME}` (its own slot on a cluster).
    fn key(&self, name: &str) -> String {
        format!("{}:{{{name}}}", self.prefix)
    }

    /// A lease request for `key`, leased for `ttl`, remembered for a minute once completed.
    fn request(&self, key: &str, ttl: Duration) -> LeaseRequest {
        LeaseRequest {
            key: key.to_string(),
            ttl,
            window: Duration::from_secs(60),
        }
    }

    /// What acquiring `key` alone answers.
    async fn acquire(&self, key: &str, ttl: Duration) -> Acquired {
        let mut answers = (self.store.acquire(&[self.request(key, ttl)]).await)
            .unwrap_or_else(|e| panic!("acquire {key}: {e}"));
        answers
            .remove(0)
            .unwrap_or_else(|e| panic!("acquire {key}: {e}"))
    }

    /// A lease on `key`, which must be granted.
    async fn grant(&self, key: &str, ttl: Duration) -> Lease {
        match self.acquire(key, ttl).await {
            Acquired::Granted(lease) => lease,
            other => panic!("expected a grant of {key}, got {other:?}"),
        }
    }
}

/// A long lease: one no case outlives.
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

/// Every case of the suite.
fn all_cases() -> Vec<Case> {
    [
        leases::CASES,
        completion::CASES,
        claims::CASES,
        records::CASES,
        rate::CASES,
        slots::CASES,
        state::CASES,
    ]
    .concat()
}

/// Runs every case on `store`, at once, each under `prefix` and its own name; panics naming
/// each case that failed and why. What passed is printed.
pub async fn assert_conforms(store: Arc<dyn Store>, prefix: &str) {
    let runs = all_cases().into_iter().map(|(name, case)| {
        let fixture = Fixture {
            store: Arc::clone(&store),
            prefix: format!("{prefix}:{}", name.replace([' ', ':'], "-")),
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
        "store conformance ({prefix}): {} of {} cases pass",
        outcomes.len() - failed.len(),
        outcomes.len()
    );
    assert!(
        failed.is_empty(),
        "the store breaks its contract:\n{}",
        failed.join("\n")
    );
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    (panic.downcast_ref::<String>().cloned())
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}

/// Waits until `ready` holds, checking every 20 ms for at most `limit`; whether it did.
async fn eventually<F: Future<Output = bool>>(
    limit: Duration,
    mut ready: impl FnMut() -> F,
) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if ready().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
