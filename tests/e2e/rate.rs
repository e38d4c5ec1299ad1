//! A plugin's rate limit across a fleet: two `qhost` processes on one queue of the
//! SQS-compatible server share a Redis, and the plugin's `[limits] rate = "20/s"` holds for
//! both together. Each handler run is a request to an API on loopback, so the API's clock is
//! what measures the rate. Messages over the rate are put back without using up an attempt:
//! the last 50 jobs fail their first run (the API answers 503 once) with `max-attempts = 2`,
//! so a put-back that counted would dead-letter them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use qhost::sources::QueueSource;
use qhost::sources::SqsQueue;
use qhost::{Attribute, Outgoing};
use qhost_e2e::admin::{get, sample};
use qhost_e2e::api_server::{ApiServer, Reply};
use qhost_e2e::harness::{TestEnv, eventually};
use qhost_e2e::processes::HostProcess;
use qhost_e2e::redis_server::{shared_url, unique_namespace};
use qhost_e2e::sqs_server::{create_queue, drain, endpoint, sdk_config, unique};

const JOBS: usize = 200;
const FAIL_ONCE_FROM: usize = 150;
const RATE: f64 = 20.0;

fn config_file(env: &TestEnv, name: &str, ns: &str, queue: &str) -> std::path::PathBuf {
    let text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\nmax-in-flight = 16\nshutdown-grace-secs = 5\n\
         [source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\nregion = \"us-east-1\"\n\
         [idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{ns}\"\n\
         [retry]\nbase-secs = 0.05\nmax-secs = 0.2\n\
         [[queue]]\nname = \"{queue}\"\nplugin = \"mailer\"\nwait-time-secs = 1\n\
         visibility-timeout-secs = 10\n",
        env.plugins_dir(),
        env.data_dir().join(name),
        endpoint(),
        shared_url(),
    );
    let path = env.data_dir().with_file_name(format!("{name}.toml"));
    std::fs::write(&path, text).expect("config file");
    path
}

/// N of an idempotency key `mailer:job-N/http/0`.
fn job_of(key: &str) -> Option<usize> {
    key.strip_prefix("mailer:job-")?
        .strip_suffix("/http/0")?
        .parse()
        .ok()
}

/// Run alone: its bound on the busiest second counts requests where they arrive, so it holds
/// the jitter between a run's admission and its request, which a loaded machine decides (eight
/// tests at once on two cores made a second of 25 runs).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "run alone by scripts/test, after the other tests"]
async fn two_hosts_together_keep_a_plugin_under_its_rate() {
    let api = ApiServer::answering("127.0.0.1", |req, before| {
        let job = req.header("idempotency-key").unwrap_or_default();
        let first = !before
            .iter()
            .any(|r| r.header("idempotency-key") == Some(job));
        let fails = job_of(job).is_some_and(|n| n >= FAIL_ONCE_FROM);
        if first && fails {
            Reply::Status(503)
        } else {
            Reply::Status(200)
        }
    });
    let env = TestEnv::new();
    let manifest = format!(
        "[idempotency]\nkey = \"attribute:job\"\n[capabilities]\nhttp = [\"http://{}\"]\n\
         [limits]\nrate = \"20/s\"\nmax-attempts = 2\n",
        api.addr()
    );
    env.install("mailer", "fixture", &manifest);
    std::fs::create_dir_all(env.data_dir()).expect("data directory");
    let queue = unique("reminders");
    create_queue(&queue, &[]).await;
    create_queue(&format!("{queue}-dlq"), &[]).await;
    let ns = unique_namespace("rate");
    let (a, b) = (
        config_file(&env, "a", &ns, &queue),
        config_file(&env, "b", &ns, &queue),
    );
    let sqs = SqsQueue::from_sdk_config(&sdk_config());
    let url = api.url("/send");
    let msgs: Vec<Outgoing> = (0..JOBS)
        .map(|i| {
            Outgoing::new(&queue, format!("post:{url}"))
                .with_attribute(Attribute::string("job", format!("job-{i}")))
        })
        .collect();
    for chunk in msgs.chunks(10) {
        sqs.send(chunk).await.expect("send");
    }
    let hosts = tokio::task::spawn_blocking(move || {
        (
            HostProcess::start_consuming(&a),
            HostProcess::start_consuming(&b),
        )
    })
    .await
    .expect("both hosts started");
    let deadline = Instant::now() + Duration::from_secs(120);
    let done = || {
        let requests = api.requests();
        let ok: std::collections::BTreeSet<String> = requests
            .iter()
            .filter_map(|r| r.header("idempotency-key").map(str::to_string))
            .collect();
        ok.len() == JOBS && requests.len() >= JOBS + (JOBS - FAIL_ONCE_FROM)
    };
    while !done() {
        assert!(
            Instant::now() < deadline,
            "not every job ran: {} requests",
            api.requests().len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (a, b) = hosts;
    // Both hosts' counts, added up.
    let counted = || {
        let mut outcomes: BTreeMap<&str, f64> = BTreeMap::new();
        for host in [&a, &b] {
            let (status, metrics) = get(host.admin_addr(), "/metrics");
            assert_eq!(status, 200);
            for outcome in ["acked", "dead_lettered", "rate_limited", "retried"] {
                let n = sample(
                    &metrics,
                    "qhost_messages_handled_total",
                    &[
                        ("queue", queue.as_str()),
                        ("plugin", "mailer"),
                        ("outcome", outcome),
                    ],
                )
                .unwrap_or(0.0);
                *outcomes.entry(outcome).or_default() += n;
            }
        }
        outcomes
    };
    // The last acks land a moment after the last request.
    eventually(
        Duration::from_secs(10),
        "every run's ack counted",
        async || counted()["acked"] >= JOBS as f64,
    )
    .await;
    let outcomes = counted();
    a.stop();
    b.stop();

    let requests = api.requests();
    let runs = requests.len();
    assert_eq!(
        runs,
        JOBS + (JOBS - FAIL_ONCE_FROM),
        "each job ran once, the failing ones twice"
    );
    let first = requests.first().expect("requests").at;
    let last = requests.last().expect("requests").at;
    let seconds = last.duration_since(first).as_secs_f64();
    let observed = (runs - 1) as f64 / seconds;
    println!("{runs} runs in {seconds:.2} s: {observed:.2}/s against a limit of {RATE}/s");
    assert!(observed <= RATE * 1.1, "{observed:.2}/s over {RATE}/s");
    // In any one second: the rate, plus its burst of 2, plus 2 for the jitter between a slot
    // and the request's arrival.
    let busiest = requests
        .iter()
        .map(|r| {
            let end = r.at + Duration::from_secs(1);
            requests
                .iter()
                .filter(|o| o.at >= r.at && o.at < end)
                .count()
        })
        .max()
        .unwrap_or(0);
    println!("busiest second: {busiest} runs");
    assert!(busiest <= 24, "{busiest} runs within one second");
    assert_eq!(outcomes["acked"], JOBS as f64, "{outcomes:?}");
    assert_eq!(outcomes["dead_lettered"], 0.0, "{outcomes:?}");
    assert!(
        drain(&format!("{queue}-dlq")).await.is_empty(),
        "nothing dead-lettered"
    );
    assert!(
        outcomes["rate_limited"] > 0.0,
        "nothing was over the rate: {outcomes:?}"
    );
    let jobs: std::collections::BTreeSet<usize> = requests
        .iter()
        .filter_map(|r| job_of(r.header("idempotency-key")?))
        .collect();
    assert_eq!(
        jobs.len(),
        JOBS,
        "every job reached the API under its own key"
    );
}
