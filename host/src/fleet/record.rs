//! The fleet's two records, as stored: the roster of hosts and the queues paused fleet-wide.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::stats::Fates;

/// A host whose entry is older than this is gone: five missed ticks.
pub(crate) const GONE_AFTER: Duration = Duration::from_secs(5);
/// A host not heard from for this long is dropped from the roster.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// How long the store keeps a record after its last write.
pub(crate) const KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// The store key of the roster (one key: one slot on a cluster).
pub(crate) fn roster_key(namespace: &str) -> String {
    format!("{namespace}:fleet:{{hosts}}")
}

/// The store key of the fleet's pauses.
pub(crate) fn pauses_key(namespace: &str) -> String {
    format!("{namespace}:fleet:{{paused}}")
}

/// Every host that wrote lately, by id ([`super::host_name`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Roster {
    /// The hosts, by id.
    pub hosts: BTreeMap<String, HostEntry>,
}

/// What a host says of itself, once a tick.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEntry {
    /// Its process id.
    pub pid: u32,
    /// The qhost release it runs.
    pub version: String,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// When it last wrote this entry (its clock).
    pub seen_ms: u64,
    /// Its queue and store backends (`sqs + redis`, `local + local`).
    pub backends: String,
    /// Whether it was ready to consume, and if not, why.
    pub ready: bool,
    /// Why it was not ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_ready: Vec<String>,
    /// Whether it shut down in order (its last entry).
    #[serde(default)]
    pub stopped: bool,
    /// What it did with each queue's messages since it started.
    pub queues: BTreeMap<String, Fates>,
}

/// Whether a host is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    /// It wrote within [`GONE_AFTER`].
    Live,
    /// It shut down in order.
    Stopped,
    /// It went silent.
    Gone,
}

impl HostEntry {
    /// Whether it is there, at `now_ms`.
    pub fn liveness(&self, now_ms: u64) -> Liveness {
        match (self.stopped, now_ms.saturating_sub(self.seen_ms)) {
            (true, _) => Liveness::Stopped,
            (false, age) if age <= GONE_AFTER.as_millis() as u64 => Liveness::Live,
            _ => Liveness::Gone,
        }
    }
}

/// A host of the roster as an operator sees it now: what the console's fleet table, its API
/// and `qhost fleet` show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostStatus {
    /// Its id (host name/pid).
    pub id: String,
    /// Whether it is there.
    pub state: Liveness,
    /// Its process id.
    pub pid: u32,
    /// The qhost release it runs.
    pub version: String,
    /// Its queue and store backends.
    pub backends: String,
    /// Whether it was ready to consume, and if not, why.
    pub ready: bool,
    pub not_ready: Vec<String>,
    /// How long it had been up when it last wrote.
    pub up_secs: u64,
    /// How long ago it last wrote its entry.
    pub heartbeat_age_ms: u64,
    /// Its fates summed over its queues.
    pub totals: Fates,
}

impl Roster {
    /// Every host as it stands now: `first` (this host) first, then by id.
    pub fn statuses(&self, first: Option<&str>) -> Vec<HostStatus> {
        self.statuses_at(crate::message::now_ms(), first)
    }

    fn statuses_at(&self, now_ms: u64, first: Option<&str>) -> Vec<HostStatus> {
        let mut hosts: Vec<HostStatus> = (self.hosts.iter())
            .map(|(id, h)| HostStatus {
                id: id.clone(),
                state: h.liveness(now_ms),
                pid: h.pid,
                version: h.version.clone(),
                backends: h.backends.clone(),
                ready: h.ready,
                not_ready: h.not_ready.clone(),
                up_secs: h.seen_ms.saturating_sub(h.started_ms) / 1000,
                heartbeat_age_ms: now_ms.saturating_sub(h.seen_ms),
                totals: h.queues.values().fold(Fates::default(), |mut t, f| {
                    t.add(f);
                    t
                }),
            })
            .collect();
        hosts.sort_by_key(|h| (Some(h.id.as_str()) != first, h.id.clone()));
        hosts
    }

    /// Each queue's fates summed over every host in the roster (live or not: what the fleet
    /// did since its hosts started).
    pub fn totals(&self) -> BTreeMap<String, Fates> {
        let mut out: BTreeMap<String, Fates> = BTreeMap::new();
        for host in self.hosts.values() {
            for (queue, f) in &host.queues {
                out.entry(queue.clone()).or_default().add(f);
            }
        }
        out
    }

    /// The roster with `id`'s entry set to `entry`, and hosts not heard from for
    /// [`FORGET_AFTER`] dropped.
    pub(crate) fn with(mut self, id: &str, entry: HostEntry, now_ms: u64) -> Self {
        let forget = FORGET_AFTER.as_millis() as u64;
        self.hosts
            .retain(|_, h| now_ms.saturating_sub(h.seen_ms) < forget);
        self.hosts.insert(id.to_string(), entry);
        self
    }
}

/// The queues paused fleet-wide.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pauses {
    /// By queue name.
    pub queues: BTreeMap<String, Pause>,
}

/// Who paused a queue, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Who: a host name, or `console`.
    pub by: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seen_ms: u64, acked: u64) -> HostEntry {
        let mut queues = BTreeMap::new();
        queues.insert(
            "jobs".to_string(),
            Fates {
                received: acked,
                acked,
                ..Fates::default()
            },
        );
        HostEntry {
            seen_ms,
            queues,
            ..HostEntry::default()
        }
    }

    #[test]
    fn a_silent_host_is_gone_and_a_stopped_one_says_so() {
        let e = entry(10_000, 0);
        assert_eq!(e.liveness(10_000 + 5_000), Liveness::Live);
        assert_eq!(e.liveness(10_000 + 5_001), Liveness::Gone);
        let stopped = HostEntry { stopped: true, ..e };
        assert_eq!(stopped.liveness(10_000), Liveness::Stopped);
    }

    #[test]
    fn the_roster_sums_its_hosts_and_forgets_the_long_silent() {
        let hour = FORGET_AFTER.as_millis() as u64;
        let roster = Roster::default()
            .with("a", entry(1, 3), 1)
            .with("b", entry(hour, 4), hour);
        assert_eq!(roster.totals()["jobs"].acked, 7);
        let later = roster.with("b", entry(hour + 2, 5), hour + 2);
        assert_eq!(
            later.hosts.keys().collect::<Vec<_>>(),
            ["b"],
            "a is forgotten"
        );
        assert!(roster_key("ns").contains("{hosts}") && pauses_key("ns").contains("{paused}"));
        let rows = later
            .with("a", entry(hour, 1), hour)
            .statuses_at(hour + 5_002, Some("b"));
        let ids: Vec<&str> = rows.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, ["b", "a"], "this host first");
        assert_eq!((rows[0].state, rows[0].totals.acked), (Liveness::Live, 5));
        assert_eq!(
            (rows[1].state, rows[1].heartbeat_age_ms),
            (Liveness::Gone, 5_002)
        );
    }
}
