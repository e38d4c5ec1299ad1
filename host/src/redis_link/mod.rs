//! How the idempotency and payload stores reach Redis: one server through the redis crate's
//! connection manager, or a Redis Cluster through its async cluster client.
//!
//! In a cluster, MOVED and ASK redirections, topology refreshes and reconnection are the
//! client's job. What stays qhost's is keeping every key a script touches in one slot (the hash
//! tags of `idempotency::key::scoped`), and sending each pipeline to one slot only: the cluster
//! client refuses a pipeline whose commands span slots, so callers group commands by `slot`.
//!
//! URLs are never put in errors whole: a password in one (`redis://:secret@host`) must not reach
//! a log line.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, TlsCertificates, Value};

/// Which Redis to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTarget {
    /// `redis://` or `rediss://` URLs: the server, or a cluster's seed nodes.
    pub urls: Vec<String>,
    /// Whether `urls` are nodes of a Redis Cluster.
    pub cluster: bool,
    /// A PEM file of the certificate authorities to trust for `rediss://`, in place of the
    /// platform's (a private CA, as managed services and self-run clusters often use).
    pub ca_file: Option<PathBuf>,
}

impl RedisTarget {
    /// One server at `url`.
    pub fn single(url: impl Into<String>) -> Self {
        RedisTarget {
            urls: vec![url.into()],
            cluster: false,
            ca_file: None,
        }
    }

    /// The target without credentials, for messages: the first URL's scheme, host and port.
    pub fn display(&self) -> String {
        let first = self.urls.first().map(String::as_str).unwrap_or_default();
        let shown = redacted(first);
        if self.cluster {
            format!("the Redis Cluster at {shown}")
        } else {
            format!("Redis at {shown}")
        }
    }
}

/// `url` with any user and password removed.
pub(crate) fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            format!("{scheme}://{rest}")
        }
        None => "(not a URL)".into(),
    }
}

/// Timeouts for one link.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// Connecting to a node.
    pub(crate) connect: Duration,
    /// Waiting for a reply.
    pub(crate) response: Duration,
}

/// A connection to one server or to a cluster; cheap to clone, and shared by clones.
#[derive(Clone)]
pub(crate) enum RedisLink {
    /// One server.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RedisLink::Single(_) => "RedisLink::Single",
            RedisLink::Cluster(_) => "RedisLink::Cluster",
        })
    }
}

impl RedisLink {
    /// Connects to `target`. An unreachable server or cluster is an error here, at start; later
    /// outages are the client's to recover from.
    pub(crate) async fn connect(target: &RedisTarget, timeouts: Timeouts) -> anyhow::Result<Self> {
        let shown = target.display();
        for url in &target.urls {
            redis::parse_redis_url(url)
                .with_context(|| format!("`{}` is not a Redis URL", redacted(url)))?;
        }
        let certificates = match &target.ca_file {
            Some(path) => Some(TlsCertificates {
                client_tls: None,
                root_cert: Some(std::fs::read(path).with_context(|| {
                    format!("cannot read the Redis CA file {}", path.display())
                })?),
            }),
            None => None,
        };
        if target.cluster {
            let mut builder = ClusterClient::builder(target.urls.clone())
                .connection_timeout(timeouts.connect)
                .response_timeout(timeouts.response)
                .retries(2);
            if let Some(certificates) = certificates {
                builder = builder.certs(certificates);
            }
            let client = builder
                .build()
                .with_context(|| format!("cannot use {shown}"))?;
            let conn = client
                .get_async_connection()
                .await
                .with_context(|| format!("cannot connect to {shown}"))?;
            return Ok(RedisLink::Cluster(conn));
        }
        let url = target.urls.first().context("no Redis URL")?;
        let client = match certificates {
            Some(certificates) => redis::Client::build_with_tls(url.as_str(), certificates),
            None => redis::Client::open(url.as_str()),
        }
        .with_context(|| format!("`{}` is not a usable Redis URL", redacted(url)))?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(timeouts.response))
            .set_connection_timeout(Some(timeouts.connect))
            .set_max_delay(Duration::from_secs(2))
            .set_number_of_retries(2);
        let conn = client
            .get_connection_manager_with_config(config)
            .await
            .with_context(|| format!("cannot connect to {shown}"))?;
        Ok(RedisLink::Single(conn))
    }

    /// Whether commands for different slots must go in different pipelines.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, RedisLink::Cluster(_))
    }
}

impl ConnectionLike for RedisLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisLink::Single(c) => c.req_packed_command(cmd),
            RedisLink::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisLink::Single(c) => c.req_packed_commands(cmd, offset, count),
            RedisLink::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisLink::Single(c) => c.get_db(),
            RedisLink::Cluster(c) => c.get_db(),
        }
    }
}

/// The Redis Cluster slot of `key`: CRC16/XMODEM of its first non-empty `{…}` tag (or of the
/// whole key), modulo 16,384.
pub(crate) fn slot(key: &str) -> u16 {
    let tagged = key
        .find('{')
        .and_then(|open| {
            key[open + 1..]
                .find('}')
                .map(|len| &key[open + 1..open + 1 + len])
        })
        .filter(|tag| !tag.is_empty());
    crc16(tagged.unwrap_or(key).as_bytes()) % 16384
}

/// CRC16/XMODEM, as Redis Cluster uses for key slots.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_redis_cluster_rule() {
        // Reference values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("{a}x"), slot("{b}x"));
    }

    #[test]
    fn credentials_never_reach_a_message() {
        let target = RedisTarget {
            urls: vec!["rediss://user:s3cret@cache.internal:6380/0".into()],
            cluster: true,
            ca_file: None,
        };
        let shown = target.display();
        assert_eq!(shown, "the Redis Cluster at rediss://cache.internal:6380/0");
        assert!(!shown.contains("s3cret"));
        assert_eq!(redacted("redis://:pw@h:1"), "redis://h:1");
        assert_eq!(redacted("nonsense"), "(not a URL)");
    }
}
