//! The machine's NATS server with JetStream (`QHOST_NATS_URL`, by default
//! `nats://127.0.0.1:4222`) as the tests use it: stream names of a test's own, read back and
//! deleted after it, a failed test's too.

use async_nats::jetstream;

/// The server's URL.
pub fn url() -> String {
    std::env::var("QHOST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// A stream name no other test uses, after `name`.
pub fn unique(name: &str) -> String {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("qhost_{name}_{}", &tag[..8])
}

/// The `[source]` table of a host consuming JetStream on the server.
pub fn source_table() -> String {
    format!("[source]\nkind = \"nats\"\nurl = \"{}\"\n", url())
}

/// Streams a test made (by its hosts or itself) on one server, deleted when the value is
/// dropped.
#[derive(Debug)]
pub struct Streams {
    url: String,
    names: Vec<String>,
}

impl Streams {
    /// Streams `names` on the machine's server, to delete at the end.
    pub fn new(names: &[&str]) -> Streams {
        Streams::on(&url(), names)
    }

    /// Streams `names` on the server at `url`, to delete at the end.
    pub fn on(url: &str, names: &[&str]) -> Streams {
        Streams {
            url: url.to_string(),
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    /// JetStream on the server at `url`, for a test's own reads.
    async fn context(url: &str) -> jetstream::Context {
        let client = async_nats::connect(url).await.expect("connect to NATS");
        jetstream::new(client)
    }

    /// How many messages stream `name` holds.
    pub async fn messages(&self, name: &str) -> u64 {
        let js = Self::context(&self.url).await;
        let mut stream = js.get_stream(name).await.expect("the stream");
        stream.info().await.expect("its info").state.messages
    }

    /// The messages stream `name` holds, oldest first: each one's body and headers (the
    /// first value of each).
    pub async fn read(&self, name: &str) -> Vec<(Vec<u8>, Vec<(String, String)>)> {
        let js = Self::context(&self.url).await;
        let mut stream = js.get_stream(name).await.expect("the stream");
        let state = stream.info().await.expect("its info").state.clone();
        let mut out = Vec::new();
        for seq in state.first_sequence..=state.last_sequence {
            let Ok(m) = stream.get_raw_message(seq).await else {
                continue;
            };
            let headers = (m.headers.iter())
                .filter_map(|(k, v)| Some((k.to_string(), v.first()?.as_str().to_string())))
                .collect();
            out.push((m.payload.to_vec(), headers));
        }
        out
    }

    /// Consumer `consumer` of stream `name`: (messages not yet delivered, delivered and not
    /// acked).
    pub async fn pending(&self, name: &str, consumer: &str) -> (u64, usize) {
        let js = Self::context(&self.url).await;
        let stream = js.get_stream(name).await.expect("the stream");
        let mut c: jetstream::consumer::PullConsumer =
            stream.get_consumer(consumer).await.expect("the consumer");
        let info = c.info().await.expect("its info");
        (info.num_pending, info.num_ack_pending)
    }
}

impl Drop for Streams {
    /// Deletes the streams from a thread of its own (a test's runtime may be ending).
    fn drop(&mut self) {
        let (url, names) = (self.url.clone(), std::mem::take(&mut self.names));
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let client = async_nats::connect(url).await.map_err(|e| e.to_string())?;
                let js = jetstream::new(client);
                for name in names {
                    let _ = js.delete_stream(&name).await;
                }
                Ok::<(), String>(())
            })
        })
        .join();
        if !matches!(deleted, Ok(Ok(()))) {
            eprintln!("could not delete a test's streams: {deleted:?}");
        }
    }
}

/// A nats-server of a test's own, with JetStream storing in a directory of its own, on a free
/// loopback port: for tests that stop or kill the server (never the machine's).
#[derive(Debug)]
pub struct NatsServer {
    port: u16,
    store: tempfile::TempDir,
    child: Option<std::process::Child>,
}

impl NatsServer {
    /// Starts one and waits until it listens.
    pub fn start() -> NatsServer {
        let mut server = NatsServer {
            port: crate::redis_server::free_port(),
            store: tempfile::tempdir().expect("a store directory"),
            child: None,
        };
        server.restart();
        server
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills it, as a crash would: what it stored stays in its directory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it (SIGSTOP): its connections stay open and silent, until [`NatsServer::resume`].
    pub fn pause(&self) {
        crate::redis_server::signal(self.child.as_ref().expect("running"), "STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        crate::redis_server::signal(self.child.as_ref().expect("running"), "CONT");
    }

    /// Starts (again) on the same port and store, and waits until it listens.
    pub fn restart(&mut self) {
        self.kill();
        let child = std::process::Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server (scripts/install-test-tools installs it)");
        self.child = Some(child);
        crate::redis_server::wait_until_listening(self.port, "nats-server");
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
