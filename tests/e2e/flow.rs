//! Flow control by key (docs/flow.md), with real hosts on one queue of the SQS-compatible
//! server sharing a real Redis. Each handler run is a request to an API on loopback, so the
//! API sees what a partner would: how many requests at once, how many per second per key, and
//! in what order tenants were served. Every plugin here has `max-attempts = 1`: a put-back
//! that used an attempt would dead-letter its message, so an empty dead-letter queue proves
//! none did.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use qhost::Outgoing;
use qhost::sources::{QueueSource as _, SqsQueue};
use qhost::stores::{Acquired, FlowSlots, LeaseRequest, RedisStore, Slot, SlotAnswer, SlotRequest};
use qhost_e2e::admin::{get, sample};
use qhost_e2e::api_server::{ApiServer, Recorded, Reply};
use qhost_e2e::flow_fleet::Fleet;
use qhost_e2e::flow_use::{limit_used, waits};
use qhost_e2e::harness::eventually;
use qhost_e2e::processes::HostProcess;
use qhost_e2e::redis_cluster::RedisCluster;
use qhost_e2e::redis_server::{shared_url, unique_namespace};
use qhost_e2e::sqs_server::{Server, drain_at, sdk_config_for, unique};

/// The message ids an API was sent, each once: the fixture posts its message's id.
fn ids(requests: &[Recorded]) -> BTreeSet<String> {
    requests
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

/// The most of `at` within any one second.
fn busiest_second(at: &[Instant]) -> usize {
    (at.iter())
        .map(|&t| {
            (at.iter())
                .filter(|&&o| o >= t && o < t + Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Waits until `api` has seen `n` distinct messages, for at most `limit`.
async fn served(api: &ApiServer, n: usize, limit: Duration) {
    let what = format!("{n} messages served");
    eventually(limit, &what, async || ids(&api.requests()).len() >= n).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partners_concurrency_holds_across_two_hosts_and_a_killed_hosts_slots_lapse() {
    const JOBS: usize = 60;
    const LIMIT: usize = 3;
    let partner =
        ApiServer::answering("127.0.0.1", |_, _| Reply::After(Duration::from_millis(100)));
    // The killed host's runs: the first request of each hangs until the host is gone.
    let hang = ApiServer::answering("127.0.0.1", |req, before| {
        if before.iter().any(|b| b.body == req.body) {
            Reply::Status(200)
        } else {
            Reply::After(Duration::from_secs(30))
        }
    });
    let manifest = format!(
        "[flow]\nkey = \"attribute:tenant\"\nmax-concurrency = {LIMIT}\n\
         [capabilities]\nhttp = [\"http://{}\", \"http://{}\"]\n[limits]\nmax-attempts = 1\n\
         timeout-ms = 60000\n",
        partner.addr(),
        hang.addr()
    );
    let fleet = Fleet::new("flow-slots", &manifest).await;
    let store = RedisStore::connect(&shared_url()).await.expect("Redis");
    let slots = qhost::testing::slots_key(&fleet.ns, "flow", "acme");

    // A host takes the key's three slots and is SIGKILLed holding them.
    let mut doomed = fleet.start(&["doomed"], 32).await;
    fleet
        .send((0..LIMIT).map(|_| (hang.url("/hang"), "acme".to_string())))
        .await;
    eventually(Duration::from_secs(20), "three runs hanging", async || {
        hang.answering_now() == LIMIT
    })
    .await;
    assert_eq!(store.slots_held(&slots).await.expect("slots"), LIMIT as u32);
    doomed.remove(0).kill();
    let killed = Instant::now();

    // Its slots lapse with their lease (the visibility timeout, 3 s), not later.
    eventually(
        Duration::from_secs(10),
        "the dead host's slots lapsed",
        async || store.slots_held(&slots).await.expect("slots") == 0,
    )
    .await;
    let lapsed = killed.elapsed();
    println!("the killed host's {LIMIT} slots lapsed {lapsed:?} after the kill");
    assert!(lapsed <= Duration::from_secs(5), "{lapsed:?}");

    // Two hosts with 32 slots each: the partner never sees more than three at once.
    let hosts = fleet.start(&["a", "b"], 32).await;
    fleet
        .send((0..JOBS).map(|_| (partner.url("/acme"), "acme".to_string())))
        .await;
    served(&partner, JOBS, Duration::from_secs(120)).await;
    // The killed host's messages come back and run once more each.
    served(&hang, LIMIT, Duration::from_secs(30)).await;
    eventually(
        Duration::from_secs(30),
        "the hung messages ran again",
        async || hang.requests().len() == 2 * LIMIT,
    )
    .await;
    let most = partner.most_at_once();
    println!("the partner saw at most {most} requests at once ({LIMIT} allowed)");
    assert!(
        most <= LIMIT,
        "{most} requests at once over a limit of {LIMIT}"
    );
    assert!(most >= 2, "the limit was never used: {most}");
    assert_eq!(partner.requests().len(), JOBS, "each message once");
    let hosts: Vec<&HostProcess> = hosts.iter().collect();
    fleet.assert_each_once(&hosts, JOBS + LIMIT).await;
    let limited = fleet.outcomes(&hosts)["flow_limited"];
    // Held back over the limit: kept waiting on a host for a slot, or put back.
    let (waited, ..) = waits(hosts.iter().copied());
    assert!(
        limited + waited as f64 > 0.0,
        "nothing was held back: {limited} put back, {waited} waited"
    );
    // Each host's console shows the key: its runs there and its put-backs, adding up.
    let (mut runs, mut held_back) = (0, 0);
    for host in &hosts {
        let (status, body) = get(host.admin_addr(), "/api/flow");
        assert_eq!(status, 200, "{body}");
        let keys: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let acme = (keys.as_array().expect("a list").iter())
            .find(|k| k["plugin"] == "flow" && k["key"] == "acme")
            .unwrap_or_else(|| panic!("acme is not among {keys}"));
        runs += acme["runs"].as_u64().expect("runs");
        held_back += acme["flow_limited"].as_u64().expect("flow_limited");
    }
    assert_eq!(runs, (JOBS + LIMIT) as u64, "the consoles' runs");
    assert_eq!(
        held_back as f64, limited,
        "the consoles' put-backs are the metrics'"
    );
    let by_key: f64 = (hosts.iter())
        .map(|host| {
            let (_, metrics) = get(host.admin_addr(), "/metrics");
            let labels = [
                ("plugin", "flow"),
                ("key", "acme"),
                ("reason", "flow_limited"),
            ];
            sample(&metrics, "qhost_flow_put_backs_total", &labels).unwrap_or(0.0)
        })
        .sum();
    assert_eq!(by_key, limited, "the key's own series");
    assert_eq!(
        store.slots_held(&slots).await.expect("slots"),
        0,
        "slots given back"
    );
}

/// A tenant held to two runs at once, each 300 ms at the API, on two hosts: its own API
/// server, so each sees only its tenant's requests.
struct HeldToTwo {
    fleet: Fleet,
    apis: [ApiServer; 2],
}

const TENANTS: [&str; 2] = ["A", "B"];
const RUN: Duration = Duration::from_millis(300);
const HELD_TO: usize = 2;
const PER_TENANT: usize = 20;

impl HeldToTwo {
    async fn new(test: &str) -> HeldToTwo {
        let apis = TENANTS.map(|_| ApiServer::answering("127.0.0.1", |_, _| Reply::After(RUN)));
        let manifest = format!(
            "[flow]\nkey = \"attribute:tenant\"\nmax-concurrency = {HELD_TO}\n\
             [capabilities]\nhttp = [\"http://{}\", \"http://{}\"]\n\
             [limits]\nmax-attempts = 1\n",
            apis[0].addr(),
            apis[1].addr()
        );
        let fleet = Fleet::new(test, &manifest).await;
        HeldToTwo { fleet, apis }
    }

    /// Sends each tenant's messages, interleaved.
    async fn send(&self) {
        let messages = (0..PER_TENANT).flat_map(|_| {
            (self.apis.iter().zip(TENANTS)).map(|(api, t)| (api.url("/run"), t.to_string()))
        });
        self.fleet.send(messages).await;
    }

    /// Each tenant's use of its limit, asserting it never ran more than the limit at once.
    fn used(&self) -> Vec<f64> {
        (self.apis.iter().zip(TENANTS))
            .map(|(api, tenant)| {
                let requests = api.requests();
                let used = limit_used(&requests, RUN, HELD_TO);
                let most = api.most_at_once();
                println!(
                    "tenant {tenant}: {} runs, {:.0}% of its limit used, at most {most} at once",
                    requests.len(),
                    used * 100.0
                );
                assert!(most <= HELD_TO, "{tenant}: {most} runs at once");
                assert_eq!(most, HELD_TO, "{tenant}: the limit was never used whole");
                used
            })
            .collect()
    }

    /// Waits until every tenant's messages have run, each once (`extra`: runs again allowed).
    async fn served(&self, extra: usize) {
        for api in &self.apis {
            served(api, PER_TENANT, Duration::from_secs(60)).await;
            let n = api.requests().len();
            assert!(n <= PER_TENANT + extra, "{n} runs of {PER_TENANT} messages");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_held_to_two_runs_at_once_waits_on_the_hosts_for_its_slots() {
    let test = HeldToTwo::new("flow-use").await;
    let hosts = test.fleet.start(&["a", "b"], 32).await;
    test.send().await;
    test.served(0).await;
    let hosts: Vec<&HostProcess> = hosts.iter().collect();
    test.fleet
        .assert_each_once(&hosts, TENANTS.len() * PER_TENANT)
        .await;
    // How much of the limit the tenants used is a figure of the machine's load: printed here
    // (with the limit asserted), measured by `cargo bench -p qhost-e2e --bench flow`.
    test.used();
    let (waited, put_back, asks) = waits(hosts.iter().copied());
    println!(
        "waited on a host for a slot: {waited}; put back: {put_back}; store calls for waiting \
         messages: {asks} ({:.2} per message that waited)",
        asks as f64 / waited.max(1) as f64
    );
    assert!(waited > 0, "nothing waited for a slot");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_limit_holds_through_a_host_killed_while_its_messages_wait() {
    let test = HeldToTwo::new("flow-use-kill").await;
    let mut hosts = test.fleet.start(&["doomed", "a"], 32).await;
    test.send().await;
    // Once a few of A's runs have started, SIGKILL a host holding runs and waiting messages:
    // its slots lapse with its leases, its messages come back, and the limit still holds.
    eventually(Duration::from_secs(30), "a few runs started", async || {
        test.apis[0].requests().len() >= 6
    })
    .await;
    hosts.remove(0).kill();
    // The killed host's runs may have reached the API before it died: those run again.
    test.served(HELD_TO).await;
    let hosts: Vec<&HostProcess> = hosts.iter().collect();
    let outcomes = test.fleet.outcomes(&hosts);
    assert_eq!(outcomes["dead_lettered"], 0.0, "{outcomes:?}");
    assert_eq!(outcomes["retried"], 0.0, "{outcomes:?}");
    let dlq = drain_at(&test.fleet.endpoint, &format!("{}-dlq", test.fleet.queue)).await;
    assert!(dlq.is_empty(), "{} dead-lettered", dlq.len());
    let used = test.used();
    println!("with a host killed mid-run, the tenants used {used:.2?} of their limits");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_flow_keys_each_get_their_own_rate_across_two_hosts() {
    const PER_KEY: usize = 60;
    const RATE: f64 = 20.0;
    let api = ApiServer::start();
    let manifest = format!(
        "[flow]\nkey = \"attribute:tenant\"\nrate = \"20/s\"\nfair = false\n\
         [capabilities]\nhttp = [\"http://{}\"]\n[limits]\nmax-attempts = 1\n",
        api.addr()
    );
    let fleet = Fleet::new("flow-rate", &manifest).await;
    let messages =
        (0..PER_KEY).flat_map(|_| ["k1", "k2"].map(|k| (api.url(&format!("/{k}")), k.to_string())));
    fleet.send(messages).await;
    let hosts = fleet.start(&["a", "b"], 32).await;
    served(&api, 2 * PER_KEY, Duration::from_secs(60)).await;
    let requests = api.requests();
    for key in ["k1", "k2"] {
        let at: Vec<Instant> = (requests.iter())
            .filter(|r| r.path == format!("/{key}"))
            .map(|r| r.at)
            .collect();
        assert_eq!(at.len(), PER_KEY, "{key}: each message once");
        let (first, last) = (at[0], at[at.len() - 1]);
        let seconds = last.duration_since(first).as_secs_f64();
        let observed = (at.len() - 1) as f64 / seconds;
        let busiest = busiest_second(&at);
        println!(
            "{key}: {} runs in {seconds:.2} s, {observed:.2}/s (limit {RATE}/s), busiest second {busiest}",
            at.len()
        );
        assert!(
            observed <= RATE * 1.1,
            "{key}: {observed:.2}/s over {RATE}/s"
        );

        // The rate, its burst of 2, and 2 for the jitter between a slot and its request.
        assert!(busiest <= 24, "{key}: {busiest} runs within one second");
    }
    // The keys ran side by side, each at its own rate: in their busiest second together, more
    // than one shared rate could allow (the 24 above).
    let all: Vec<Instant> = requests.iter().map(|r| r.at).collect();
    let together = busiest_second(&all);
    println!("both keys' busiest second together: {together} runs");
    assert!(
        together > 24,
        "the keys shared one rate: {together} runs in a second"
    );
    let hosts: Vec<&HostProcess> = hosts.iter().collect();
    fleet.assert_each_once(&hosts, 2 * PER_KEY).await;
    // How many waited on the hosts for their runs under the rate depends on how fast the
    // hosts received: printed (the flow bench measures the rate end to end).
    let (waited, put_back, asks) = waits(hosts.iter().copied());
    println!("waited on a host for its run: {waited}; put back: {put_back}; rate asks: {asks}");
}

/// Run alone (`scripts/test` runs it after the rest): how far the hosts get past the flood
/// before A's messages run is a race between receiving and running, which other tests' load
/// on the machine's two cores would decide instead.
///
/// The race is set so that the server's speed does not decide it. The hosts reach B and C only
/// by receiving past A's messages ahead of them (the server hands them out in send order), at
/// the server's pace R, while A's share runs A's messages at its own pace S and A's put-backs
/// come back at most at S: about `FLOOD × S / (R − S)` of A's run first. With runs of 8 s and
/// A's share of 16 slots on each of 2 hosts, S is 4 a second, and the bound, half the flood,
/// holds while R stays above 12 a second. R falls as the queue deepens (the server passes over
/// every message it does not hand out). With a flood of 2,000 and runs of 4 s (S of 8) the
/// hosts received past it in 8 s on a quiet machine (R about 250 a second; 91 of A's ran first),
/// but in 142 s in a CI run on a slower day (R about 14; 1,055 first: the server, not the
/// fair shares, decided it); hence 1,000 messages and runs of 8 s. Fair shares off, B and C
/// would run after all of A's but the last 32. (With runs of half a second, S was 64 a second,
/// and a slow machine's server, below it, decided the test.)
#[tokio::test(flavor = "multi_thread")]
#[ignore = "run alone by scripts/test, after the other tests"]
async fn a_flooding_tenant_does_not_hold_back_the_others() {
    const FLOOD: usize = 1_000;
    const FEW: usize = 20;
    // Every run takes 8 s at the API, as a slow partner's call would.
    let api = ApiServer::answering("127.0.0.1", |_, _| Reply::After(Duration::from_secs(8)));
    let manifest = format!(
        "[flow]\nkey = \"attribute:tenant\"\n\
         [capabilities]\nhttp = [\"http://{}\"]\n[limits]\nmax-attempts = 1\n",
        api.addr()
    );
    // A server of the test's own: moto's calls cost time in proportion to how many messages
    // it passes over, and this queue is 1,040 deep.
    let server = Server::start_own();
    let fleet = Fleet::on(server.endpoint(), "flow-fair", &manifest).await;
    let flood = (0..FLOOD).map(|_| (api.url("/a"), "a".to_string()));
    fleet.send(flood).await;
    let few = (0..FEW).flat_map(|_| ["b", "c"].map(|t| (api.url(&format!("/{t}")), t.to_string())));
    fleet.send(few).await;
    let started = Instant::now();
    let hosts = fleet.start(&["a", "b"], 32).await;
    // B's and C's runs are what the test is about: it ends once they all ran (A's remaining
    // backlog would take its share minutes more).
    let few_served = async || {
        let requests = api.requests();
        let few: Vec<Recorded> = (requests.into_iter()).filter(|r| r.path != "/a").collect();
        ids(&few).len() >= 2 * FEW
    };
    eventually(
        Duration::from_secs(300),
        "B's and C's messages served",
        few_served,
    )
    .await;
    let requests = api.requests();
    let last_few = (requests.iter())
        .rposition(|r| r.path != "/a")
        .expect("served");
    let first_few = (requests.iter())
        .position(|r| r.path != "/a")
        .expect("served");
    let hosts: Vec<&HostProcess> = hosts.iter().collect();
    let outcomes = fleet.outcomes(&hosts);
    println!(
        "B's and C's {} messages ran within {:?}; the first {:?} after A's first, after {first_few} of A's; outcomes: {outcomes:?}",
        2 * FEW,
        started.elapsed(),
        requests[first_few].at - requests[0].at,
    );
    let flood_before = requests[..last_few]
        .iter()
        .filter(|r| r.path == "/a")
        .count();
    println!(
        "B's and C's {} messages all ran while {flood_before} of tenant A's {FLOOD} (sent first) did",
        2 * FEW,
    );
    assert!(
        flood_before < FLOOD / 2,
        "B and C waited for {flood_before} of A's messages"
    );
    // Every run so far was of a message not run before, and none was given up on.
    assert_eq!(ids(&requests).len(), requests.len(), "a message ran twice");
    assert_eq!(outcomes["dead_lettered"], 0.0, "{outcomes:?}");
    assert_eq!(outcomes["retried"], 0.0, "{outcomes:?}");
    assert!(
        outcomes["fair_share"] > 0.0,
        "no message was beyond its share"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interactive_queue_runs_first_behind_a_bulk_backlog_and_the_bulk_still_drains() {
    const BULK: usize = 300;
    const INTERACTIVE: usize = 40;
    let api = ApiServer::answering("127.0.0.1", |_, _| Reply::After(Duration::from_millis(100)));
    let manifest = format!(
        "[capabilities]\nhttp = [\"http://{}\"]\n[limits]\nmax-attempts = 1\n",
        api.addr()
    );
    let fleet = Fleet::new("flow-bulk", &manifest).await;
    let interactive = unique("flow-interactive");
    fleet.create_queue(&interactive).await;
    // One host with 8 slots: the bulk queue as the fleet's helper writes it, and an
    // interactive queue of a higher priority beside it.
    let config = fleet.host("host", 8);
    let text = std::fs::read_to_string(&config).expect("config file");
    let text = format!(
        "{text}[[queue]]\nname = \"{interactive}\"\nplugin = \"flow\"\nwait-time-secs = 1\n\
         visibility-timeout-secs = 3\npriority = 10\n"
    );
    std::fs::write(&config, text).expect("config file");
    fleet
        .send((0..BULK).map(|_| (api.url("/bulk"), "bulk".to_string())))
        .await;
    let host = tokio::task::spawn_blocking(move || HostProcess::start_consuming(&config))
        .await
        .expect("host started");
    served(&api, 40, Duration::from_secs(60)).await;
    let sqs = SqsQueue::from_sdk_config(&sdk_config_for(&fleet.endpoint));
    let urgent: Vec<Outgoing> = (0..INTERACTIVE)
        .map(|_| Outgoing::new(&interactive, format!("post:{}", api.url("/interactive"))))
        .collect();
    for chunk in urgent.chunks(10) {
        sqs.send(chunk).await.expect("send");
    }
    served(&api, BULK + INTERACTIVE, Duration::from_secs(120)).await;
    let requests = api.requests();
    let is = |r: &Recorded, path: &str| r.path == path;
    let first = (requests.iter())
        .position(|r| is(r, "/interactive"))
        .expect("served");
    let last = (requests.iter())
        .rposition(|r| is(r, "/interactive"))
        .expect("served");
    let window = &requests[first..=last];
    let bulk_meanwhile = window.iter().filter(|r| is(r, "/bulk")).count();
    let bulk_after = requests[last..].iter().filter(|r| is(r, "/bulk")).count();
    println!(
        "the interactive queue's {INTERACTIVE} messages ran in {:?} beside {bulk_meanwhile} of the \
         bulk queue's (8 slots); {bulk_after} bulk messages ran after them",
        window[window.len() - 1].at - window[0].at
    );
    // Without priorities the two pollers take turns at the slots: about one bulk run per
    // interactive one. With them the bulk queue keeps to half the slots or less.
    assert!(
        bulk_meanwhile <= INTERACTIVE / 2,
        "{bulk_meanwhile} bulk runs beside {INTERACTIVE} interactive ones"
    );
    assert!(
        bulk_after > 0,
        "the bulk backlog ran out before the interactive burst"
    );
    assert_eq!(requests.len(), BULK + INTERACTIVE, "each message once");
    let stopped = host.stop();
    assert!(!stopped.contains("dead-letter"), "{stopped}");
    assert!(
        drain_at(&fleet.endpoint, &format!("{interactive}-dlq"))
            .await
            .is_empty()
    );
    assert!(
        drain_at(&fleet.endpoint, &format!("{}-dlq", fleet.queue))
            .await
            .is_empty()
    );
}

/// Asks for `leases` lease requests (all new keys) beside `slots` requests of `limit` on the
/// flow key `flow`, in one call: every lease granted, and how many slots were held.
async fn take<S: FlowSlots + ?Sized>(
    store: &S,
    ns: &str,
    (flow, limit, n): (&str, u32, usize),
) -> Vec<SlotAnswer> {
    let leases: Vec<LeaseRequest> = (0..n)
        .map(|_| LeaseRequest {
            key: qhost::testing::scoped_key(ns, "p", &uuid::Uuid::new_v4().to_string()),
            ttl: Duration::from_secs(30),
            window: Duration::from_secs(60),
        })
        .collect();
    let slots: Vec<SlotRequest> = (0..n)
        .map(|_| SlotRequest {
            key: qhost::testing::slots_key(ns, "p", flow),
            limit,
            ttl: Duration::from_millis(1500),
        })
        .collect();
    let (leased, taken) = store
        .acquire_with_slots(&leases, &slots)
        .await
        .expect("call");
    assert!(
        leased.iter().all(|l| matches!(l, Ok(Acquired::Granted(_)))),
        "{leased:?}"
    );
    taken
        .into_iter()
        .map(|t| t.expect("a slot's answer"))
        .collect()
}

fn held(answers: &[SlotAnswer]) -> Vec<Slot> {
    (answers.iter())
        .filter_map(|a| match a {
            SlotAnswer::Held(slot) => Some(slot.clone()),
            SlotAnswer::Full { .. } => None,
        })
        .collect()
}

/// What every store must do with flow slots: hold a key to its limit across one call and the
/// next, each flow key on its own, free one on release, and let a holder that stops extending
/// (a dead host) lapse with its time to live.
async fn slots_hold_their_limits<S: FlowSlots + ?Sized>(store: &S, ns: &str) {
    let first = take(store, ns, ("acme", 3, 5)).await;
    let acme = held(&first);
    assert_eq!(acme.len(), 3, "{first:?}");
    assert!(first.iter().any(|a| matches!(a, SlotAnswer::Full { retry_after } if *retry_after <= Duration::from_millis(1500))));
    assert_eq!(
        held(&take(store, ns, ("acme", 3, 2)).await).len(),
        0,
        "still full"
    );
    assert_eq!(
        held(&take(store, ns, ("globex", 3, 2)).await).len(),
        2,
        "a key of its own"
    );
    let acme_key = qhost::testing::slots_key(ns, "p", "acme");
    assert_eq!(store.slots_held(&acme_key).await.expect("count"), 3);
    store.release_slots(&acme[..1]).await.expect("release");
    assert_eq!(store.slots_held(&acme_key).await.expect("count"), 2);
    assert_eq!(
        held(&take(store, ns, ("acme", 3, 2)).await).len(),
        1,
        "one freed"
    );
    // Two holders keep extending, the others stop: theirs lapse, and a slot frees for each.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for slot in &acme[1..] {
            assert!(
                store
                    .extend_slot(slot, Duration::from_millis(1500))
                    .await
                    .expect("extend")
            );
        }
    }
    assert_eq!(store.slots_held(&acme_key).await.expect("count"), 2);
    assert_eq!(held(&take(store, ns, ("acme", 3, 2)).await).len(), 1);
    store.release_slots(&acme[1..2]).await.expect("release");
    assert!(
        store
            .extend_slot(&acme[2], Duration::from_millis(1500))
            .await
            .expect("extend")
    );
    assert!(
        !store
            .extend_slot(&acme[1], Duration::from_millis(1500))
            .await
            .expect("extend"),
        "a released slot is not held"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn flow_slots_hold_alike_on_redis_a_cluster_and_the_embedded_store() {
    let redis = RedisStore::connect(&shared_url()).await.expect("Redis");
    let before = redis.round_trips();
    let ns = unique_namespace("slots");
    take(&redis, &ns, ("once", 2, 10)).await;
    assert_eq!(
        redis.round_trips() - before,
        1,
        "leases and slots in one round trip"
    );
    slots_hold_their_limits(&redis, &ns).await;

    let cluster = RedisCluster::start(3);
    let on_cluster = RedisStore::connect_to(&cluster.target())
        .await
        .expect("cluster");
    let ns = unique_namespace("slots-cluster");
    take(&on_cluster, &ns, ("once", 2, 30)).await;
    assert_eq!(on_cluster.round_trips(), 3, "one pipeline per primary");
    slots_hold_their_limits(&on_cluster, &ns).await;

    let local = qhost::stores::LocalStore::open(None).expect("embedded store");
    slots_hold_their_limits(&local, "local").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standard_queues_message_groups_are_flow_keys() {
    const PER_GROUP: usize = 10;
    let api = ApiServer::answering("127.0.0.1", |_, _| Reply::After(Duration::from_millis(100)));
    let manifest = format!(
        "[flow]\nkey = \"group\"\nmax-concurrency = 1\n\
         [capabilities]\nhttp = [\"http://{}\"]\n[limits]\nmax-attempts = 1\n",
        api.addr()
    );
    let fleet = Fleet::new("flow-groups", &manifest).await;
    // A producer of SQS fair queues: a MessageGroupId per tenant, on a standard queue.
    let sqs = SqsQueue::from_sdk_config(&sdk_config_for(&fleet.endpoint));
    let messages: Vec<Outgoing> = (0..PER_GROUP)
        .flat_map(|_| ["g-a", "g-b"])
        .map(|group| {
            let mut m = Outgoing::new(&fleet.queue, format!("post:{}", api.url("/")));
            m.group_id = Some(group.to_string());
            m
        })
        .collect();
    for chunk in messages.chunks(10) {
        sqs.send(chunk).await.expect("send");
    }
    let hosts = fleet.start(&["a"], 16).await;
    served(&api, 2 * PER_GROUP, Duration::from_secs(60)).await;
    let most = api.most_at_once();
    println!("at most {most} requests at once: one per group");
    assert!(most <= 2, "{most} at once with one per group allowed");
    let (status, body) = get(hosts[0].admin_addr(), "/api/flow");
    assert_eq!(status, 200);
    let keys: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    for group in ["g-a", "g-b"] {
        let key = (keys.as_array().expect("a list").iter())
            .find(|k| k["key"] == group)
            .unwrap_or_else(|| panic!("{group} is not among {keys}"));
        assert_eq!(key["runs"], PER_GROUP, "{group}: {key}");
    }
    let hosts: Vec<&HostProcess> = hosts.iter().collect();
    fleet.assert_each_once(&hosts, 2 * PER_GROUP).await;
}
