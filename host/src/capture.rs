//! Capture: a sample of the messages a queue's plugins handle, written as recorded messages
//! (`message::recorded`, what `qhost replay` reads) to `DATA_DIR/capture/QUEUE.jsonl`.
//!
//! What is written is what the handler was given: the body with an offloaded payload already
//! fetched (so a replay runs what the handler ran; a message too large for the cap is skipped
//! and counted), its attributes without the pointer's, and the key the host leased. Sampling is
//! every n-th handled message of the queue on this host, or a share of message ids by hash
//! (the same ids on every host).
//!
//! The message path never waits on the disk: a captured line goes down a bounded channel to
//! one writer thread per queue, and a full channel drops the line (counted). The writer keeps
//! two files, `QUEUE.jsonl` and the one before it, `QUEUE.1.jsonl`, each up to half the cap, so
//! the capture never holds more than `max-bytes`. A directory that cannot be written costs
//! nothing but the sample: the host serves on, warns once, and counts each line it could not
//! write.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use crate::config::capture::{CaptureConfig, Sample};
use crate::handler::HandlerMessage;
use crate::message::recorded::RecordedMessage;

/// Lines waiting for the writer before new ones are dropped.
const QUEUED_LINES: usize = 256;

/// What a queue's capture did, for the metrics.
#[derive(Debug, Default)]
pub(crate) struct CaptureCounts {
    /// Lines written.
    pub(crate) written: AtomicU64,
    /// Lines lost: the writer was behind, a record was larger than the cap allows, or the
    /// directory could not be written.
    pub(crate) dropped: AtomicU64,
    /// Of those, lines the disk refused.
    pub(crate) failed: AtomicU64,
}

/// One queue's capture.
#[derive(Debug)]
pub(crate) struct Capture {
    sample: Sample,
    seen: AtomicU64,
    largest: u64,
    lines: SyncSender<String>,
    pub(crate) counts: Arc<CaptureCounts>,
}

impl Capture {
    /// Starts the capture of `queue` into `dir` (its writer thread included).
    pub(crate) fn start(dir: &Path, queue: &str, config: &CaptureConfig) -> Self {
        let (lines, waiting) = sync_channel(QUEUED_LINES);
        let counts = Arc::new(CaptureCounts::default());
        let writer = Writer {
            current: dir.join(format!("{queue}.jsonl")),
            previous: dir.join(format!("{queue}.1.jsonl")),
            dir: dir.to_path_buf(),
            half: config.max_bytes / 2,
            file: None,
            size: 0,
            warned: AtomicBool::new(false),
            counts: Arc::clone(&counts),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("capture-{queue}"))
            .spawn(move || writer.run(waiting));
        if let Err(e) = spawned {
            tracing::warn!(%queue, error = %e, "could not start the capture's writer; nothing will be captured");
        }
        Capture {
            sample: config.sample,
            seen: AtomicU64::new(0),
            largest: config.max_bytes / 2,
            lines,
            counts,
        }
    }

    /// Writes `msg` if the sample takes it.
    pub(crate) fn offer(&self, msg: &HandlerMessage) {
        if !self.takes(&msg.id) {
            return;
        }
        let record = RecordedMessage {
            queue: msg.queue.clone(),
            key: Some(msg.idempotency_key.clone()),
            attributes: msg.attributes.clone(),
            receive_count: msg.receive_count,
            sent_at_ms: msg.sent_at_ms,
            group_id: msg.group_id.clone(),
            ..RecordedMessage::new(msg.id.clone(), &msg.body)
        };
        let mut line = record.to_line();
        line.push('\n');
        if line.len() as u64 > self.largest {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match self.lines.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn takes(&self, id: &str) -> bool {
        match self.sample {
            Sample::Every(n) => self.seen.fetch_add(1, Ordering::Relaxed).is_multiple_of(n),
            Sample::Share(share) => {
                (crate::digest::sha256_u64(id.as_bytes()) as f64 / u64::MAX as f64) < share
            }
        }
    }
}

/// The writer thread's state.
struct Writer {
    dir: PathBuf,
    current: PathBuf,
    previous: PathBuf,
    half: u64,
    file: Option<File>,
    size: u64,
    warned: AtomicBool,
    counts: Arc<CaptureCounts>,
}

impl Writer {
    fn run(mut self, lines: Receiver<String>) {
        while let Ok(line) = lines.recv() {
            match self.write(&line) {
                Ok(()) => {
                    self.counts.written.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.file = None;
                    self.counts.dropped.fetch_add(1, Ordering::Relaxed);
                    self.counts.failed.fetch_add(1, Ordering::Relaxed);
                    if !self.warned.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            file = %self.current.display(),
                            error = %e,
                            "cannot write the capture; messages are handled as before, and each line that cannot be written is counted in qhost_capture_lines_total (result failed)"
                        );
                    }
                }
            }
        }
    }

    /// Appends `line`, first moving the current file aside when it would pass half the cap.
    fn write(&mut self, line: &str) -> std::io::Result<()> {
        if self.file.is_some() && self.size + line.len() as u64 > self.half {
            self.file = None;
            std::fs::rename(&self.current, &self.previous)?;
        }
        if self.file.is_none() {
            std::fs::create_dir_all(&self.dir)?;
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.current)?;
            self.size = file.metadata()?.len();
            self.file = Some(file);
            if self.size + line.len() as u64 > self.half {
                // A file left by an earlier run, already full: move it aside too.
                return self.write(line);
            }
        }
        if let Some(file) = &mut self.file {
            file.write_all(line.as_bytes())?;
            self.size += line.len() as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn message(id: &str, body: &[u8]) -> HandlerMessage {
        HandlerMessage {
            id: id.into(),
            idempotency_key: format!("key-{id}"),
            fencing_token: 1,
            queue: "orders".into(),
            body: body.to_vec(),
            attributes: vec![crate::Attribute::string("tenant", "acme")],
            receive_count: 1,
            sent_at_ms: 5,
            group_id: None,
            time_limit: None,
        }
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let until = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < until, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn every_nth_message_is_written_as_a_recorded_message_and_the_files_stay_under_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let config = CaptureConfig {
            sample: Sample::Every(3),
            max_bytes: 4096,
        };
        let capture = Capture::start(dir.path(), "orders", &config);
        for i in 0..300 {
            capture.offer(&message(&format!("m-{i}"), format!("body {i}").as_bytes()));
        }
        capture.offer(&message("huge", &[b'x'; 4096]));
        let counts = Arc::clone(&capture.counts);
        wait_until("100 lines", || {
            counts.written.load(Ordering::Relaxed) == 100
        });
        assert_eq!(
            counts.dropped.load(Ordering::Relaxed),
            1,
            "the record over the cap"
        );
        let current = std::fs::read_to_string(dir.path().join("orders.jsonl")).unwrap();
        let previous = std::fs::read_to_string(dir.path().join("orders.1.jsonl")).unwrap();
        assert!(current.len() <= 2048 && previous.len() <= 2048);
        let last = current.lines().last().unwrap();
        let (_, read) = crate::message::recorded::read_lines(last)
            .remove(0)
            .unwrap();
        assert_eq!(read.id, "m-297", "every third: 0, 3, …, 297");
        assert_eq!(read.key.as_deref(), Some("key-m-297"));
        assert_eq!(read.body().unwrap(), b"body 297");
        assert_eq!(read.queue, "orders");
        assert_eq!(
            read.attributes,
            vec![crate::Attribute::string("tenant", "acme")]
        );
    }

    #[test]
    fn a_share_of_ids_is_the_same_on_every_host_and_an_unwritable_directory_is_counted() {
        let blocked = tempfile::NamedTempFile::new().unwrap();
        let config = CaptureConfig {
            sample: Sample::Share(0.5),
            max_bytes: 1 << 20,
        };
        let a = Capture::start(&blocked.path().join("sub"), "q", &config);
        let b = Capture::start(&blocked.path().join("sub"), "q", &config);
        let ids: Vec<String> = (0..400).map(|i| format!("id-{i}")).collect();
        let taken: Vec<bool> = ids.iter().map(|id| a.takes(id)).collect();
        assert_eq!(taken, ids.iter().map(|id| b.takes(id)).collect::<Vec<_>>());
        let share = taken.iter().filter(|t| **t).count();
        assert!((150..250).contains(&share), "about half: {share}");
        for id in ids.iter().take(20) {
            a.offer(&message(id, b"x"));
        }
        let counts = Arc::clone(&a.counts);
        let expected = taken.iter().take(20).filter(|t| **t).count() as u64;
        wait_until("the failures", || {
            counts.failed.load(Ordering::Relaxed) == expected
        });
        assert_eq!(counts.written.load(Ordering::Relaxed), 0);
    }
}
