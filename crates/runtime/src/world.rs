//! The world a run meets when it runs outside a host: for `qhost test`, `invoke` and `replay`,
//! which run a message through a plugin file with no queue and no network.
//!
//! A plugin loaded into a world keeps its manifest (grants, limits, key) and meets, instead of
//! the outside:
//!
//! - **HTTP** ([`Answers`]): every request its grant admits is stamped as a host stamps it
//!   (idempotency key, fencing token), written down whole, and answered from the world: an
//!   empty `200 OK` for a replay (both versions meet the same answer), or the test case's canned
//!   answer by method and URL. A request the case has no answer for is written down as
//!   unanswered and fails in the guest as a refused connection; the case then fails naming it.
//! - **Time** ([`VirtualClock`]): the wall clock reads the case's `now` plus the time passed
//!   since, and "time passed" is tokio's clock, which a test runs paused: a guest that sleeps
//!   finishes at once with the clock moved on by the sleep, and the run's deadline is measured
//!   on the same clock, so a handler that sleeps past its `timeout-ms` times out in a test as on
//!   a host. A guest that computes moves the clock by the time it computes (one epoch tick at a
//!   time, see `wasm`).
//! - **Logs**: what the guest logs is kept, for a test to match.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

/// One canned HTTP answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Canned {
    /// The method it answers, upper case.
    pub method: String,
    /// The URL it answers, whole.
    pub url: String,
    /// The status.
    pub status: u16,
    /// Its headers.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Vec<u8>,
}

/// How admitted requests are answered.
#[derive(Clone, Debug)]
pub enum Answers {
    /// An empty `200 OK` to every one (replay).
    Empty,
    /// From this table, by method and URL. Several answers for one request are given in turn,
    /// the last one again once they run out (a `503` then a `202`).
    Canned(Vec<Canned>),
}

/// A request a plugin made, as the host stamped it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// The method.
    pub method: String,
    /// The whole URL.
    pub url: String,
    /// Its headers, names lower case, in order.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Vec<u8>,
    /// Whether the world had an answer for it.
    pub answered: bool,
}

/// A line the guest logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestLog {
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: &'static str,
    /// What it said.
    pub message: String,
}

/// What one run met and did in the world.
#[derive(Debug, Default)]
pub struct Met {
    /// Its HTTP requests, in order.
    pub http: Vec<Exchange>,
    /// Its log lines, in order.
    pub logs: Vec<GuestLog>,
}

#[derive(Debug)]
struct Inner {
    answers: Answers,
    /// How many times each canned answer's request was made, by index of its first answer.
    given: Vec<usize>,
    met: Met,
}

/// A world, shared by a plugin loaded into it and the runner that sets it for each run.
#[derive(Debug)]
pub struct World {
    inner: Mutex<Inner>,
    clock: Option<VirtualClock>,
}

impl World {
    /// A replay's world: every request answered `200 OK`, the real clock.
    pub fn replay() -> Arc<World> {
        Arc::new(World {
            inner: Mutex::new(Inner {
                answers: Answers::Empty,
                given: Vec::new(),
                met: Met::default(),
            }),
            clock: None,
        })
    }

    /// A test's world: canned answers (none until [`World::begin`]) and a virtual clock.
    pub fn test() -> Arc<World> {
        Arc::new(World {
            inner: Mutex::new(Inner {
                answers: Answers::Canned(Vec::new()),
                given: Vec::new(),
                met: Met::default(),
            }),
            clock: Some(VirtualClock::default()),
        })
    }

    /// Starts a run: these answers, the clock at `now` (for a world with a virtual clock;
    /// `None`: on from where it is), and nothing met yet.
    pub fn begin(&self, answers: Answers, now: Option<SystemTime>) {
        let mut inner = self.lock();
        inner.given = Vec::new();
        inner.answers = answers;
        inner.met = Met::default();
        if let (Some(clock), Some(now)) = (&self.clock, now) {
            clock.set(now);
        }
    }

    /// What the run met since [`World::begin`] (or the last call), taken.
    pub fn take(&self) -> Met {
        std::mem::take(&mut self.lock().met)
    }

    /// The clock the guest reads, when it is virtual.
    pub fn clock(&self) -> Option<&VirtualClock> {
        self.clock.as_ref()
    }

    /// Notes a log line.
    pub fn log(&self, level: &'static str, message: &str) {
        let line = GuestLog {
            level,
            message: message.to_string(),
        };
        self.lock().met.logs.push(line);
    }

    /// Writes `exchange` down and gives its answer: status, headers and body, or `None` when
    /// the world has none for it.
    pub fn answer(&self, mut exchange: Exchange) -> Option<Canned> {
        let mut inner = self.lock();
        let table = match &inner.answers {
            Answers::Empty => None,
            Answers::Canned(table) => Some(table.clone()),
        };
        let answer = match table {
            None => Some(Canned {
                method: exchange.method.clone(),
                url: exchange.url.clone(),
                status: 200,
                headers: Vec::new(),
                body: Vec::new(),
            }),
            Some(table) => {
                let matching: Vec<usize> = (0..table.len())
                    .filter(|&i| table[i].method == exchange.method && table[i].url == exchange.url)
                    .collect();
                matching.first().map(|&first| {
                    let size = table.len().max(inner.given.len());
                    inner.given.resize(size, 0);
                    let turn = inner.given[first];
                    inner.given[first] += 1;
                    table[matching[turn.min(matching.len() - 1)]].clone()
                })
            }
        };
        exchange.answered = answer.is_some();
        inner.met.http.push(exchange);
        answer
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A clock a test sets: wall time from the case's `now`, moving with tokio's (paused) clock.
#[derive(Clone, Debug)]
pub struct VirtualClock(Arc<Mutex<Set>>);

#[derive(Debug)]
struct Set {
    /// The wall time at `at`.
    wall: Duration,
    /// When it was set, on tokio's clock.
    at: Instant,
    /// The monotonic clock's zero, on tokio's clock.
    origin: Instant,
}

impl Default for VirtualClock {
    fn default() -> Self {
        let now = Instant::now();
        VirtualClock(Arc::new(Mutex::new(Set {
            wall: since_epoch(SystemTime::now()),
            at: now,
            origin: now,
        })))
    }
}

impl VirtualClock {
    /// Sets the wall clock to `now`, from this moment on tokio's clock.
    pub fn set(&self, now: SystemTime) {
        let mut set = self.lock();
        set.wall = since_epoch(now);
        set.at = Instant::now();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Set> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn since_epoch(time: SystemTime) -> Duration {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

impl HostWallClock for VirtualClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        let set = self.lock();
        set.wall + Instant::now().saturating_duration_since(set.at)
    }
}

impl HostMonotonicClock for VirtualClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        let origin = self.lock().origin;
        let elapsed = Instant::now().saturating_duration_since(origin);
        u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(method: &str, url: &str) -> Exchange {
        Exchange {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            answered: false,
        }
    }

    fn canned(method: &str, url: &str, status: u16) -> Canned {
        Canned {
            method: method.into(),
            url: url.into(),
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    #[test]
    fn canned_answers_go_by_method_and_url_in_turn_and_the_last_repeats() {
        let world = World::test();
        let table = vec![
            canned("POST", "https://api.test/send", 503),
            canned("GET", "https://api.test/send", 204),
            canned("POST", "https://api.test/send", 202),
        ];
        world.begin(Answers::Canned(table), Some(SystemTime::UNIX_EPOCH));
        let status = |m, u| world.answer(exchange(m, u)).map(|a| a.status);
        assert_eq!(status("POST", "https://api.test/send"), Some(503));
        assert_eq!(status("POST", "https://api.test/send"), Some(202));
        assert_eq!(status("POST", "https://api.test/send"), Some(202));
        assert_eq!(status("GET", "https://api.test/send"), Some(204));
        assert_eq!(status("POST", "https://api.test/other"), None);
        let met = world.take();
        let answered: Vec<bool> = met.http.iter().map(|e| e.answered).collect();
        assert_eq!(answered, [true, true, true, true, false]);
        assert!(world.take().http.is_empty(), "taking drains it");
    }

    #[tokio::test(start_paused = true)]
    async fn the_wall_clock_reads_now_and_moves_with_tokio_time() {
        let world = World::test();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_579_600);
        world.begin(Answers::Empty, Some(now));
        let clock = world.clock().expect("a test world's clock");
        assert_eq!(
            HostWallClock::now(clock),
            Duration::from_secs(1_764_579_600)
        );
        let before = HostMonotonicClock::now(clock);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            HostWallClock::now(clock),
            Duration::from_secs(1_764_579_610)
        );
        assert_eq!(HostMonotonicClock::now(clock) - before, 10_000_000_000);
        // A run that sets no time goes on from where the last left the clock.
        world.begin(Answers::Empty, None);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            HostWallClock::now(clock),
            Duration::from_secs(1_764_579_615)
        );
    }
}
