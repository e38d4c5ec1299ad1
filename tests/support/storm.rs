//! A crash storm: hosts SIGKILLed one at a time while jobs run, each restarted at once without
//! waiting for it, until every job is done and nothing is left on the queue. The tests of each
//! broker run one and then check that every effect happened once.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::processes::HostProcess;

/// How a storm goes: the hosts' configurations, the jobs, the kills, and how long it may take.
#[derive(Debug)]
pub struct Storm<'a> {
    /// Each host's configuration; host `i` runs `configs[i]`.
    pub configs: &'a [PathBuf],
    /// The jobs sent in all.
    pub jobs: usize,
    /// How many kills, spread evenly over the jobs' progress.
    pub kills: usize,
    /// The longest it may take.
    pub limit: Duration,
}

impl Storm<'_> {
    /// Runs it on `hosts`: kill `k` (from 0) comes once `finished()` reaches its share of the
    /// jobs, and `after_kill(k)` runs after it (a producer sending the next share, say). Ends
    /// when `left()` says nothing is left (`None`); panics with what it says once the limit
    /// passes. How long it took.
    pub async fn run(
        &self,
        hosts: &mut Vec<HostProcess>,
        mut finished: impl AsyncFnMut() -> usize,
        mut left: impl AsyncFnMut() -> Option<String>,
        mut after_kill: impl FnMut(usize),
    ) -> Duration {
        let (mut kills, started) = (0, Instant::now());
        loop {
            let done = finished().await;
            if kills < self.kills && done >= self.jobs * (kills + 1) / (self.kills + 1) {
                let victim = kills % hosts.len();
                hosts.remove(victim).kill();
                hosts.insert(victim, HostProcess::start(&self.configs[victim]));
                after_kill(kills);
                kills += 1;
            }
            let Some(waiting) = left().await else {
                break;
            };
            assert!(
                started.elapsed() < self.limit,
                "{done} of {} jobs done, {waiting}, after {kills} kills",
                self.jobs
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(kills, self.kills, "the kills happened mid-run");
        started.elapsed()
    }
}
