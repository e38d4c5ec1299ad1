//! The lines a host keeps messages in while their flow key waits for its turn (`waiting`): one
//! line per key and limit, in arrival order, with a bound per line and one for the host, so a
//! flood cannot fill the host's memory with messages it holds but cannot run.
//!
//! A line is driven by one task while it holds anyone: whoever joins an undriven line is told
//! to start its driver, and the driver that finds its line empty leaves it undriven and forgets
//! it, in one step under the lines' lock, so a line is never left holding messages with no
//! driver, nor driven twice. Whatever frees a key's turn on this host (a run's slot given back)
//! wakes its line's driver.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Every line of a host.
#[derive(Debug)]
pub(crate) struct Lines<T> {
    lines: Mutex<Inner<T>>,
    /// The most messages the host keeps in all its lines.
    capacity: usize,
}

#[derive(Debug)]
struct Inner<T> {
    by_id: HashMap<String, Arc<Line<T>>>,
    /// Messages in every line.
    held: usize,
}

/// One key's line.
#[derive(Debug)]
pub(crate) struct Line<T> {
    id: String,
    entries: Mutex<VecDeque<T>>,
    wake: Notify,
}

impl<T> Lines<T> {
    /// Lines holding at most `capacity` messages in all.
    pub(crate) fn new(capacity: usize) -> Self {
        Lines {
            lines: Mutex::new(Inner {
                by_id: HashMap::new(),
                held: 0,
            }),
            capacity,
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the host keeps as many messages as it may.
    pub(crate) fn is_full(&self) -> bool {
        self.inner().held >= self.capacity
    }

    /// Keeps `entry` at the end of line `id` when that line holds fewer than `room` and the
    /// host fewer than its capacity; `Ok(Some(line))` when the line had no driver (the caller
    /// starts one), `Err(entry)` when there is no room.
    pub(crate) fn keep(&self, id: &str, room: usize, entry: T) -> Result<Option<Arc<Line<T>>>, T> {
        let mut inner = self.inner();
        if inner.held >= self.capacity {
            return Err(entry);
        }
        let existing = inner.by_id.get(id).map(Arc::clone);
        let (line, new) = match existing {
            Some(line) => (line, false),
            None => {
                let line = Arc::new(Line {
                    id: id.to_string(),
                    entries: Mutex::new(VecDeque::new()),
                    wake: Notify::new(),
                });
                (line, true)
            }
        };
        {
            let mut entries = line.entries();
            if entries.len() >= room {
                return Err(entry);
            }
            entries.push_back(entry);
        }
        inner.held += 1;
        if new {
            inner.by_id.insert(id.to_string(), Arc::clone(&line));
            return Ok(Some(line));
        }
        Ok(None)
    }

    /// The first of `line`, taken out of it; `None` when it is empty, and then the line is
    /// forgotten and its driver ends.
    pub(crate) fn next(&self, line: &Line<T>) -> Option<T> {
        let mut inner = self.inner();
        let first = line.entries().pop_front();
        match first {
            Some(_) => inner.held -= 1,
            None => {
                inner.by_id.remove(&line.id);
            }
        }
        first
    }

    /// Puts `entry` back at the front of `line` (its turn did not come yet).
    pub(crate) fn put_front(&self, line: &Line<T>, entry: T) {
        let mut inner = self.inner();
        line.entries().push_front(entry);
        inner.held += 1;
    }

    /// Whether line `id` holds anyone.
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.inner().by_id.contains_key(id)
    }

    /// Wakes line `id`'s driver, if it has one: its key's turn may have come.
    pub(crate) fn wake(&self, id: &str) {
        let line = self.inner().by_id.get(id).map(Arc::clone);
        if let Some(line) = line {
            line.wake.notify_one();
        }
    }
}

impl<T> Line<T> {
    fn entries(&self) -> std::sync::MutexGuard<'_, VecDeque<T>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the line is woken (at once if it was woken since the last wait).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_line_keeps_its_room_and_the_host_its_capacity() {
        let lines = Lines::new(3);
        let line = lines.keep("a", 2, 1).expect("room").expect("a new line");
        assert!(lines.keep("a", 2, 2).expect("room").is_none(), "driven");
        assert_eq!(lines.keep("a", 2, 3).err(), Some(3), "the line's room");
        assert!(lines.keep("b", 2, 4).expect("room").is_some());
        assert!(lines.is_full());
        assert_eq!(lines.keep("b", 2, 5).err(), Some(5), "the host's capacity");
        assert_eq!(lines.next(&line), Some(1));
        assert!(!lines.is_full());
        lines.put_front(&line, 1);
        assert_eq!((lines.next(&line), lines.next(&line)), (Some(1), Some(2)));
        assert_eq!(lines.next(&line), None);
        // An empty line is forgotten: the next to come starts a driver again.
        assert!(lines.keep("a", 2, 6).expect("room").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_before_the_driver_waits_is_not_lost() {
        let lines = Lines::new(4);
        let line = lines.keep("a", 2, ()).expect("room").expect("new");
        lines.wake("a");
        tokio::time::timeout(Duration::from_secs(1), line.woken())
            .await
            .expect("woken at once");
        lines.wake("unknown");
        let waited = tokio::time::timeout(Duration::from_secs(1), line.woken()).await;
        assert!(waited.is_err(), "nothing woke it since");
    }
}
