//! A guest's stderr: kept in memory up to a cap, for trap reports, and never an error.
//!
//! wasmtime-wasi's memory pipe fails a write past its capacity, which makes a Rust guest's
//! `eprintln!` panic and so turns a chatty handler into a trapping one. This stream keeps the
//! first bytes, counts the rest as dropped (shown by a marker), and accepts every write. It is
//! cleared for each message when an instance is reused, so one message's output never shows up
//! in the next one's report.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// How much one write may hand over at once.
const WRITE_BUDGET: usize = 64 * 1024;

#[derive(Debug, Default)]
struct Kept {
    bytes: Vec<u8>,
    dropped: u64,
}

/// A capped, clearable capture of a guest's stderr.
#[derive(Clone, Debug)]
pub(crate) struct GuestStderr {
    kept: Arc<Mutex<Kept>>,
    capacity: usize,
}

impl GuestStderr {
    /// A capture keeping at most `capacity` bytes.
    pub(crate) fn new(capacity: usize) -> Self {
        GuestStderr {
            kept: Arc::default(),
            capacity,
        }
    }

    fn kept(&self) -> MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn keep(&self, bytes: &[u8]) {
        let mut kept = self.kept();
        let room = self.capacity.saturating_sub(kept.bytes.len());
        let (now, over) = bytes.split_at(bytes.len().min(room));
        kept.bytes.extend_from_slice(now);
        kept.dropped += over.len() as u64;
    }

    /// What was written, trimmed, with a marker if some of it was dropped.
    pub(crate) fn text(&self) -> String {
        let kept = self.kept();
        let text = String::from_utf8_lossy(&kept.bytes).trim().to_string();
        if kept.dropped == 0 {
            text
        } else {
            format!("{text}… [{} more bytes of stderr dropped]", kept.dropped)
        }
    }

    /// Forgets what was written (a reused instance starts a new message).
    pub(crate) fn clear(&self) {
        *self.kept() = Kept::default();
    }
}

impl IsTerminal for GuestStderr {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStderr {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl OutputStream for GuestStderr {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_BUDGET)
    }
}

#[async_trait::async_trait]
impl Pollable for GuestStderr {
    async fn ready(&mut self) {}
}

impl AsyncWrite for GuestStderr {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.keep(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_past_the_cap_are_dropped_with_a_marker_never_refused() {
        let stderr = GuestStderr::new(8);
        let mut stream = stderr.clone();
        for _ in 0..3 {
            assert!(stream.write(Bytes::from_static(b"panic! ")).is_ok());
        }
        assert_eq!(stream.check_write().ok(), Some(WRITE_BUDGET));
        assert_eq!(stderr.text(), "panic! p… [13 more bytes of stderr dropped]");
        stderr.clear();
        assert_eq!(stderr.text(), "");
    }
}
