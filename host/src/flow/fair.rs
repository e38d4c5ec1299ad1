//! Fair shares of a host's in-flight slots among flow keys.
//!
//! A host chooses among the messages it received; it cannot choose which ones SQS hands it.
//! What it can do is refuse to let one key hold every slot: a key may run at most its share,
//! `capacity × weight / (the weights of the keys running + its own + 1)`, at least one. The
//! `+ 1` is a share kept for a key not seen yet, so a tenant whose first message arrives while
//! another floods the queue starts at once. A lone key therefore uses about half the host's
//! slots (more with a weight above 1): the price of room for the next tenant.
//!
//! A message beyond its key's share is put back hidden until the key would have room for it:
//! each key keeps a schedule, like a GCRA, of when its next put-back message is due back,
//! spaced by the key's measured run time divided by its share. A key's backlog is then spread
//! over the time this host needs to run it, rather than coming back at once to be received
//! again before the messages behind it. So the host's receives reach past a flooding key to
//! the other tenants at the pace it can receive, and the flooding key's messages come back
//! about as fast as its share runs them.
//!
//! Shares count runs on this host only (fleet-wide limits are slots in the store); a key's
//! run is counted by a [`Ticket`], held by its message's task and given back when it ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::FlowPolicy;

/// The weight of the share kept for keys not seen yet.
const NEWCOMER_WEIGHT: u64 = 1;
/// What a run is assumed to take before one of its key has ended on this host.
const FIRST_RUN_TIME: Duration = Duration::from_secs(1);
/// The shortest a message beyond its key's share is hidden (SQS counts visibility in seconds).
const MIN_DELAY: Duration = Duration::from_secs(1);
/// The longest a message beyond its key's share is hidden at a time; it is scheduled again
/// if it comes back too early.
const MAX_DELAY: Duration = Duration::from_secs(3600);

/// A message that comes back may find its key a share's `1 / RETURNING_SLACK` over its share
/// and still run: put-backs come back a receive (up to ten) at a time while the key's runs end
/// one by one, and sending each back again would only spend receives the other tenants need.
const RETURNING_SLACK: usize = 4;

/// How many flow keys a host's metrics name (the rest are `other`), so a tenant per label
/// cannot grow the series without bound.
pub(crate) const NAMED_KEYS: usize = 20;

/// How many keys a host remembers before it forgets the idle ones.
const MAX_KEYS: usize = 10_000;

/// Why a run may not start on this host now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// This host alone already runs `max-concurrency` of the key: no store call is needed to
    /// know the fleet is at its limit.
    AtLimit,
    /// The key holds its fair share of the host's slots: the message comes back after this.
    OverShare(Duration),
}

/// One key on this host: its runs, weight, run time, and put-back schedule.
#[derive(Debug)]
struct Running {
    count: usize,
    /// Its messages kept waiting for the key's turn (`pipeline::waiting`).
    waiting: usize,
    weight: u32,
    /// A moving average of its runs' time, from admission to the end of the delivery, from a
    /// guess of [`FIRST_RUN_TIME`]: what the put-back schedule spaces by (its slow start
    /// spreads a flooding key's first put-backs wide, so the receives reach past it).
    run_time: Duration,
    /// The same average from the first run's own time, once one has ended here: when a
    /// waiting line asks again (`pipeline::turns`).
    measured: Option<Duration>,
    /// When its next put-back message is due back.
    next_back: Option<Instant>,
    /// Runs admitted, and messages put back beyond its share or over its limits, so far.
    counts: KeyCounts,
}

/// What happened to a flow key's messages on this host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct KeyCounts {
    /// Handler runs.
    pub(crate) runs: u64,
    /// Put back beyond its share of the host's slots (`fair_share`).
    pub(crate) fair_share: u64,
    /// Put back over its fleet-wide concurrency or rate (`flow_limited`).
    pub(crate) flow_limited: u64,
    /// Kept waiting on this host for the key's turn (a slot or the rate) instead of put back.
    pub(crate) waited: u64,
    /// Store calls made for messages kept waiting (a slot asked for, the rate asked).
    pub(crate) wait_asks: u64,
}

/// One flow key as the console shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct KeyStatus {
    /// The plugin whose manifest names the key.
    pub(crate) plugin: String,
    /// The flow key (empty: the default flow).
    pub(crate) key: String,
    /// Its runs on this host now.
    pub(crate) running: usize,
    /// Its messages kept waiting on this host now for the key's turn.
    pub(crate) waiting: usize,
    /// Its runs' average time, in milliseconds.
    pub(crate) run_ms: u64,
    /// What happened to its messages on this host.
    #[serde(flatten)]
    pub(crate) counts: KeyCounts,
}

impl Default for Running {
    fn default() -> Self {
        Running {
            count: 0,
            waiting: 0,
            weight: 1,
            run_time: FIRST_RUN_TIME,
            measured: None,
            next_back: None,
            counts: KeyCounts::default(),
        }
    }
}

impl Running {
    /// Whether it can be forgotten: nothing running, nothing scheduled to come back.
    fn is_idle(&self, now: Instant) -> bool {
        self.count == 0 && self.waiting == 0 && self.next_back.is_none_or(|t| t <= now)
    }
}

/// The runs of each flow key on this host.
#[derive(Debug)]
pub(crate) struct FairShares {
    capacity: usize,
    running: Mutex<HashMap<String, Running>>,
    /// The keys metrics name, in the order they first had put-backs; the rest are `other`.
    named: Mutex<Vec<String>>,
}

/// One admitted run of a key, counted until dropped (or given back unrun: [`Ticket::unrun`]).
#[derive(Debug)]
#[must_use = "the run counts against its key's share while the ticket is held"]
pub(crate) struct Ticket {
    shares: Arc<FairShares>,
    id: String,
    since: Instant,
    /// Whether its time counts as a run's (not when its message went to wait instead).
    ran: bool,
}

/// How a message comes to the shares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Arrival {
    /// It was received before (it may have waited its turn): it may run a little over its
    /// key's share.
    pub(crate) returning: bool,
    /// Over its key's fleet-wide limit, it would wait on this host for a slot: the host's
    /// own count of the key's runs does not refuse it, the store decides.
    pub(crate) may_wait: bool,
    /// It waits on this host already and asks again: a refusal holds nothing new back and
    /// is not counted.
    pub(crate) waiting: bool,
}

impl FairShares {
    /// Shares of `capacity` in-flight slots.
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(FairShares {
            capacity,
            running: Mutex::default(),
            named: Mutex::default(),
        })
    }

    /// Admits a run of `plugin`'s flow key `key` under `policy`, or says why not.
    pub(crate) fn admit(
        self: &Arc<Self>,
        plugin: &str,
        key: &str,
        policy: &FlowPolicy,
        arrival: Arrival,
    ) -> Result<Ticket, Refused> {
        let id = format!("{plugin}\u{0}{key}");
        let weight = policy.weight(key);
        let now = Instant::now();
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let mine = running.get(&id).map_or(0, |r| r.count);
        if !arrival.may_wait && policy.max_concurrency.is_some_and(|n| mine >= n as usize) {
            if !arrival.waiting {
                running.entry(id.clone()).or_default().counts.flow_limited += 1;
                self.name(&id);
            }
            return Err(Refused::AtLimit);
        }
        let mut share = self.share(&running, &id, weight);
        if arrival.returning {
            share += share.div_ceil(RETURNING_SLACK);
        }
        let entry = running.entry(id.clone()).or_default();
        entry.weight = weight;
        if policy.is_fair() && mine >= share {
            if arrival.waiting {
                return Err(Refused::OverShare(Duration::ZERO));
            }
            entry.counts.fair_share += 1;
            let delay = schedule_back(entry, share, now);
            self.name(&id);
            return Err(Refused::OverShare(delay));
        }
        entry.count += 1;
        Ok(Ticket {
            shares: Arc::clone(self),
            id,
            since: now,
            ran: true,
        })
    }

    /// What a run of `plugin`'s key `key` takes on this host: a moving average of its last
    /// runs (a second before any has ended).
    pub(crate) fn run_time(&self, plugin: &str, key: &str) -> Duration {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let id = format!("{plugin}\u{0}{key}");
        running.get(&id).map_or(FIRST_RUN_TIME, |r| r.run_time)
    }

    /// What a run of `plugin`'s key `key` takes on this host, once one has ended here.
    pub(crate) fn measured_run_time(&self, plugin: &str, key: &str) -> Option<Duration> {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let id = format!("{plugin}\u{0}{key}");
        running.get(&id).and_then(|r| r.measured)
    }

    /// Counts a message of `plugin`'s key `key` that starts (`1`) or ends (`-1`) waiting on
    /// this host for the key's turn: the key's messages waiting now.
    pub(crate) fn waiting(&self, plugin: &str, key: &str, change: isize) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let id = format!("{plugin}\u{0}{key}");
        let entry = running.entry(id).or_default();
        entry.waiting = entry.waiting.saturating_add_signed(change);
    }

    /// Counts a message of `plugin`'s key `key` kept waiting for its turn (since the host
    /// started).
    pub(crate) fn waited(&self, plugin: &str, key: &str) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let id = format!("{plugin}\u{0}{key}");
        running.entry(id.clone()).or_default().counts.waited += 1;
        drop(running);
        self.name(&id);
    }

    /// Counts a store call made for `plugin`'s key `key`'s waiting messages.
    pub(crate) fn asked(&self, plugin: &str, key: &str) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let id = format!("{plugin}\u{0}{key}");
        running.entry(id).or_default().counts.wait_asks += 1;
    }

    /// Counts a handler run of `plugin`'s key `key`.
    pub(crate) fn ran(&self, plugin: &str, key: &str) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let id = format!("{plugin}\u{0}{key}");
        running.entry(id).or_default().counts.runs += 1;
    }

    /// Counts a message of `plugin`'s key `key` put back over its fleet-wide limits.
    pub(crate) fn limited(&self, plugin: &str, key: &str) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let id = format!("{plugin}\u{0}{key}");
        running.entry(id.clone()).or_default().counts.flow_limited += 1;
        self.name(&id);
    }

    /// Names key `id` in the metrics if it is among the first [`NAMED_KEYS`] put back.
    fn name(&self, id: &str) {
        let mut named = self.named.lock().unwrap_or_else(|e| e.into_inner());
        if named.len() < NAMED_KEYS && !named.iter().any(|n| n == id) {
            named.push(id.to_string());
        }
    }

    /// Each plugin's put-backs by key for metrics: the first [`NAMED_KEYS`] keys to have any
    /// are named for as long as the host runs, so each series only grows; the rest are summed
    /// as the key `other`. Sorted by plugin and key.
    pub(crate) fn put_backs(&self) -> Vec<(String, String, KeyCounts)> {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let named = self.named.lock().unwrap_or_else(|e| e.into_inner());
        let mut rows: std::collections::BTreeMap<(String, String), KeyCounts> = Default::default();
        for (id, r) in running.iter() {
            let (c, (plugin, key)) = (r.counts, id.split_once('\u{0}').unwrap_or((id, "")));
            if c.fair_share + c.flow_limited + c.waited == 0 {
                continue;
            }
            let key = if named.contains(id) { key } else { "other" };
            let row = rows
                .entry((plugin.to_string(), key.to_string()))
                .or_default();
            row.fair_share += c.fair_share;
            row.flow_limited += c.flow_limited;
            row.waited += c.waited;
            row.wait_asks += c.wait_asks;
            row.runs += c.runs;
        }
        rows.into_iter().map(|((p, k), c)| (p, k, c)).collect()
    }

    /// The `n` busiest keys on this host: by runs now, then by messages put back.
    pub(crate) fn busiest(&self, n: usize) -> Vec<KeyStatus> {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<KeyStatus> = (running.iter())
            .map(|(id, r)| {
                let (plugin, key) = id.split_once('\u{0}').unwrap_or((id, ""));
                KeyStatus {
                    plugin: plugin.to_string(),
                    key: key.to_string(),
                    running: r.count,
                    waiting: r.waiting,
                    run_ms: r.run_time.as_millis() as u64,
                    counts: r.counts,
                }
            })
            .collect();
        let put_back =
            |k: &KeyStatus| k.counts.fair_share + k.counts.flow_limited + k.waiting as u64;
        keys.sort_by(|a, b| {
            (b.running, put_back(b), &a.key).cmp(&(a.running, put_back(a), &b.key))
        });
        keys.truncate(n);
        keys
    }

    /// The share of a key `id` of `weight` among the keys running.
    fn share(&self, running: &HashMap<String, Running>, id: &str, weight: u32) -> usize {
        let others: u64 = (running.iter())
            .filter(|(other, r)| other.as_str() != id && r.count > 0)
            .map(|(_, r)| u64::from(r.weight))
            .sum();
        let total = others + u64::from(weight) + NEWCOMER_WEIGHT;
        ((self.capacity as u64 * u64::from(weight) / total) as usize).max(1)
    }

    /// Runs of `plugin`'s key `key` on this host now.
    #[cfg(test)]
    fn running(&self, plugin: &str, key: &str) -> usize {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running
            .get(&format!("{plugin}\u{0}{key}"))
            .map_or(0, |r| r.count)
    }
}

/// Schedules a put-back message of `key` (running `share` at once) to come back once the key
/// would have room for it: the key's schedule moves on by one run's time over its share.
fn schedule_back(key: &mut Running, share: usize, now: Instant) -> Duration {
    let spacing = key.run_time / share.max(1) as u32;
    let due = key.next_back.filter(|&t| t > now).unwrap_or(now) + spacing;
    let delay = due - now;
    if delay <= MAX_DELAY {
        key.next_back = Some(due);
    }
    delay.clamp(MIN_DELAY, MAX_DELAY)
}

impl Ticket {
    /// Gives the ticket back for a message that went to wait for its key's turn instead of
    /// running: it no longer counts, and its time is no run's.
    pub(crate) fn unrun(mut self) {
        self.ran = false;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut running = (self.shares.running.lock()).unwrap_or_else(|e| e.into_inner());
        if let Some(r) = running.get_mut(&self.id) {
            r.count -= 1;
            if self.ran {
                // Moving averages over about the last eight runs.
                let took = now - self.since;
                r.run_time = (r.run_time * 7 + took) / 8;
                r.measured = Some(r.measured.map_or(took, |m| (m * 7 + took) / 8));
            }
        }
        // Idle keys are kept for their run time until there are many.
        if running.len() > MAX_KEYS {
            running.retain(|_, r| !r.is_idle(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message received before.
    const RETURNING: Arrival = Arrival {
        returning: true,
        may_wait: false,
        waiting: false,
    };

    fn fair(weights: &str) -> FlowPolicy {
        toml::from_str(&format!("key = \"attribute:tenant\"\nweights = {weights}")).unwrap()
    }

    fn admit_all(shares: &Arc<FairShares>, key: &str, policy: &FlowPolicy) -> Vec<Ticket> {
        std::iter::from_fn(|| shares.admit("p", key, policy, Arrival::default()).ok()).collect()
    }

    #[test]
    fn a_lone_key_leaves_room_for_a_newcomer_who_starts_at_once() {
        let shares = FairShares::new(32);
        let policy = fair("{}");
        let a = admit_all(&shares, "a", &policy);
        assert_eq!(a.len(), 16, "32 x 1 / (1 + 1)");
        assert!(matches!(
            shares.admit("p", "a", &policy, Arrival::default()),
            Err(Refused::OverShare(_))
        ));
        // B's share with A running: 32 x 1 / (1 + 1 + 1) = 10, and it starts at once.
        let b = admit_all(&shares, "b", &policy);
        assert_eq!(b.len(), 10);
        drop(a);
        assert_eq!(shares.running("p", "a"), 0);
        assert!(shares.admit("p", "a", &policy, Arrival::default()).is_ok());
    }

    #[test]
    fn a_message_that_comes_back_may_run_a_quarter_over_its_share() {
        let shares = FairShares::new(32);
        let policy = fair("{}");
        let _a = admit_all(&shares, "a", &policy);
        let back: Vec<Ticket> =
            std::iter::from_fn(|| shares.admit("p", "a", &policy, RETURNING).ok()).collect();
        assert_eq!(back.len(), 4, "16 and a quarter");
    }

    #[test]
    fn the_busiest_keys_come_first_with_what_happened_to_them() {
        let shares = FairShares::new(8);
        let policy = fair("{}");
        // Four runs of `a`, its share; the fifth (as `admit_all` stops) and sixth put back.
        let a = admit_all(&shares, "a", &policy);
        assert!(shares.admit("p", "a", &policy, Arrival::default()).is_err());
        let _b = shares.admit("p", "b", &policy, Arrival::default()).unwrap();
        shares.limited("p", "c");
        (0..4).for_each(|_| shares.ran("p", "a"));
        let busiest = shares.busiest(10);
        let keys: Vec<(&str, usize)> = busiest
            .iter()
            .map(|k| (k.key.as_str(), k.running))
            .collect();
        assert_eq!(keys, [("a", 4), ("b", 1), ("c", 0)]);
        assert_eq!(
            busiest[0].counts,
            KeyCounts {
                runs: 4,
                fair_share: 2,
                ..KeyCounts::default()
            }
        );
        assert_eq!(busiest[2].counts.flow_limited, 1);
        drop(a);
        assert_eq!(shares.busiest(1)[0].key, "b", "runs now first");
    }

    #[test]
    fn metrics_name_the_first_keys_put_back_and_sum_the_rest_as_other() {
        let shares = FairShares::new(8);
        for i in 0..NAMED_KEYS + 5 {
            shares.limited("p", &format!("k{i:02}"));
        }
        let _quiet = shares
            .admit("p", "quiet", &fair("{}"), Arrival::default())
            .unwrap();
        let rows = shares.put_backs();
        assert_eq!(
            rows.len(),
            NAMED_KEYS + 1,
            "no row for a key never put back"
        );
        let other = rows.iter().find(|(_, k, _)| k == "other").expect("other");
        assert_eq!(other.2.flow_limited, 5);
        // A key named once stays named, whatever comes later.
        shares.limited("p", "k00");
        let k00 = shares
            .put_backs()
            .into_iter()
            .find(|(_, k, _)| k == "k00")
            .unwrap();
        assert_eq!(k00.2.flow_limited, 2);
    }

    #[test]
    fn weights_scale_a_keys_share() {
        let shares = FairShares::new(30);
        let policy = fair("{ big = 4 }");
        let small = admit_all(&shares, "small", &policy);
        assert_eq!(small.len(), 15);
        // With `small` running: 30 x 4 / (1 + 4 + 1) = 20.
        assert_eq!(admit_all(&shares, "big", &policy).len(), 20);
    }

    #[test]
    fn a_key_at_its_fleet_limit_on_this_host_alone_is_refused_without_asking_the_store() {
        let shares = FairShares::new(64);
        let policy: FlowPolicy =
            toml::from_str("key = \"attribute:tenant\"\nmax-concurrency = 3\nfair = false")
                .unwrap();
        let held = admit_all(&shares, "partner", &policy);
        assert_eq!(held.len(), 3);
        assert_eq!(
            shares
                .admit("p", "partner", &policy, Arrival::default())
                .unwrap_err(),
            Refused::AtLimit
        );
        // A message that may wait for a slot goes on to the store, which decides; given back
        // unrun (it went to wait), its ticket leaves the key's run time as it was.
        let may_wait = Arrival {
            may_wait: true,
            ..Arrival::default()
        };
        let waiting = shares
            .admit("p", "partner", &policy, may_wait)
            .expect("to the store");
        assert_eq!(shares.running("p", "partner"), 4);
        waiting.unrun();
        assert_eq!(shares.running("p", "partner"), 3);
        assert_eq!(shares.run_time("p", "partner"), FIRST_RUN_TIME);
        shares.waiting("p", "partner", 1);
        shares.waited("p", "partner");
        let status = &shares.busiest(1)[0];
        assert_eq!((status.waiting, status.counts.waited), (1, 1));
        shares.waiting("p", "partner", -1);
        assert_eq!(shares.busiest(1)[0].waiting, 0);
    }

    #[test]
    fn unfair_keys_are_only_counted() {
        let shares = FairShares::new(4);
        let policy: FlowPolicy = toml::from_str("key = \"group\"\nfair = false").unwrap();
        assert_eq!(
            (0..10)
                .filter_map(|_| shares.admit("p", "g", &policy, Arrival::default()).ok())
                .count(),
            10
        );
    }

    #[test]
    fn a_keys_put_backs_are_spread_over_the_time_its_share_needs_to_run_them() {
        let now = Instant::now();
        let mut key = Running {
            run_time: Duration::from_millis(100),
            ..Running::default()
        };
        // A share of 10 runs one message every 10 ms: the 500th put back is due in 5 s.
        let delays: Vec<Duration> = (0..500).map(|_| schedule_back(&mut key, 10, now)).collect();
        assert_eq!(delays[0], MIN_DELAY);
        assert_eq!(delays[99], Duration::from_secs(1));
        assert_eq!(delays[499], Duration::from_secs(5));
        assert!(delays.windows(2).all(|w| w[0] <= w[1]));
        // Once the schedule's time has passed, it starts again from now.
        let later = now + Duration::from_secs(60);
        assert_eq!(schedule_back(&mut key, 10, later), MIN_DELAY);
        // Never more than an hour at a time.
        key.run_time = Duration::from_secs(3600);
        assert_eq!(schedule_back(&mut key, 1, later), MAX_DELAY);
        assert_eq!(schedule_back(&mut key, 1, later), MAX_DELAY);
    }

    #[test]
    fn a_keys_run_time_is_learnt_from_its_runs() {
        let shares = FairShares::new(8);
        let policy = fair("{}");
        let ticket = shares.admit("p", "a", &policy, Arrival::default()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drop(ticket);
        let tickets = admit_all(&shares, "a", &policy);
        assert_eq!(tickets.len(), 4);
        let Err(Refused::OverShare(first)) = shares.admit("p", "a", &policy, Arrival::default())
        else {
            panic!("not over its share");
        };
        assert_eq!(first, MIN_DELAY);
        let running = shares.running.lock().unwrap();
        let a = running.values().next().unwrap();
        assert!(a.run_time < FIRST_RUN_TIME, "{:?}", a.run_time);
        // The run's own time (a 20 ms sleep, however long a loaded machine made it), not the
        // first-run guess.
        let measured = a.measured.expect("a run ended");
        assert!(
            measured >= Duration::from_millis(20) && measured < FIRST_RUN_TIME,
            "the first run's own: {measured:?}"
        );
        assert!(a.next_back.is_some());
    }
}
