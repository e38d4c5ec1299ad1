//! A Redis Cluster's primaries as qhost batches to them: which primary serves which slots, as
//! last asked (`CLUSTER SLOTS`), and a direct connection to each.
//!
//! The cluster client routes each command by its own slot map, but it sends a pipeline to one
//! slot's node only, and refuses one whose commands span slots; a batch of 10 leases would then
//! be up to 10 round trips. Grouping a batch by *node* (every command in a group is for a slot
//! that node serves) makes it at most one round trip per primary: Redis itself only requires
//! each command's keys to share a slot, not a pipeline's.
//!
//! Such a pipeline goes over a direct connection, not through the cluster client, because the
//! client answers a `MOVED` anywhere in a pipeline by sending the *whole* pipeline again to
//! the new node, and on to the next: commands that had already run would run twice. Over a
//! direct connection a stale map's `MOVED` (or `ASK` while a slot migrates) is just the reply
//! of a command that did not run; the caller sends those commands again alone, through the
//! cluster client's routing, and the map is read again before the next batch.

use std::collections::HashMap;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, ConnectionInfo, RedisResult, TlsCertificates, Value};

/// A primary's address, as the cluster announces it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    /// Host or IP.
    pub(crate) host: String,
    /// Port.
    pub(crate) port: u16,
}

/// Slot ranges and their primaries, sorted by first slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeMap {
    ranges: Vec<(u16, u16, Node)>,
}

impl NodeMap {
    /// The map a `CLUSTER SLOTS` reply describes (`[[start, end, [host, port, id, …],
    /// replicas…], …]`), or `None` for a reply of another shape, or one naming a primary
    /// without a usable address.
    pub(crate) fn from_cluster_slots(reply: &Value) -> Option<NodeMap> {
        let Value::Array(entries) = reply else {
            return None;
        };
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(fields) = entry else {
                return None;
            };
            let [start, end, primary, ..] = fields.as_slice() else {
                return None;
            };
            let (Value::Int(start), Value::Int(end)) = (start, end) else {
                return None;
            };
            let node = node(primary)?;
            ranges.push((u16::try_from(*start).ok()?, u16::try_from(*end).ok()?, node));
        }
        ranges.sort_by_key(|(start, _, _)| *start);
        Some(NodeMap { ranges })
    }

    /// The primary serving `slot`, if the map knows one.
    pub(crate) fn node_of(&self, slot: u16) -> Option<&Node> {
        let i = self.ranges.partition_point(|(start, _, _)| *start <= slot);
        let (_, end, node) = self.ranges.get(i.checked_sub(1)?)?;
        (slot <= *end).then_some(node)
    }
}

/// The primaries of one cluster: the node map and a direct connection to each primary.
pub struct Primaries {
    /// The map as last read; `None` until read, and after a command met a moved slot.
    map: arc_swap::ArcSwapOption<NodeMap>,
    /// Direct connections, opened on first use (each reconnects by itself).
    direct: tokio::sync::Mutex<HashMap<Node, ConnectionManager>>,
    /// A seed node's settings (credentials, TLS, database), which every node shares.
    seed: ConnectionInfo,
    /// The CAs to trust, when not the platform's.
    certificates: Option<TlsCertificates>,
    /// Timeouts and reconnection, as for a single server.
    config: ConnectionManagerConfig,
}

impl std::fmt::Debug for Primaries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Primaries").finish_non_exhaustive()
    }
}

impl Primaries {
    /// Primaries reached with `seed`'s settings.
    pub(crate) fn new(
        seed: ConnectionInfo,
        certificates: Option<TlsCertificates>,
        config: ConnectionManagerConfig,
    ) -> Self {
        Primaries {
            map: arc_swap::ArcSwapOption::empty(),
            direct: tokio::sync::Mutex::default(),
            seed,
            certificates,
            config,
        }
    }

    /// The node map, if read.
    pub(crate) fn map(&self) -> Option<std::sync::Arc<NodeMap>> {
        self.map.load_full()
    }

    /// Replaces the node map (`None`: read it again before the next batch).
    pub(crate) fn set_map(&self, map: Option<std::sync::Arc<NodeMap>>) {
        self.map.store(map);
    }

    /// The direct connection to `node`, opened if it is the first use.
    pub(crate) async fn connection(&self, node: &Node) -> RedisResult<ConnectionManager> {
        let mut direct = self.direct.lock().await;
        if let Some(conn) = direct.get(node) {
            return Ok(conn.clone());
        }
        let info = self.seed.clone().set_addr(match self.seed.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: node.host.clone(),
                port: node.port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(node.host.clone(), node.port),
        });
        let client = match &self.certificates {
            Some(certificates) => redis::Client::build_with_tls(info, certificates.clone())?,
            None => redis::Client::open(info)?,
        };
        let conn = client
            .get_connection_manager_with_config(self.config.clone())
            .await?;
        direct.insert(node.clone(), conn.clone());
        Ok(conn)
    }
}

/// `[host, port, …]`. An empty host means "the node you asked", which cannot be routed to by
/// address: such a map is not used.
fn node(value: &Value) -> Option<Node> {
    let Value::Array(fields) = value else {
        return None;
    };
    let [host, port, ..] = fields.as_slice() else {
        return None;
    };
    let host = match host {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok()?,
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    let Value::Int(port) = port else {
        return None;
    };
    if host.is_empty() || host == "?" {
        return None;
    }
    Some(Node {
        host,
        port: u16::try_from(*port).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        let primary = Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]);
        let replica = Value::Array(vec![bulk(host), Value::Int(port + 1), bulk("id2")]);
        Value::Array(vec![Value::Int(start), Value::Int(end), primary, replica])
    }

    #[test]
    fn every_slot_maps_to_the_primary_serving_its_range() {
        let reply = Value::Array(vec![
            range(10923, 16383, "127.0.0.1", 7003),
            range(0, 5460, "127.0.0.1", 7001),
            range(5461, 10922, "127.0.0.1", 7002),
        ]);
        let map = NodeMap::from_cluster_slots(&reply).expect("a map");
        let port = |slot| map.node_of(slot).map(|n| n.port);
        assert_eq!(port(0), Some(7001));
        assert_eq!(port(5460), Some(7001));
        assert_eq!(port(5461), Some(7002));
        assert_eq!(port(10923), Some(7003));
        assert_eq!(port(16383), Some(7003));
    }

    #[test]
    fn a_slot_no_range_covers_has_no_node() {
        let reply = Value::Array(vec![range(100, 200, "10.0.0.1", 6379)]);
        let map = NodeMap::from_cluster_slots(&reply).expect("a map");
        assert_eq!(map.node_of(99), None);
        assert_eq!(map.node_of(201), None);
        assert_eq!(map.node_of(150).map(|n| n.host.as_str()), Some("10.0.0.1"));
    }

    #[test]
    fn a_reply_without_routable_addresses_is_no_map() {
        assert_eq!(NodeMap::from_cluster_slots(&Value::Nil), None);
        let unnamed = Value::Array(vec![range(0, 16383, "", 7001)]);
        assert_eq!(NodeMap::from_cluster_slots(&unnamed), None);
        let short = Value::Array(vec![Value::Array(vec![Value::Int(0)])]);
        assert_eq!(NodeMap::from_cluster_slots(&short), None);
    }
}
