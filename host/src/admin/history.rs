//! Recent throughput per queue, for the console: the health checker samples each queue's
//! counters at every check, and the console shows rates over the last minutes and a sparkline
//! of messages handled per check from the samples, and a chart of messages handled per minute
//! over the last hour from a mark kept each minute. Nothing is asked of a backend for it, and
//! nothing outlives the process.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::stats::{Counts, Stats};

/// Samples kept: five minutes at the checker's interval.
pub(crate) const KEPT: usize = 150;
/// Minutes the hour's chart shows.
pub(crate) const MINUTES: usize = 60;
/// How far apart the hour's marks are.
const MINUTE: Duration = Duration::from_secs(60);

/// What the console counts of a queue's messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Flow {
    /// Deliveries received.
    pub(crate) received: f64,
    /// Acked after their handler ran.
    pub(crate) acked: f64,
    /// Acked as duplicates of completed work, without running.
    pub(crate) duplicates: f64,
    /// Put back to be retried.
    pub(crate) retried: f64,
    /// Sent to the dead-letter queue.
    pub(crate) dead_lettered: f64,
}

impl Flow {
    fn of(c: &Counts) -> Self {
        Flow {
            received: c.received as f64,
            acked: c.acked as f64,
            duplicates: c.duplicates as f64,
            retried: c.retried as f64,
            dead_lettered: c.dead_lettered as f64,
        }
    }

    /// Messages finished: acked, dropped as duplicates, or dead-lettered.
    pub(crate) fn handled(&self) -> f64 {
        self.acked + self.duplicates + self.dead_lettered
    }

    fn minus(&self, o: &Flow) -> Flow {
        Flow {
            received: self.received - o.received,
            acked: self.acked - o.acked,
            duplicates: self.duplicates - o.duplicates,
            retried: self.retried - o.retried,
            dead_lettered: self.dead_lettered - o.dead_lettered,
        }
    }

    fn scaled(&self, by: f64) -> Flow {
        Flow {
            received: self.received * by,
            acked: self.acked * by,
            duplicates: self.duplicates * by,
            retried: self.retried * by,
            dead_lettered: self.dead_lettered * by,
        }
    }
}

struct Sample {
    at: Instant,
    by_queue: BTreeMap<String, Flow>,
}

/// The last [`KEPT`] samples, and a mark of messages handled each minute for the last hour.
#[derive(Default)]
pub(crate) struct History {
    samples: Mutex<VecDeque<Sample>>,
    /// Each queue's messages handled so far, at each minute's mark (the last [`MINUTES`]).
    minutes: Mutex<VecDeque<(Instant, BTreeMap<String, f64>)>>,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History").finish_non_exhaustive()
    }
}

impl History {
    /// Samples every queue's counters now.
    pub(crate) fn sample(&self, stats: &Stats) {
        self.sample_at(Instant::now(), stats);
    }

    fn sample_at(&self, at: Instant, stats: &Stats) {
        let mut by_queue: BTreeMap<String, Counts> = BTreeMap::new();
        for ((queue, _), c) in stats.snapshot() {
            by_queue.entry(queue).or_default().add(&c);
        }
        let by_queue = by_queue
            .iter()
            .map(|(q, c)| (q.clone(), Flow::of(c)))
            .collect();
        self.mark_minute(at, &by_queue);
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(Sample { at, by_queue });
    }

    /// Keeps a mark when a minute has passed since the last one.
    fn mark_minute(&self, at: Instant, by_queue: &BTreeMap<String, Flow>) {
        let mut minutes = self.minutes.lock().unwrap_or_else(|e| e.into_inner());
        if minutes
            .back()
            .is_some_and(|(last, _)| at.duration_since(*last) < MINUTE)
        {
            return;
        }
        if minutes.len() > MINUTES {
            minutes.pop_front();
        }
        let handled = (by_queue.iter())
            .map(|(q, f)| (q.clone(), f.handled()))
            .collect();
        minutes.push_back((at, handled));
    }

    /// `queue`'s messages handled in each minute of the last hour, oldest first, the minute
    /// under way last (empty until the first mark).
    pub(crate) fn handled_per_minute(&self, queue: &str) -> Vec<u64> {
        let minutes = self.minutes.lock().unwrap_or_else(|e| e.into_inner());
        let latest = {
            let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
            samples
                .back()
                .map(|s| s.by_queue.get(queue).map_or(0.0, Flow::handled))
        };
        let marks: Vec<f64> = (minutes.iter())
            .map(|(_, m)| m.get(queue).copied().unwrap_or(0.0))
            .chain(latest)
            .collect();
        (marks.iter().zip(marks.iter().skip(1)))
            .map(|(a, b)| (b - a).max(0.0) as u64)
            .collect()
    }

    /// `queue`'s messages per minute over the samples kept, and how long they span; `None`
    /// until two samples are.
    pub(crate) fn per_minute(&self, queue: &str) -> Option<(Flow, Duration)> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let (first, last) = (samples.front()?, samples.back()?);
        let span = last.at.duration_since(first.at);
        if span.is_zero() {
            return None;
        }
        let flow = |s: &Sample| s.by_queue.get(queue).copied().unwrap_or_default();
        let delta = flow(last).minus(&flow(first));
        Some((delta.scaled(60.0 / span.as_secs_f64()), span))
    }

    /// `queue`'s messages handled between consecutive samples, oldest first.
    pub(crate) fn handled_per_sample(&self, queue: &str) -> Vec<u64> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let handled = |s: &Sample| s.by_queue.get(queue).map_or(0.0, Flow::handled);
        (samples.iter().zip(samples.iter().skip(1)))
            .map(|(a, b)| (handled(b) - handled(a)).max(0.0) as u64)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Event;

    #[test]
    fn rates_and_the_sparkline_come_from_the_samples() {
        let (stats, history) = (Stats::default(), History::default());
        let start = Instant::now();
        assert!(history.per_minute("q").is_none());
        history.sample_at(start, &stats);
        for _ in 0..6 {
            stats.record("q", "p", Event::Acked);
        }
        stats.record("q", "other", Event::Duplicate);
        history.sample_at(start + Duration::from_secs(30), &stats);
        stats.record("q", "p", Event::DeadLettered);
        history.sample_at(start + Duration::from_secs(60), &stats);

        let (flow, span) = history.per_minute("q").unwrap();
        assert_eq!(span, Duration::from_secs(60));
        assert_eq!(
            (flow.acked, flow.duplicates, flow.dead_lettered),
            (6.0, 1.0, 1.0)
        );
        assert_eq!(history.handled_per_sample("q"), [7, 1]);
        assert_eq!(
            history.handled_per_minute("q"),
            [8, 0],
            "marks at 0 and 60 s: a minute of 8, then the minute under way"
        );
        assert_eq!(history.handled_per_sample("none"), [0, 0]);
        for _ in 0..KEPT {
            history.sample_at(start + Duration::from_secs(90), &stats);
        }
        assert_eq!(
            history.handled_per_sample("q").len(),
            KEPT - 1,
            "the oldest are dropped"
        );
    }
}
