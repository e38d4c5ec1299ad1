//! A fleet for the flow tests and the flow bench (docs/flow.md): one queue (and its dead-letter
//! queue) on an SQS-compatible server, a namespace in the shared Redis, and hosts consuming
//! the queue with a plugin `flow` of the fixture, each run a `post:URL` to an API on loopback
//! tagged with its tenant.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use qhost::sources::{QueueSource as _, SqsQueue};
use qhost::{Attribute, Outgoing};

use crate::admin::{get, sample};
use crate::harness::{TestEnv, eventually};
use crate::processes::HostProcess;
use crate::redis_server::{shared_url, unique_namespace};
use crate::sqs_server::{drain_at, endpoint, fleet_host_config, sdk_config_for, unique};

/// A fleet's queue and the configurations of its hosts.
#[derive(Debug)]
pub struct Fleet {
    /// The queue its hosts consume.
    pub queue: String,
    /// Its namespace in Redis.
    pub ns: String,
    env: TestEnv,
    /// The SQS-compatible server it uses.
    pub endpoint: String,
}

impl Fleet {
    /// A queue (and its dead-letter queue) on the shared SQS-compatible server and a plugin
    /// `flow` of the fixture with `manifest` (its `[flow]` and grants).
    pub async fn new(test: &str, manifest: &str) -> Fleet {
        Fleet::on(endpoint(), test, manifest).await
    }

    /// As [`Fleet::new`], on the server at `endpoint`.
    pub async fn on(endpoint: &str, test: &str, manifest: &str) -> Fleet {
        let env = TestEnv::new();
        env.install("flow", "fixture", manifest);
        std::fs::create_dir_all(env.data_dir()).expect("data directory");
        let fleet = Fleet {
            queue: unique(test),
            ns: unique_namespace(test),
            env,
            endpoint: endpoint.to_string(),
        };
        fleet.create_queue(&fleet.queue).await;
        fleet
    }

    /// Creates `queue` and its dead-letter queue on the fleet's server.
    pub async fn create_queue(&self, queue: &str) {
        let admin = aws_sdk_sqs::Client::new(&sdk_config_for(&self.endpoint));
        for name in [queue.to_string(), format!("{queue}-dlq")] {
            let created = admin.create_queue().queue_name(name).send().await;
            created.expect("create queue");
        }
    }

    /// The configuration of host `name` with `slots` in flight.
    pub fn host(&self, name: &str, slots: usize) -> PathBuf {
        let redis = format!(
            "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{}\"",
            shared_url(),
            self.ns
        );
        let path = fleet_host_config(&self.env, name, slots, &redis, (&self.queue, "flow"));
        let text = std::fs::read_to_string(&path).expect("config file");
        std::fs::write(&path, text.replace(endpoint(), &self.endpoint)).expect("config file");
        path
    }

    /// Starts hosts `names`, each with `slots` in flight.
    pub async fn start(&self, names: &[&str], slots: usize) -> Vec<HostProcess> {
        let configs: Vec<PathBuf> = names.iter().map(|n| self.host(n, slots)).collect();
        tokio::task::spawn_blocking(move || {
            configs
                .iter()
                .map(|c| HostProcess::start_consuming(c))
                .collect()
        })
        .await
        .expect("hosts started")
    }

    /// Sends `post:URL` messages, one per `(url, tenant)`.
    pub async fn send(&self, messages: impl IntoIterator<Item = (String, String)>) {
        let sqs = SqsQueue::from_sdk_config(&sdk_config_for(&self.endpoint));
        let all: Vec<Outgoing> = (messages.into_iter())
            .map(|(url, tenant)| {
                Outgoing::new(&self.queue, format!("post:{url}"))
                    .with_attribute(Attribute::string("tenant", tenant))
            })
            .collect();
        for chunk in all.chunks(10) {
            sqs.send(chunk).await.expect("send");
        }
    }

    /// The hosts' counts of each outcome, added up.
    pub fn outcomes(&self, hosts: &[&HostProcess]) -> BTreeMap<&'static str, f64> {
        let mut outcomes = BTreeMap::new();
        for host in hosts {
            let (status, metrics) = get(host.admin_addr(), "/metrics");
            assert_eq!(status, 200);
            for outcome in [
                "acked",
                "dead_lettered",
                "retried",
                "flow_limited",
                "fair_share",
            ] {
                let labels = [
                    ("queue", self.queue.as_str()),
                    ("plugin", "flow"),
                    ("outcome", outcome),
                ];
                let n = sample(&metrics, "qhost_messages_handled_total", &labels);
                *outcomes.entry(outcome).or_default() += n.unwrap_or(0.0);
            }
        }
        outcomes
    }

    /// Asserts that nothing was dead-lettered or retried and `acked` runs were acked.
    pub async fn assert_each_once(&self, hosts: &[&HostProcess], acked: usize) {
        eventually(
            Duration::from_secs(20),
            "every run's ack counted",
            async || self.outcomes(hosts)["acked"] >= acked as f64,
        )
        .await;
        let outcomes = self.outcomes(hosts);
        println!("outcomes: {outcomes:?}");
        assert_eq!(outcomes["acked"], acked as f64, "{outcomes:?}");
        assert_eq!(outcomes["dead_lettered"], 0.0, "{outcomes:?}");
        assert_eq!(outcomes["retried"], 0.0, "{outcomes:?}");
        let dlq = drain_at(&self.endpoint, &format!("{}-dlq", self.queue)).await;
        assert!(dlq.is_empty(), "{} dead-lettered", dlq.len());
    }
}
