//! A real SQS-compatible server for the tests: moto (installed by `scripts/install-test-tools`),
//! one per test process on a free loopback port, driven through aws-sdk-sqs.
//!
//! The server runs under a small shell wrapper that waits on the test process's pipe and kills
//! the server when the pipe closes, so no server outlives its tests. It is started through
//! `tests/support/moto_server.py`, which corrects three things in moto's SQS model (a long poll
//! could hand out a FIFO group's later messages ahead of one still waiting; receives and sends
//! counted the whole queue per message; a delete could lose a concurrent send).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;

/// Credentials and region the tests use; the server accepts any.
pub const TEST_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_REGION", "us-east-1"),
];

/// A running server; it stops when dropped.
#[derive(Debug)]
pub struct Server {
    endpoint: String,
    _wrapper: Mutex<Child>,
}

impl Server {
    /// A server of the caller's own, for a test whose load would slow every other test down
    /// (moto's deletes and visibility changes still cost time in proportion to a queue's depth).
    pub fn start_own() -> Self {
        start()
    }

    /// Its endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

/// The command that starts the server: `QHOST_MOTO_SERVER` if set, else moto's Python running
/// `tests/support/moto_server.py`.
fn moto_server() -> String {
    if let Ok(path) = std::env::var("QHOST_MOTO_SERVER") {
        return path;
    }
    let python = crate::workspace().join("target/tools/moto/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-test-tools",
        python.display()
    );
    let launcher = crate::workspace().join("tests/support/moto_server.py");
    format!("'{}' '{}'", python.display(), launcher.display())
}

fn start() -> Server {
    // A free port is found by binding it and letting it go, so another process (a qhost's
    // admin listener on port 0, in a test running beside this one) may take it before moto
    // does: then moto cannot bind, and what answers there is not moto. Ask, and start again on
    // another port.
    for _ in 0..5 {
        if let Some(server) = start_on_a_free_port() {
            return server;
        }
    }
    panic!("moto did not start on any of five free ports");
}

/// moto on a port that was free a moment ago; `None` when something else answers there.
fn start_on_a_free_port() -> Option<Server> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let script = format!(
        "{} -H 127.0.0.1 -p {port} >/dev/null 2>&1 & pid=$!; echo started; read _; kill $pid",
        moto_server()
    );
    let mut wrapper = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting moto");
    let mut line = String::new();
    let stdout = wrapper.stdout.take().expect("wrapper stdout");
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("wrapper started");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "moto did not start on port {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    if !is_moto(port) {
        // Closing its stdin ends the wrapper, which stops moto if it is running at all.
        drop(wrapper.stdin.take());
        let _ = wrapper.wait();
        return None;
    }
    Some(Server {
        endpoint: format!("http://127.0.0.1:{port}"),
        _wrapper: Mutex::new(wrapper),
    })
}

/// Whether moto answers on `port`: its own API's state, as JSON.
fn is_moto(port: u16) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let asked = stream.write_all(b"GET /moto-api/data.json HTTP/1.0\r\nHost: moto\r\n\r\n");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    asked.is_ok() && answer.starts_with("HTTP/1.") && answer.contains(" 200 ")
}

/// The endpoint of this process's server, started on first use.
pub fn endpoint() -> &'static str {
    static SERVER: OnceLock<Server> = OnceLock::new();
    &SERVER.get_or_init(start).endpoint
}

/// An SDK configuration for the server, with test credentials. The tests' own calls (setting
/// queues up, looking inside) wait up to a minute for an answer: the server is shared by every
/// test of the process, and what they assert is qhost's behaviour, not the server's speed.
pub fn sdk_config() -> aws_config::SdkConfig {
    sdk_config_for(endpoint())
}

/// [`sdk_config`] for the server at `endpoint`.
pub fn sdk_config_for(endpoint: &str) -> aws_config::SdkConfig {
    let credentials =
        aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "qhost-tests");
    let patient = aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(10))
        .operation_attempt_timeout(Duration::from_secs(60))
        .build();
    aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .timeout_config(patient)
        .endpoint_url(endpoint)
        .http_client(qhost::testing::https_client())
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
            credentials,
        ))
        .build()
}

/// A raw SQS client, for setting queues up and looking inside.
pub fn client() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&sdk_config())
}

/// A queue name no other test uses, keeping a `.fifo` suffix.
pub fn unique(name: &str) -> String {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    match name.strip_suffix(".fifo") {
        Some(stem) => format!("{stem}-{}.fifo", &tag[..12]),
        None => format!("{name}-{}", &tag[..12]),
    }
}

/// Creates a queue (FIFO if the name ends in `.fifo`) and returns its URL.
pub async fn create_queue(name: &str, attributes: &[(QueueAttributeName, String)]) -> String {
    let mut req = client().create_queue().queue_name(name);
    if name.ends_with(".fifo") {
        req = req.attributes(QueueAttributeName::FifoQueue, "true");
    }
    for (k, v) in attributes {
        req = req.attributes(k.clone(), v);
    }
    req.send()
        .await
        .expect("create queue")
        .queue_url()
        .expect("queue url")
        .to_string()
}

/// The queue's ARN, for redrive policies.
pub async fn arn(url: &str) -> String {
    let out = client()
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("queue attributes");
    out.attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .expect("arn")
}

/// The server's S3 side (moto serves S3 on the same endpoint), as qhost's payload stores see it.
pub fn s3_payloads() -> qhost::payloads::S3Payloads {
    qhost::payloads::S3Payloads::from_sdk_config(&sdk_config(), true)
}

/// A raw S3 client for the server, path-style, for setting buckets up and looking inside.
pub fn s3_client() -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::config::Builder::from(&sdk_config())
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// Creates a bucket no other test uses and returns its name.
pub async fn create_bucket(name: &str) -> String {
    let bucket = unique(name);
    s3_client()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create bucket");
    bucket
}

/// Object keys in `bucket`.
pub async fn object_keys(bucket: &str) -> Vec<String> {
    let out = s3_client()
        .list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .expect("list objects");
    out.contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect()
}

/// Everything in a queue, in the order received, deleting as it goes (a FIFO group stays
/// blocked while any of its messages is received and not deleted).
pub async fn drain(queue: &str) -> Vec<qhost::Received> {
    drain_at(endpoint(), queue).await
}

/// Takes messages from `queue` until `n` have come (or a minute passed), deleting them.
pub async fn collect(queue: &str, n: usize) -> Vec<qhost::Received> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while got.len() < n && std::time::Instant::now() < deadline {
        got.extend(drain(queue).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    got
}

/// A client for the server at `endpoint` as the tests use it to look inside: patient, since it
/// is the tests' instrument and not what they assert on.
pub fn patient_queue(endpoint: &str) -> qhost::sources::SqsQueue {
    let patient = qhost::sources::AwsDeadlines {
        connect: Duration::from_secs(10),
        call: Duration::from_secs(60),
        receive_margin: Duration::from_secs(60),
    };
    qhost::sources::SqsQueue::with_deadlines(&sdk_config_for(endpoint), patient)
}

/// [`drain`] on the server at `endpoint`.
pub async fn drain_at(endpoint: &str, queue: &str) -> Vec<qhost::Received> {
    crate::harness::take_all(&patient_queue(endpoint), queue, Duration::from_secs(1)).await
}

/// Whether a run of `of` jobs on `queue` is over: `done` of them have shown their effect and
/// nothing is left on the queue. Fails once four minutes have passed since `started`.
pub async fn jobs_done(
    sqs: &qhost::sources::SqsQueue,
    queue: &str,
    done: usize,
    of: usize,
    started: std::time::Instant,
) -> bool {
    use qhost::sources::QueueSource as _;
    let depth = sqs.depth(queue).await.expect("depth");
    if done == of && depth.total() == 0 {
        return true;
    }
    assert!(
        started.elapsed() < Duration::from_secs(240),
        "not done: {done} of {of} jobs, {depth:?} on the queue"
    );
    false
}

/// Writes the configuration of one of several hosts consuming `queue` of the SQS-compatible
/// server with `plugin`, on the store `idempotency` (an `[idempotency]` section), beside
/// `env`'s directories with its own data directory `name`; the file's path.
pub fn fleet_host_config(
    env: &crate::harness::TestEnv,
    name: &str,
    max_in_flight: usize,
    idempotency: &str,
    (queue, plugin): (&str, &str),
) -> std::path::PathBuf {
    let text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\nmax-in-flight = {max_in_flight}\n\
         shutdown-grace-secs = 5\n\
         [source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\nregion = \"us-east-1\"\n\
         {idempotency}\n[retry]\nbase-secs = 0.05\nmax-secs = 1\n\
         [[queue]]\nname = \"{queue}\"\nplugin = \"{plugin}\"\nwait-time-secs = 1\n\
         visibility-timeout-secs = 3\n",
        env.plugins_dir(),
        env.data_dir().join(name),
        endpoint(),
    );
    let path = (env.plugins_dir().parent())
        .expect("the test directory")
        .join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("config file");
    path
}
