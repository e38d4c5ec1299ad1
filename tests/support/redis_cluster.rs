//! A real Redis Cluster for the tests: `redis-server --cluster-enabled yes` on free loopback
//! ports (each with its cluster bus port free too), joined by `redis-cli --cluster create` with
//! one replica per primary, nothing kept on disk past the test, every node killed on drop. It
//! can also speak only TLS (clients, replication and the cluster bus) and ask for a password,
//! with a certificate from a CA made for the test, as managed clusters do.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A running cluster of this test's own.
#[derive(Debug)]
pub struct RedisCluster {
    /// How many of the nodes are primaries.
    primaries: usize,
    ports: Vec<u16>,
    children: Vec<Option<Child>>,
    access: Access,
    _dir: tempfile::TempDir,
}

/// How clients reach the nodes: in the clear, or TLS with a password (the CA in this dir).
#[derive(Clone, Debug, Default)]
struct Access {
    tls: Option<PathBuf>,
}

impl Access {
    /// `redis-cli` arguments for this access.
    fn cli_args(&self) -> Vec<String> {
        match &self.tls {
            Some(dir) => vec![
                "--tls".into(),
                "--cacert".into(),
                dir.join("ca.crt").display().to_string(),
                "-a".into(),
                crate::redis_tls::PASSWORD.into(),
                "--no-auth-warning".into(),
            ],
            None => Vec::new(),
        }
    }

    /// `redis-server` arguments for a node on `port` with this access.
    fn server_args(&self, port: u16) -> Vec<String> {
        let port = port.to_string();
        match &self.tls {
            Some(_) => {
                let mut args = crate::redis_tls::server_args(&port);
                args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"]);
                args.extend(["--masterauth", crate::redis_tls::PASSWORD]);
                args.into_iter().map(String::from).collect()
            }
            None => vec!["--port".into(), port],
        }
    }

    /// A node's URL.
    fn url(&self, port: u16) -> String {
        match &self.tls {
            Some(_) => format!("rediss://:{}@127.0.0.1:{port}/", crate::redis_tls::PASSWORD),
            None => format!("redis://127.0.0.1:{port}/"),
        }
    }
}

/// A port that is free, and whose cluster bus port (+10,000) is free as well.
fn free_cluster_port(taken: &[u16]) -> u16 {
    loop {
        let port = crate::redis_server::free_port();
        let bus_free = port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok();
        if bus_free && !taken.contains(&port) {
            return port;
        }
    }
}

/// Starts a node on a free port. A port found free can be taken before the node binds it (by
/// another test's server, or a bus port): a node that exits instead of answering is started
/// again on another port.
fn start_node_on_a_free_port(dir: &Path, access: &Access, taken: &[u16]) -> (u16, Child) {
    for _ in 0..5 {
        let port = free_cluster_port(taken);
        let mut child = start_node(dir, access, port);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if cli(access, port, &["PING"]).trim() == "PONG" {
                return (port, child);
            }
            if child.try_wait().ok().flatten().is_some() || Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("no cluster node started after 5 ports");
}

fn start_node(dir: &Path, access: &Access, port: u16) -> Child {
    let config_file = dir.join(format!("nodes-{port}.conf")).display().to_string();
    let mut args = access.server_args(port);
    args.extend(
        [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &config_file,
            "--cluster-node-timeout",
            "2000",
            // A replica's first sync starts at once, not after the default 5 s wait for others.
            "--repl-diskless-sync-delay",
            "0",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    crate::redis_server::spawn_redis_server(Some(dir), &args)
}

fn cli(access: &Access, port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(access.cli_args())
        .args(args)
        .output()
        .expect("redis-cli is installed (scripts/install-test-tools installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl RedisCluster {
    /// Starts `primaries` primaries with one replica each and waits until the cluster serves
    /// every slot.
    pub fn start(primaries: usize) -> Self {
        Self::start_with(primaries, 1, false)
    }

    /// Starts `primaries` primaries and no replicas: a benchmark's like-for-like with one
    /// server, which has no replica to feed either.
    pub fn without_replicas(primaries: usize) -> Self {
        Self::start_with(primaries, 0, false)
    }

    /// As [`RedisCluster::start`], every node speaking only TLS, with a certificate from a CA
    /// made for the test ([`RedisCluster::target`] names it), and asking for
    /// [`crate::redis_tls::PASSWORD`].
    pub fn start_tls(primaries: usize) -> Self {
        Self::start_with(primaries, 1, true)
    }

    fn start_with(primaries: usize, replicas: usize, tls: bool) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let access = Access {
            tls: tls.then(|| {
                crate::redis_tls::certificates(dir.path());
                dir.path().to_path_buf()
            }),
        };
        let (mut ports, mut children) = (Vec::new(), Vec::new());
        for _ in 0..primaries * (1 + replicas) {
            let (port, child) = start_node_on_a_free_port(dir.path(), &access, &ports);
            ports.push(port);
            children.push(Some(child));
        }
        let cluster = RedisCluster {
            primaries,
            ports,
            children,
            access,
            _dir: dir,
        };
        let nodes: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new("redis-cli")
            .args(cluster.access.cli_args())
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "creating the cluster: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for &port in &cluster.ports {
            wait_for(
                || {
                    cluster
                        .cli(port, &["CLUSTER", "INFO"])
                        .contains("cluster_state:ok")
                },
                "the cluster to serve every slot",
                || cluster.cli(port, &["CLUSTER", "NODES"]),
            );
        }
        // A replica that has never synced with its primary refuses to take over from it (its
        // data is "too old"), so a test that kills a primary must start from synced replicas.
        for &port in &cluster.ports {
            wait_for(
                || {
                    let replication = cluster.cli(port, &["INFO", "replication"]);
                    replication.contains("role:master")
                        || replication.contains("master_link_status:up")
                },
                "every replica to sync with its primary",
                || cluster.cli(port, &["INFO", "replication"]),
            );
        }
        cluster
    }

    /// `redis-cli ARGS` against the node at `port`.
    fn cli(&self, port: u16, args: &[&str]) -> String {
        cli(&self.access, port, args)
    }

    /// The cluster as a store target, every node a seed.
    pub fn target(&self) -> qhost::stores::RedisTarget {
        qhost::stores::RedisTarget {
            urls: self.urls(),
            cluster: true,
            ca_file: self.access.tls.as_ref().map(|dir| dir.join("ca.crt")),
            deadlines: qhost::stores::RedisDeadlines::default(),
        }
    }

    /// Every node's URL, as seeds for a client.
    pub fn urls(&self) -> Vec<String> {
        self.ports.iter().map(|&p| self.access.url(p)).collect()
    }

    /// The ports of the nodes that are primaries now.
    pub fn primaries(&self) -> Vec<u16> {
        self.ports
            .iter()
            .copied()
            .filter(|&p| self.cli(p, &["ROLE"]).starts_with("master"))
            .collect()
    }

    /// Kills the node at `port` (as a crash would) and waits until the others serve every slot
    /// again, its replica promoted in its place.
    pub fn kill_node(&mut self, port: u16) {
        let i = self
            .ports
            .iter()
            .position(|&p| p == port)
            .expect("a node of this cluster");
        if let Some(mut child) = self.children[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let primaries = self.primaries;
        wait_for(
            || {
                self.primaries().len() == primaries
                    && self.ports.iter().filter(|&&p| p != port).all(|&p| {
                        self.cli(p, &["CLUSTER", "INFO"])
                            .contains("cluster_state:ok")
                    })
            },
            "a replica to take over the killed primary's slots",
            || {
                let live: Vec<u16> = self.ports.iter().copied().filter(|&p| p != port).collect();
                live.iter()
                    .map(|&p| {
                        let nodes = self.cli(p, &["CLUSTER", "NODES"]);
                        let replication = self.cli(p, &["INFO", "replication"]);
                        format!("node {p}: {nodes}{replication}")
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        );
    }

    /// Stops the node at `port` (SIGSTOP) until [`RedisCluster::resume_node`]: its connections
    /// stay open and silent.
    pub fn pause_node(&self, port: u16) {
        crate::redis_server::signal(self.child(port), "STOP");
    }

    /// Sets every node's `cluster-node-timeout`: how long a silent node may stay so before the
    /// others mark it failed (and, with no replica to promote, the cluster refuses every key).
    pub fn set_node_timeout(&self, timeout: Duration) {
        let ms = timeout.as_millis().to_string();
        for &port in &self.ports {
            let reply = self.cli(port, &["CONFIG", "SET", "cluster-node-timeout", &ms]);
            assert!(reply.starts_with("OK"), "node {port}: {reply}");
        }
    }

    /// Lets a paused node go on (SIGCONT).
    pub fn resume_node(&self, port: u16) {
        crate::redis_server::signal(self.child(port), "CONT");
    }

    fn child(&self, port: u16) -> &Child {
        let i = (self.ports.iter())
            .position(|&p| p == port)
            .expect("a node of this cluster");
        self.children[i].as_ref().expect("a running node")
    }

    /// The slot ranges the node at `port` serves (as `CLUSTER NODES` says of itself).
    pub fn slots_of(&self, port: u16) -> Vec<(u16, u16)> {
        let nodes = self.cli(port, &["CLUSTER", "NODES"]);
        let Some(me) = nodes.lines().find(|l| l.contains("myself")) else {
            return Vec::new();
        };
        me.split_whitespace()
            .skip(8)
            .filter_map(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .collect()
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked of a live node).
    pub fn slot_of(&self, key: &str) -> u16 {
        self.primaries()
            .into_iter()
            .find_map(|p| {
                self.cli(p, &["CLUSTER", "KEYSLOT", key])
                    .trim()
                    .parse()
                    .ok()
            })
            .expect("a live node answers CLUSTER KEYSLOT")
    }

    /// Moves `slot`, with its keys, to the primary at `to`, as `redis-cli --cluster reshard`
    /// does (IMPORTING, MIGRATING, MIGRATE, then the new owner announced to every node). A
    /// client that has not seen the move is answered `MOVED` for the slot's keys.
    pub fn move_slot(&self, slot: u16, to: u16) {
        let from = self
            .primaries()
            .into_iter()
            .find(|&p| {
                self.slots_of(p)
                    .iter()
                    .any(|&(a, b)| (a..=b).contains(&slot))
            })
            .expect("a primary serving the slot");
        assert_ne!(from, to, "slot {slot} is already on {to}");
        let id = |port| self.cli(port, &["CLUSTER", "MYID"]).trim().to_string();
        let (from_id, to_id) = (id(from), id(to));
        let slot = slot.to_string();
        self.cli(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
        self.cli(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
        let keys = self.cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "1000"]);
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if !keys.is_empty() {
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys);
            let migrated = self.cli(from, &args);
            assert!(migrated.trim() == "OK", "MIGRATE: {migrated}");
        }
        for port in self.primaries() {
            self.cli(port, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
        }
        wait_for(
            || {
                self.primaries().into_iter().all(|p| {
                    self.cli(p, &["CLUSTER", "NODES"]).lines().any(|l| {
                        l.starts_with(&to_id)
                            && l.split_whitespace().skip(8).any(|r| {
                                let (a, b) = r.split_once('-').unwrap_or((r, r));
                                a.parse::<u16>()
                                    .ok()
                                    .zip(b.parse::<u16>().ok())
                                    .is_some_and(|(a, b)| {
                                        (a..=b).contains(&slot.parse::<u16>().unwrap_or(0))
                                    })
                            })
                    })
                })
            },
            "every primary to see the moved slot's new owner",
            || self.cli(to, &["CLUSTER", "NODES"]),
        );
    }

    /// Keys stored on the node at `port`.
    pub fn keys_on(&self, port: u16) -> u64 {
        self.cli(port, &["DBSIZE"]).trim().parse().unwrap_or(0)
    }

    /// `MEMORY USAGE key` on whichever node holds it (asked of every primary).
    pub fn memory_usage(&self, key: &str) -> Option<u64> {
        self.primaries()
            .into_iter()
            .find_map(|p| self.cli(p, &["MEMORY", "USAGE", key]).trim().parse().ok())
    }
}

fn wait_for(mut ready: impl FnMut() -> bool, what: &str, state: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; the cluster:\n{}",
            state()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().filter_map(Option::take) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
