//! Flow control and the metrics on RabbitMQ, as on SQS (docs/flow.md, docs/operations.md):
//! two `qhost run` processes on one quorum queue of the machine's RabbitMQ, a tenant held to
//! two runs at once across both, each run a request to an API on loopback that answers after
//! 300 ms. The API sees how many requests ran at once; the hosts' `/metrics` count each
//! message's outcome and pass `promtool check metrics`.

use std::time::Duration;

use qhost::sources::QueueSource as _;
use qhost::{Attribute, Outgoing};
use qhost_e2e::admin::{get, promtool_check, sample};
use qhost_e2e::api_server::{ApiServer, Reply};
use qhost_e2e::harness::{TestEnv, eventually};
use qhost_e2e::processes::HostProcess;
use qhost_e2e::rabbitmq::{TestQueues, client, drain, ready, source_table};
use qhost_e2e::redis_server::{shared_url, unique_namespace};

const HELD_TO: usize = 2;
const MESSAGES: usize = 20;
const RUN: Duration = Duration::from_millis(300);

/// Host `name`'s configuration: `queue` routed to the `flow` plugin, 16 in flight.
fn host_config(env: &TestEnv, ns: &str, name: &str, queue: &str) -> std::path::PathBuf {
    let text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\nmax-in-flight = 16\nshutdown-grace-secs = 10\n\
         [idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{ns}\"\n\
         [retry]\nbase-secs = 0.05\nmax-secs = 1\n{}\
         [[queue]]\nname = \"{queue}\"\nplugin = \"flow\"\nwait-time-secs = 1\n",
        env.plugins_dir(),
        env.data_dir().join(name),
        shared_url(),
        source_table(16),
    );
    let path = (env.plugins_dir().parent())
        .expect("the test directory")
        .join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("config file");
    path
}

/// The hosts' count of `outcome` for `queue`, added up.
fn outcome(hosts: &[HostProcess], queue: &str, outcome: &str) -> f64 {
    let labels = [("queue", queue), ("plugin", "flow"), ("outcome", outcome)];
    (hosts.iter())
        .map(|h| {
            let (status, metrics) = get(h.admin_addr(), "/metrics");
            assert_eq!(status, 200, "{metrics}");
            sample(&metrics, "qhost_messages_handled_total", &labels).unwrap_or(0.0)
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_s_flow_limit_holds_across_two_hosts_on_rabbitmq_and_the_metrics_count_it() {
    let api = ApiServer::answering("127.0.0.1", |_, _| Reply::After(RUN));
    let env = TestEnv::new();
    env.install(
        "flow",
        "fixture",
        &format!(
            "[flow]\nkey = \"attribute:tenant\"\nmax-concurrency = {HELD_TO}\n\
             [capabilities]\nhttp = [\"http://{}\"]\n[limits]\nmax-attempts = 1\n",
            api.addr()
        ),
    );
    let queues = TestQueues::new(&["flow"]);
    let queue = queues.name(0);
    let rabbit = client();
    let dlq = format!("{queue}-dlq");
    rabbit.prepare(queue, &dlq).await.expect("declare");
    let messages: Vec<Outgoing> = (0..MESSAGES)
        .map(|_| {
            Outgoing::new(queue, format!("post:{}", api.url("/run")))
                .with_attribute(Attribute::string("tenant", "A"))
        })
        .collect();
    rabbit.send(&messages).await.expect("send");
    let ns = unique_namespace("rabbit-flow");
    std::fs::create_dir_all(env.data_dir()).expect("data directory");
    let hosts: Vec<HostProcess> = ["a", "b"]
        .into_iter()
        .map(|name| HostProcess::start_consuming(&host_config(&env, &ns, name, queue)))
        .collect();

    eventually(Duration::from_secs(60), "every message acked", async || {
        outcome(&hosts, queue, "acked") >= MESSAGES as f64
    })
    .await;
    let most = api.most_at_once();
    let runs = api.requests().len();
    let (acked, dead, retried) = (
        outcome(&hosts, queue, "acked"),
        outcome(&hosts, queue, "dead_lettered"),
        outcome(&hosts, queue, "retried"),
    );
    let (_, exposition) = get(hosts[0].admin_addr(), "/metrics");
    promtool_check(&exposition, &env.data_dir());
    for host in hosts {
        host.stop();
    }

    assert_eq!(runs, MESSAGES, "each message ran once");
    assert!(most <= HELD_TO, "{most} runs at once, over the limit");
    assert_eq!(most, HELD_TO, "the limit was never used whole");
    assert_eq!((acked, dead, retried), (MESSAGES as f64, 0.0, 0.0));
    assert_eq!(ready(&rabbit, queue).await, 0, "the queue drained");
    let dead_letters = drain(&rabbit, &dlq, Duration::from_millis(300)).await;
    assert!(
        dead_letters.is_empty(),
        "{} dead-lettered",
        dead_letters.len()
    );
}
