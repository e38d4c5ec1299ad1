//! The machine's RabbitMQ for the tests (`QHOST_RABBITMQ_URL`, by default guest on
//! 127.0.0.1:5672): queue names of each test's own, deleted after it, and `rabbitmqctl` to
//! close one host's connection (never the whole server's: other tests share it).

use std::process::Command;
use std::time::{Duration, Instant};

use qhost::sources::{DelayBy, QueueSource, QueueType, RabbitQueue, RabbitSettings};

/// The broker's URL.
pub fn url() -> String {
    std::env::var("QHOST_RABBITMQ_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// A client of the broker for a test's own sends, reads and clean-up, declaring quorum queues.
pub fn client() -> RabbitQueue {
    RabbitQueue::new(settings(500))
}

/// The settings of a source on the broker whose consumers hold `prefetch`, declaring quorum
/// queues.
pub fn settings(prefetch: u16) -> RabbitSettings {
    RabbitSettings {
        url: url(),
        prefetch,
        declare: Some(QueueType::Quorum { delivery_limit: 20 }),
        delay_by: DelayBy::DelayQueue,
        connection_name: format!("qhost-e2e {}", std::process::id()),
        ordered: Default::default(),
        consumer_timeout: RabbitSettings::DEFAULT_CONSUMER_TIMEOUT,
        exchanges: Default::default(),
    }
}

/// A queue name no other test uses.
pub fn unique(name: &str) -> String {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("qhost-e2e-{name}-{}", &tag[..8])
}

/// The `[source]` table of a host on the broker.
pub fn source_table(prefetch: u32) -> String {
    format!(
        "[source]\nkind = \"rabbitmq\"\nurl = \"{}\"\nprefetch = {prefetch}\n",
        url()
    )
}

/// Deletes `queues`, each with its dead-letter queue (`NAME-dlq`) and delay queues.
pub async fn delete(client: &RabbitQueue, queues: &[String]) {
    for q in queues {
        for name in [q.to_string(), format!("{q}-dlq")] {
            client.delete(&name).await.expect("delete a test queue");
        }
        for secs in (1..=10).chain((15..=60).step_by(5)) {
            let delay = format!("{q}.qhost-delay-{secs}s");
            client.delete(&delay).await.expect("delete a delay queue");
        }
    }
}

/// Deletes the exchanges named `names` (gone already is fine): Celery declares a direct
/// exchange named after each queue it sends to or consumes, its worker again at each start.
pub async fn delete_exchanges(names: &[String]) {
    let props = lapin::ConnectionProperties::default();
    let conn = lapin::Connection::connect(&url(), props)
        .await
        .expect("RabbitMQ");
    for name in names {
        let channel = conn.create_channel().await.expect("a channel");
        let options = lapin::options::ExchangeDeleteOptions::default();
        // A missing exchange closes the channel with 404: nothing to clean up.
        let _ = channel.exchange_delete(name.as_str().into(), options).await;
    }
    let _ = conn.close(200, "cleaned up".into()).await;
}

/// A test's queues: named for it, deleted when it ends (with any exchange of the same name
/// Celery declared), passed or failed.
#[derive(Debug)]
pub struct TestQueues(Vec<String>);

impl TestQueues {
    /// `names`, each made unique to this test.
    pub fn new(names: &[&str]) -> TestQueues {
        TestQueues(names.iter().map(|n| unique(n)).collect())
    }

    /// The `i`th queue's name.
    pub fn name(&self, i: usize) -> &str {
        &self.0[i]
    }
}

impl Drop for TestQueues {
    fn drop(&mut self) {
        let names = std::mem::take(&mut self.0);
        // A runtime of its own: the test's may be gone, or be the one dropping this.
        let deleted = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                delete(&client(), &names).await;
                delete_exchanges(&names).await;
            })
        });
        if deleted.join().is_err() {
            eprintln!("the test's RabbitMQ queues were not all deleted (the panic above says why)");
        }
    }
}

/// Every message of `queue`, received and settled, until none came for `quiet`.
pub async fn drain(client: &RabbitQueue, queue: &str, quiet: Duration) -> Vec<qhost::Received> {
    let mut all = Vec::new();
    loop {
        let got = (client.receive(queue, 100, Duration::ZERO, quiet).await).expect("receive");
        if got.is_empty() {
            return all;
        }
        let handles: Vec<String> = got.iter().map(|m| m.handle.clone()).collect();
        client.settle(queue, &handles).await.expect("settle");
        all.extend(got);
    }
}

/// Messages ready in `queue` (none held by a consumer).
pub async fn ready(client: &RabbitQueue, queue: &str) -> u64 {
    client.depth(queue).await.expect("depth").visible
}

/// Closes the broker-side connections whose client-given name is `name` (`rabbitmqctl
/// close_connection`), as a network failure or an operator would; returns how many.
pub fn close_connections(name: &str) -> usize {
    let out = Command::new("rabbitmqctl")
        .args([
            "list_connections",
            "-q",
            "--no-table-headers",
            "pid",
            "client_properties",
        ])
        .output()
        .expect("rabbitmqctl runs");
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    let pids: Vec<&str> = (listed.lines())
        // The name whole, quoted as the broker lists it: `qhost pid 12` must not match `…123`.
        .filter(|l| l.contains(&format!("{{\"connection_name\",\"{name}\"}}")))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for pid in &pids {
        let closed = Command::new("rabbitmqctl")
            .args(["close_connection", pid, "closed by a qhost test"])
            .output()
            .expect("rabbitmqctl runs");
        assert!(closed.status.success(), "{closed:?}");
    }
    pids.len()
}

/// Waits until `check` holds, up to `limit`; panics with `what` otherwise.
pub async fn wait_for(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Each message of `queue` with its headers, read without taking it (`basic_get`, never
/// acked, so each goes back when the connection closes): the broker's `x-death` header says
/// why it dead-lettered one.
pub fn headers_in(queue: &str) -> String {
    let code = "for m in iter(lambda: ch.basic_get(sys.argv[1]), None): \
        print(m.body, m.properties.get('application_headers'))";
    String::from_utf8_lossy(&py_amqp(code, &[queue])).into_owned()
}

/// Runs `code` (Python, with `ch` a channel of a py-amqp connection to the broker and the
/// arguments in `sys.argv[1:]`) from the tools' Python; its stdout.
fn py_amqp(code: &str, args: &[&str]) -> Vec<u8> {
    let code = format!(
        "import sys, amqp\n\
         c = amqp.Connection('127.0.0.1:5672', userid='guest', password='guest'); c.connect()\n\
         ch = c.channel()\n{code}\nc.close()"
    );
    python(&[["-c", code.as_str()].as_slice(), args].concat())
}

/// Binds `queue` to `exchange` for `routing_key`, as a publisher's topology does (py-amqp, from
/// the tools' virtual environment; qhost itself binds nothing). Deleting the queue unbinds it.
pub fn bind(queue: &str, exchange: &str, routing_key: &str) {
    let code = "ch.queue_bind(sys.argv[1], exchange=sys.argv[2], routing_key=sys.argv[3])";
    py_amqp(code, &[queue, exchange, routing_key]);
}

/// Celery's producer sends `n` `proj.tasks.work` tasks running `command` to `queue`.
pub fn celery_send(queue: &str, n: usize, command: &str) {
    let n = n.to_string();
    python(&[
        "tests/support/celery_rabbit_worker.py",
        &url(),
        queue,
        &n,
        command,
    ]);
}

pub use crate::python;

/// A Celery worker on `queue` (a thread pool of four, a node name of its own), its effects
/// appended to `effects`.
pub fn celery_worker(
    queue: &str,
    effects: &std::path::Path,
    acks_late: bool,
) -> std::process::Child {
    let root = crate::workspace();
    std::process::Command::new(root.join("target/tools/moto/bin/python"))
        .args([
            "-m",
            "celery",
            "-A",
            "celery_rabbit_worker",
            "worker",
            "-Q",
            queue,
        ])
        .args([
            "--pool=threads",
            "-c",
            "4",
            "--without-gossip",
            "--without-mingle",
        ])
        // A node name of its own: workers of two tests at once would otherwise share
        // `celery@HOST`, and its exclusive control queue, and one of them would not start.
        .args(["-n", &format!("{}@%h", unique("worker"))])
        .args(["--without-heartbeat", "-l", "WARNING"])
        .env("PYTHONPATH", root.join("tests/support"))
        .env("QHOST_E2E_AMQP", url())
        .env("QHOST_E2E_QUEUE", queue)
        .env("QHOST_E2E_OUT", effects)
        .env("QHOST_E2E_ACKS_LATE", if acks_late { "1" } else { "0" })
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("a Celery worker starts")
}

/// Lines of `path` (none while it does not exist).
pub fn lines_of(path: &std::path::Path) -> Vec<String> {
    (std::fs::read_to_string(path).unwrap_or_default().lines())
        .map(str::to_string)
        .collect()
}
