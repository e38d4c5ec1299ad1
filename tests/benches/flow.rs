//! How much of a flow limit its key uses (docs/flow.md), with real hosts (release binaries) on
//! one queue of the SQS-compatible server sharing the machine's Redis, each run a request to an
//! API on loopback:
//!
//! - **held to two**: tenants A and B with 20 messages each, `max-concurrency = 2`, each run
//!   300 ms at its tenant's own API, two hosts: each tenant's use of its limit (run time over
//!   span × limit; the ideal, 1.0, is every slot busy from the first run to the last), the
//!   most runs at once its API saw, and how many messages waited on a host, were put back,
//!   and the store calls made for waiting ones;
//! - **held to two, a host killed**: the same with one host SIGKILLed once six of A's runs
//!   have started (its slots lapse with its leases, 3 s, which the use counts);
//! - **a rate per key**: `rate = "20/s"`, keys k1 and k2 with a backlog of 60 each, two hosts:
//!   each key's rate end to end against its limit.
//!
//! Each scenario runs three times; every run's figures are printed.
//!
//! `cargo bench -p qhost-e2e --bench flow` (run `scripts/install-test-tools` and build the
//! plugins as `scripts/test` does first).

use std::time::{Duration, Instant};

use qhost_e2e::api_server::{ApiServer, Reply};
use qhost_e2e::flow_fleet::Fleet;
use qhost_e2e::flow_use::{limit_used, waits};
use qhost_e2e::harness::eventually;

const RUN: Duration = Duration::from_millis(300);
const HELD_TO: usize = 2;
const PER_TENANT: usize = 20;
const ROUNDS: usize = 3;

/// Two tenants held to two runs at once; `kill`: SIGKILL one host once six of A's runs began.
async fn held_to_two(kill: bool) {
    let apis = [(); 2].map(|_| ApiServer::answering("127.0.0.1", |_, _| Reply::After(RUN)));
    let manifest = format!(
        "[flow]\nkey = \"attribute:tenant\"\nmax-concurrency = {HELD_TO}\n\
         [capabilities]\nhttp = [\"http://{}\", \"http://{}\"]\n[limits]\nmax-attempts = 1\n",
        apis[0].addr(),
        apis[1].addr()
    );
    let fleet = Fleet::new("bench-flow", &manifest).await;
    let mut hosts = fleet.start(&["a", "b"], 32).await;
    let messages = (0..PER_TENANT).flat_map(|_| {
        (apis.iter().zip(["A", "B"])).map(|(api, t)| (api.url("/run"), t.to_string()))
    });
    fleet.send(messages).await;
    if kill {
        eventually(Duration::from_secs(60), "six runs", async || {
            apis[0].requests().len() >= 6
        })
        .await;
        hosts.remove(0).kill();
    }
    for api in &apis {
        eventually(Duration::from_secs(120), "every run", async || {
            let ids: std::collections::BTreeSet<Vec<u8>> =
                api.requests().into_iter().map(|r| r.body).collect();
            ids.len() >= PER_TENANT
        })
        .await;
    }
    let used: Vec<String> = (apis.iter())
        .map(|api| {
            let requests = api.requests();
            format!(
                "{:.0}% ({} runs, at most {} at once)",
                limit_used(&requests, RUN, HELD_TO) * 100.0,
                requests.len(),
                api.most_at_once()
            )
        })
        .collect();
    let (waited, put_back, asks) = waits(&hosts);
    println!(
        "  A {}, B {}; waited {waited}, put back {put_back}, store calls for waiting ones \
         {asks} ({:.2} per message that waited)",
        used[0],
        used[1],
        asks as f64 / waited.max(1) as f64
    );
}

/// Keys k1 and k2 at 20/s each, a backlog of 60 each.
async fn rate_per_key() {
    const PER_KEY: usize = 60;
    let api = ApiServer::start();
    let manifest = format!(
        "[flow]\nkey = \"attribute:tenant\"\nrate = \"20/s\"\nfair = false\n\
         [capabilities]\nhttp = [\"http://{}\"]\n[limits]\nmax-attempts = 1\n",
        api.addr()
    );
    let fleet = Fleet::new("bench-flow-rate", &manifest).await;
    let messages =
        (0..PER_KEY).flat_map(|_| ["k1", "k2"].map(|k| (api.url(&format!("/{k}")), k.to_string())));
    fleet.send(messages).await;
    let hosts = fleet.start(&["a", "b"], 32).await;
    eventually(Duration::from_secs(120), "every run", async || {
        api.requests().len() >= 2 * PER_KEY
    })
    .await;
    let requests = api.requests();
    let rates: Vec<String> = ["k1", "k2"]
        .iter()
        .map(|key| {
            let at: Vec<Instant> = (requests.iter())
                .filter(|r| r.path == format!("/{key}"))
                .map(|r| r.at)
                .collect();
            let seconds = at[at.len() - 1].duration_since(at[0]).as_secs_f64();
            let rate = (at.len() - 1) as f64 / seconds;
            format!("{key} {rate:.1}/s ({:.2} of 20/s)", rate / 20.0)
        })
        .collect();
    let (waited, put_back, asks) = waits(&hosts);
    println!(
        "  {}; waited {waited}, put back {put_back}, store calls for waiting ones {asks}",
        rates.join(", ")
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    println!(
        "held to two (2 hosts, max-concurrency = 2, 300 ms runs, 20 per tenant): use of the limit"
    );
    for _ in 0..ROUNDS {
        held_to_two(false).await;
    }
    println!("the same, one host SIGKILLed after six of A's runs began (its slots lapse in 3 s)");
    for _ in 0..ROUNDS {
        held_to_two(true).await;
    }
    println!("a rate per key (2 hosts, rate = \"20/s\", a backlog of 60 per key)");
    for _ in 0..ROUNDS {
        rate_per_key().await;
    }
}
