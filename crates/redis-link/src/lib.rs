//! How the idempotency and payload stores reach Redis: one server through the redis crate's
//! connection manager, or a Redis Cluster through its async cluster client.
//!
//! In a cluster, MOVED and ASK redirections, topology refreshes and reconnection are the
//! client's job for single commands. What stays qhost's is keeping every key a script touches
//! in one slot (the hash tags of `idempotency::key::scoped`), and grouping a batch's commands
//! into pipelines: one per primary, by the node map of [`nodes`] ([`RedisLink::groups`]). A
//! command a stale map sent to the wrong node is answered `MOVED` without running, and the
//! caller sends it again on its own, through the client's routing.
//!
//! URLs are never put in errors whole: a password in one (`redis://:secret@host`) must not reach
//! a log line.
//!
//! Every command, script and pipeline waits for its answer at most [`RedisDeadlines::response`]
//! (the client's response timeout, on the connection manager, the cluster client and the direct
//! connections to primaries alike), and connecting at most [`RedisDeadlines::connect`]: a
//! server that stops answering (stopped, partitioned, a swallowed reply) fails the call instead
//! of hanging it. A call that timed out may still have run on the server; each caller in the
//! stores says why its own call stays correct either way.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
mod nodes;

use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, TlsCertificates, Value};

use nodes::{Node, NodeMap, Primaries};

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
    /// How long connecting and each call may take.
    pub deadlines: RedisDeadlines,
}

/// How long a Redis call may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedisDeadlines {
    /// Connecting to a node (TCP and TLS).
    pub connect: Duration,
    /// Waiting for the answer to one command, script or pipeline.
    pub response: Duration,
}

impl Default for RedisDeadlines {
    /// Answers take well under a millisecond on a healthy server; seconds mean it is gone.
    fn default() -> Self {
        RedisDeadlines {
            connect: Duration::from_secs(3),
            response: Duration::from_secs(5),
        }
    }
}

impl RedisTarget {
    /// One server at `url`.
    pub fn single(url: impl Into<String>) -> Self {
        RedisTarget {
            urls: vec![url.into()],
            cluster: false,
            ca_file: None,
            deadlines: RedisDeadlines::default(),
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
pub fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            format!("{scheme}://{rest}")
        }
        None => "(not a URL)".into(),
    }
}

/// A connection to one server or to a cluster; cheap to clone, and shared by clones.
#[derive(Clone)]
pub enum RedisLink {
    /// One server.
    Single(ConnectionManager),
    /// A Redis Cluster, and its primaries as batches reach them.
    Cluster(ClusterConnection, Arc<Primaries>),
}

impl std::fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RedisLink::Single(_) => "RedisLink::Single",
            RedisLink::Cluster(..) => "RedisLink::Cluster",
        })
    }
}

/// One pipeline's share of a batch: the indices of its keys, and on a cluster where it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// On a cluster, the primary every key of the group is on, by the node map; `None` on a
    /// single server, or for a slot the map does not place.
    pub node: Option<Node>,
    /// On a cluster without a node, the one slot of every key of the group.
    pub slot: Option<u16>,
    /// Positions in the batch.
    pub indices: Vec<usize>,
}

impl RedisLink {
    /// Connects to `target`. An unreachable server or cluster is an error here, at start; later
    /// outages are the client's to recover from.
    pub async fn connect(target: &RedisTarget, timeouts: RedisDeadlines) -> anyhow::Result<Self> {
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
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(timeouts.response))
            .set_connection_timeout(Some(timeouts.connect))
            .set_max_delay(Duration::from_secs(2))
            .set_number_of_retries(2);
        if target.cluster {
            let seed = redis::IntoConnectionInfo::into_connection_info(target.urls[0].as_str())
                .with_context(|| format!("cannot use {shown}"))?;
            let primaries = Primaries::new(seed, certificates.clone(), config);
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
            return Ok(RedisLink::Cluster(conn, Arc::new(primaries)));
        }
        let url = target.urls.first().context("no Redis URL")?;
        let client = match certificates {
            Some(certificates) => redis::Client::build_with_tls(url.as_str(), certificates),
            None => redis::Client::open(url.as_str()),
        }
        .with_context(|| format!("`{}` is not a usable Redis URL", redacted(url)))?;
        let conn = client
            .get_connection_manager_with_config(config)
            .await
            .with_context(|| format!("cannot connect to {shown}"))?;
        Ok(RedisLink::Single(conn))
    }

    /// The pipelines a batch on `keys` takes: one on a single server; on a cluster one per
    /// primary serving them (one per slot for slots the node map does not place).
    pub async fn groups(&self, keys: &[&str]) -> Vec<Group> {
        let RedisLink::Cluster(..) = self else {
            let indices = (0..keys.len()).collect();
            return vec![Group {
                node: None,
                slot: None,
                indices,
            }];
        };
        let map = self.node_map().await;
        group_by_node(map.as_deref(), keys)
    }

    /// Sends `pipe`, one group's pipeline, where the group goes: the server, the group's
    /// primary (directly), or its slot's node. Returns every reply in order (ignored commands'
    /// too), a command's error as its reply.
    pub async fn send(&self, pipe: &Pipeline, group: &Group) -> RedisResult<Vec<Value>> {
        let RedisLink::Cluster(conn, primaries) = self else {
            return self.clone().req_packed_commands(pipe, 0, pipe.len()).await;
        };
        let sent = match (&group.node, group.slot) {
            (Some(node), _) => {
                let mut direct = primaries.connection(node).await?;
                direct.req_packed_commands(pipe, 0, pipe.len()).await
            }
            (None, Some(slot)) => {
                // One slot: a MOVED the client follows moves the whole pipeline, none of which
                // ran.
                let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
                let mut conn = conn.clone();
                conn.route_pipeline(pipe.clone(), 0, pipe.len(), route)
                    .await
            }
            (None, None) => self.clone().req_packed_commands(pipe, 0, pipe.len()).await,
        };
        if sent.is_err() {
            self.forget_nodes();
        }
        sent
    }

    /// Forgets the node map (a command met a moved slot, or a primary failed): the next batch
    /// reads it again.
    pub fn forget_nodes(&self) {
        if let RedisLink::Cluster(_, primaries) = self {
            primaries.set_map(None);
        }
    }

    /// The cluster's node map, read with `CLUSTER SLOTS` if it is not known. `None` when it
    /// cannot be read now (the batch then goes one pipeline per slot).
    async fn node_map(&self) -> Option<Arc<NodeMap>> {
        let RedisLink::Cluster(conn, primaries) = self else {
            return None;
        };
        if let Some(known) = primaries.map() {
            return Some(known);
        }
        let mut conn = conn.clone();
        let any = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let reply = conn
            .route_command(redis::cmd("CLUSTER").arg("SLOTS").clone(), any)
            .await
            .ok()?;
        // A reply qhost cannot route by is remembered as an empty map: slots then group alone.
        let read = Arc::new(NodeMap::from_cluster_slots(&reply).unwrap_or_default());
        primaries.set_map(Some(Arc::clone(&read)));
        Some(read)
    }
}

/// `keys` grouped by the primary `map` places their slot on; keys in slots it does not place
/// are grouped by slot. Groups keep the order of their first key.
fn group_by_node(map: Option<&NodeMap>, keys: &[&str]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let slot = slot(key);
        let node = map.and_then(|m| m.node_of(slot));
        let found = groups.iter_mut().find(|g| match node {
            Some(node) => g.node.as_ref() == Some(node),
            None => g.node.is_none() && g.slot == Some(slot),
        });
        match found {
            Some(group) => group.indices.push(i),
            None => groups.push(Group {
                node: node.cloned(),
                slot: node.is_none().then_some(slot),
                indices: vec![i],
            }),
        }
    }
    groups
}

impl ConnectionLike for RedisLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisLink::Single(c) => c.req_packed_command(cmd),
            RedisLink::Cluster(c, _) => c.req_packed_command(cmd),
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
            RedisLink::Cluster(c, _) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisLink::Single(c) => c.get_db(),
            RedisLink::Cluster(c, _) => c.get_db(),
        }
    }
}

/// The Redis Cluster slot of `key`: CRC16/XMODEM of its first non-empty `{…}` tag (or of the
/// whole key), modulo 16,384.
pub fn slot(key: &str) -> u16 {
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
    fn a_batch_goes_one_pipeline_per_primary_and_one_per_slot_the_map_does_not_place() {
        let keys = ["q:{p:a}", "q:{p:b}", "q:{p:c}", "q:{p:d}", "q:{p:a}"];
        let slots: Vec<u16> = keys.iter().map(|k| slot(k)).collect();
        // Two primaries: slots below 8192, and the rest.
        let entry = |start: i64, end: i64, port: i64| {
            let primary = Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
            ]);
            Value::Array(vec![Value::Int(start), Value::Int(end), primary])
        };
        let reply = Value::Array(vec![entry(0, 8191, 7001), entry(8192, 16383, 7002)]);
        let map = NodeMap::from_cluster_slots(&reply).expect("a map");
        let groups = group_by_node(Some(&map), &keys);
        let low: Vec<usize> = (0..keys.len()).filter(|&i| slots[i] < 8192).collect();
        let high: Vec<usize> = (0..keys.len()).filter(|&i| slots[i] >= 8192).collect();
        let expected: Vec<Vec<usize>> = [low, high].into_iter().filter(|g| !g.is_empty()).collect();
        let got: Vec<Vec<usize>> = groups.iter().map(|g| g.indices.clone()).collect();
        assert_eq!(got.len(), expected.len(), "{groups:?}");
        for g in &expected {
            assert!(got.contains(g), "{groups:?}");
        }
        // Each group goes to the primary serving all its keys.
        for g in &groups {
            let node = g.node.as_ref().expect("a placed group");
            assert!(
                g.indices
                    .iter()
                    .all(|&i| map.node_of(slots[i]) == Some(node)),
                "{g:?}"
            );
        }
        // Without a map, a group is one slot.
        let alone = group_by_node(None, &keys);
        assert_eq!(alone.len(), 4, "{alone:?}");
        assert!(
            alone
                .iter()
                .all(|g| g.indices.iter().all(|&i| Some(slots[i]) == g.slot))
        );
    }

    #[test]
    fn credentials_never_reach_a_message() {
        let target = RedisTarget {
            urls: vec!["rediss://user:s3cret@cache.internal:6380/0".into()],
            cluster: true,
            ca_file: None,
            deadlines: RedisDeadlines::default(),
        };
        let shown = target.display();
        assert_eq!(shown, "the Redis Cluster at rediss://cache.internal:6380/0");
        assert!(!shown.contains("s3cret"));
        assert_eq!(redacted("redis://:pw@h:1"), "redis://h:1");
        assert_eq!(redacted("nonsense"), "(not a URL)");
    }
}
