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

/// Streams a test made (by its hosts or itself), deleted when the value is dropped.
#[derive(Debug)]
pub struct Streams {
    names: Vec<String>,
}

impl Streams {
    /// Streams `names`, to delete at the end.
    pub fn new(names: &[&str]) -> Streams {
        Streams {
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    /// JetStream on the server, for a test's own reads.
    pub async fn context() -> jetstream::Context {
        let client = async_nats::connect(url()).await.expect("connect to NATS");
        jetstream::new(client)
    }

    /// How many messages stream `name` holds.
    pub async fn messages(name: &str) -> u64 {
        let js = Self::context().await;
        let mut stream = js.get_stream(name).await.expect("the stream");
        stream.info().await.expect("its info").state.messages
    }

    /// Consumer `consumer` of stream `name`: (messages not yet delivered, delivered and not
    /// acked).
    pub async fn pending(name: &str, consumer: &str) -> (u64, usize) {
        let js = Self::context().await;
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
        let names = std::mem::take(&mut self.names);
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let js = Streams::context().await;
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
