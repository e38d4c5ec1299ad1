//! Real Redis for the tests: the shared server (127.0.0.1:6379, or `QHOST_TEST_REDIS_URL`)
//! with a fresh namespace per test, or a private `redis-server` on a free port for tests that
//! stop and restart it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shared server's URL.
pub fn shared_url() -> String {
    std::env::var("QHOST_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

/// A namespace no other test uses.
pub fn unique_namespace(test: &str) -> String {
    format!("qhost-test-{test}-{}", uuid::Uuid::new_v4().simple())
}

/// A connection for reading what the host wrote. The redis crate's default deadline for an
/// answer (half a second) is for a service's calls; a test's pipeline of hundreds of reads on a
/// machine busy with other tests may take longer, and waiting is right for it.
pub async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    let patient = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(10)))
        .set_response_timeout(Some(std::time::Duration::from_secs(30)));
    redis::Client::open(url)
        .expect("Redis URL")
        .get_multiplexed_async_connection_with_config(&patient)
        .await
        .expect("Redis is reachable")
}

/// A record's state as a word: `leased`, `completed` or `released` (the store keeps one
/// letter).
pub fn state_word(letter: &str) -> String {
    match letter {
        "l" => "leased",
        "c" => "completed",
        "r" => "released",
        other => other,
    }
    .to_string()
}

/// Reads a key record as `{state letter, fencing token}`, whichever form it has: a hash
/// (leased, released, or completed with its outbox unsent), or the string `c:TOKEN[:DIGEST]`
/// a completed record becomes.
const RECORD_LUA: &str = "if redis.call('TYPE', KEYS[1]).ok == 'string' then \
     return {'c', string.match(redis.call('GET', KEYS[1]), '^c:(%d+)')} end \
     return redis.call('HMGET', KEYS[1], 's', 'f')";

/// The command that reads a key record (see [`record`]); on a cluster it goes to the key's slot.
pub fn record_cmd(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(RECORD_LUA).arg(1).arg(key);
    cmd
}

/// A key record's (state, fencing token), as [`record_cmd`] reads it.
pub fn record_reply(reply: (Option<String>, Option<u64>)) -> (Option<String>, Option<u64>) {
    (reply.0.as_deref().map(state_word), reply.1)
}

/// A key record: (state, fencing token).
pub async fn record(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> (Option<String>, Option<u64>) {
    let reply = record_cmd(key).query_async(conn).await.expect("a record");
    record_reply(reply)
}

/// The (state, fencing token) of each of `plugin`'s `keys` in namespace `ns` on the shared
/// server, read in pipelines.
pub async fn records(
    ns: &str,
    plugin: &str,
    keys: &[String],
) -> Vec<(Option<String>, Option<u64>)> {
    let mut conn = connect(&shared_url()).await;
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(500) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.add_command(record_cmd(&qhost::testing::scoped_key(ns, plugin, k)));
        }
        let rows: Vec<(Option<String>, Option<u64>)> =
            pipe.query_async(&mut conn).await.expect("pipeline");
        out.extend(rows.into_iter().map(record_reply));
    }
    out
}

/// A `redis-server` of this test's own, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

/// A free loopback port.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl RedisServer {
    /// Starts a server that keeps nothing on disk.
    pub fn start() -> Self {
        let mut server = RedisServer {
            port: free_port(),
            child: None,
        };
        server.restart();
        server
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (as a crash would: no shutdown, nothing saved).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server (SIGSTOP): its connections stay open and silent, as a frozen or
    /// partitioned server's would, until [`RedisServer::resume`].
    pub fn pause(&self) {
        signal(self.child.as_ref().expect("running"), "STOP");
    }

    /// Lets a paused server go on (SIGCONT): it then reads and runs what was sent meanwhile.
    pub fn resume(&self) {
        signal(self.child.as_ref().expect("running"), "CONT");
    }

    /// Starts (again) on the same port and waits until it answers.
    pub fn restart(&mut self) {
        self.kill();
        let child = spawn_redis_server(None, &["--port", &self.port.to_string()]);
        self.child = Some(child);
        wait_until_listening(self.port, "redis-server");
    }
}

/// Sends `SIG{name}` to `child`.
pub(crate) fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{name} {}", child.id());
}

/// Starts `redis-server ARGS` on loopback, keeping nothing on disk, in `dir` if given: the one
/// way the tests start a server of their own (plain, TLS, or a cluster node).
pub(crate) fn spawn_redis_server(dir: Option<&std::path::Path>, args: &[&str]) -> Child {
    let mut command = Command::new("redis-server");
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command
        .args(args)
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server is installed (scripts/install-test-tools installs it)")
}

/// Waits (up to 10 s) until something accepts connections on loopback `port`.
pub(crate) fn wait_until_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not start on port {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
