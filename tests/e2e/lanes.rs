//! A host whose data path runs on lanes (`lanes = 2`: a thread and a runtime each, with their
//! own pollers and connections), against the SQS-compatible server and the tests' Redis: every
//! message runs once however the lanes split them, `max-in-flight` holds across lanes, both
//! lanes take work, and a stop in mid-stream loses nothing; the same on the embedded queue and
//! store, which the lanes share; and lanes that start while Redis is down.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qhost::Host;
use qhost::handlers::HandlerMessage;
use qhost::plugins::Registry;
use qhost::sources::QueueSource as _;
use qhost::sources::SqsQueue;
use qhost::stores::RedisStore;
use qhost_e2e::harness::{Running, TestEnv, contents, queue_toml, run_until_idle, send_all};
use qhost_e2e::redis_server::{RedisServer, shared_url, unique_namespace};
use qhost_e2e::sqs_server::{create_queue, drain, endpoint, sdk_config, unique};

/// Every call of the handler: the thread it ran on and the key it ran for, and how many ran
/// at once at most.
#[derive(Default)]
struct Calls {
    seen: Mutex<Vec<(String, String)>>,
    now: Mutex<(usize, usize)>,
}

impl Calls {
    /// Checks that `distinct` keys ran, each once, and that both lanes ran some and nothing
    /// else ran any.
    fn assert_each_ran_once_on_the_lanes(&self, distinct: usize) {
        let seen = self.seen.lock().expect("calls").clone();
        let mut runs: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, key) in &seen {
            *runs.entry(key.as_str()).or_default() += 1;
        }
        assert_eq!(runs.len(), distinct, "every distinct body ran");
        let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "no body ran twice: {twice:?}");
        let threads: BTreeSet<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            threads,
            BTreeSet::from(["qhost-lane-0", "qhost-lane-1"]),
            "both lanes ran messages, and only the lanes did"
        );
    }

    fn peak(&self) -> usize {
        self.now.lock().expect("calls").1
    }

    /// One more call running (`1`) or one fewer (`-1`).
    fn running(&self, change: isize) {
        let mut now = self.now.lock().expect("calls");
        now.0 = now
            .0
            .checked_add_signed(change)
            .expect("as many ends as starts");
        now.1 = now.1.max(now.0);
    }
}

/// A native handler that records each call and takes a few milliseconds, waiting
/// asynchronously, so calls overlap.
struct Recording(Arc<Calls>);

#[async_trait::async_trait]
impl qhost::handlers::Invoke for Recording {
    async fn invoke(
        &self,
        msg: HandlerMessage,
    ) -> Result<qhost::handlers::Invocation, qhost::handlers::Failure> {
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        self.0.running(1);
        tokio::time::sleep(Duration::from_millis(3)).await;
        self.0.running(-1);
        let key = msg.idempotency_key;
        (self.0.seen.lock().expect("calls")).push((thread, key));
        Ok(qhost::handlers::Invocation::new(
            qhost::handlers::Outcome::Ack,
        ))
    }
}

/// A host of two lanes on `jobs` over SQS and Redis (its keys under `namespace`), at most 8
/// messages in flight, its handler keyed by body (a copy of a body is a duplicate).
async fn host_on_lanes(env: &TestEnv, jobs: &str, calls: &Arc<Calls>, namespace: &str) -> Host {
    let mut config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n\
         [idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{}\"\n\
         [[queue]]\nname = \"{jobs}\"\nplugin = \"recording\"\nwait-time-secs = 1\n\
         visibility-timeout-secs = 5\n",
        endpoint(),
        shared_url(),
        namespace,
    ));
    // Top-level keys; the test environment's text ends in a table.
    (config.lanes, config.max_in_flight) = (2, 8);
    let plugin = recording(calls);
    let store = RedisStore::connect(&shared_url())
        .await
        .expect("the tests' Redis");
    Host::new(
        config,
        Arc::new(SqsQueue::from_sdk_config(&sdk_config())),
        Arc::new(store),
        Registry::new([plugin]),
    )
}

/// The recording handler as plugin `recording`, keyed by body.
fn recording(calls: &Arc<Calls>) -> qhost::plugins::Plugin {
    let manifest = qhost::plugins::Manifest::parse("[idempotency]\nkey = \"body-sha256\"\n");
    let invoker = Arc::new(Recording(Arc::clone(calls)));
    qhost::plugins::Plugin::new("recording", "native", manifest.expect("manifest"), invoker)
}

/// `n` distinct bodies, then a copy of every fifth.
fn bodies(n: usize) -> Vec<String> {
    let distinct = (0..n).map(|i| format!("job-{i}"));
    let copies = (0..n).step_by(5).map(|i| format!("job-{i}"));
    distinct.chain(copies).collect()
}

/// A new queue holding [`bodies`]`(n)`; its name.
async fn queue_of(name: &str, n: usize) -> String {
    let jobs = unique(name);
    create_queue(&jobs, &[]).await;
    let bodies = bodies(n);
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    send_all(&SqsQueue::from_sdk_config(&sdk_config()), &jobs, &refs, &[]).await;
    jobs
}

#[tokio::test(flavor = "multi_thread")]
async fn two_lanes_share_a_queue_and_run_each_message_once() {
    let env = TestEnv::new();
    let jobs = queue_of("lanes", 200).await;

    let calls = Arc::new(Calls::default());
    let host = host_on_lanes(&env, &jobs, &calls, &unique_namespace("lanes")).await;
    run_until_idle(&host).await;

    calls.assert_each_ran_once_on_the_lanes(200);
    let peak = calls.peak();
    assert!(
        peak <= 8,
        "max-in-flight holds across lanes: {peak} at once"
    );
    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked), (200, 200), "{c:?}");
    // Every copy ends as a duplicate. SQS delivers at least once: on a loaded machine a
    // message whose delete was late comes back, and is a duplicate too (or, if it came back
    // while its first delivery still ran, busy and then a duplicate).
    assert!(c.duplicates >= 40, "{c:?}");
    assert_eq!(c.received, c.acked + c.duplicates + c.busy, "{c:?}");
    assert!(drain(&jobs).await.is_empty(), "every message was deleted");
}

#[tokio::test(flavor = "multi_thread")]
async fn stopping_lanes_mid_stream_and_restarting_loses_nothing() {
    let env = TestEnv::new();
    let jobs = queue_of("lanes-stop", 300).await;

    let calls = Arc::new(Calls::default());
    let namespace = unique_namespace("lanes-stop");
    let running = Running::start(host_on_lanes(&env, &jobs, &calls, &namespace).await);
    running
        .wait_for(Duration::from_secs(60), |h| h.stats().total().acked >= 40)
        .await;
    let first = running.stop().await.stats().total();
    assert!(first.acked < 300, "stopped mid-stream: {first:?}");
    assert_eq!(first.released, 0, "every run ended within the grace period");

    let second = host_on_lanes(&env, &jobs, &calls, &namespace).await;
    run_until_idle(&second).await;
    calls.assert_each_ran_once_on_the_lanes(300);
    let c = second.stats().total();
    assert_eq!(first.acked + c.acked, 300, "{first:?} then {c:?}");
    assert!(drain(&jobs).await.is_empty(), "every message was deleted");
}

#[tokio::test(flavor = "multi_thread")]
async fn lanes_share_the_embedded_queue_and_store() {
    let env = TestEnv::new();
    let mut config = env.config("[[queue]]\nname = \"jobs\"\nplugin = \"recording\"\n");
    (config.lanes, config.max_in_flight) = (2, 8);
    let calls = Arc::new(Calls::default());
    let plugin = recording(&calls);
    let host = Host::new(
        config,
        Arc::new(env.queue()),
        Arc::new(qhost::stores::LocalStore::open(None).expect("store")),
        Registry::new([plugin]),
    );
    let bodies = bodies(100);
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    send_all(&env.queue(), "jobs", &refs, &[]).await;
    run_until_idle(&host).await;

    calls.assert_each_ran_once_on_the_lanes(100);
    let c = host.stats().total();
    assert_eq!((c.acked, c.duplicates), (100, 20), "{c:?}");
}

/// Redis down when the lanes start: each lane cannot open its own connection, says so, and
/// shares the host's, which reconnects once Redis is back; nothing runs unleased meanwhile, and
/// then every message runs once.
#[tokio::test(flavor = "multi_thread")]
async fn lanes_started_during_a_redis_outage_run_once_it_ends() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let mut redis = RedisServer::start();
    let mut config = env.config(&format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\n{}",
        redis.url(),
        queue_toml("jobs", "fixture")
    ));
    config.lanes = 2;
    let host = env.host(config).await;
    redis.kill();
    let running = Running::start(host);
    let q = env.queue();
    send_all(&q, "jobs", &["send:sink:ok"; 20], &[]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let invoked_while_down = running.host().stats().total().invoked;
    redis.restart();
    running
        .wait_for(Duration::from_secs(60), |h| h.stats().total().acked >= 20)
        .await;
    let c = running.stop().await.stats().total();

    assert_eq!(
        invoked_while_down, 0,
        "nothing ran while no lease could be taken"
    );
    assert_eq!((c.invoked, c.acked), (20, 20), "{c:?}");
    assert_eq!(
        contents(&q, "sink").await.len(),
        20,
        "each message's effect once"
    );
    assert_eq!(q.depth("jobs").await.expect("depth").total(), 0);
}
