//! Payload bytes as they move through the stores, counted where they move: the host shares
//! one [`PayloadBytes`] between its payload stores and its stats, and its metrics read it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Which way payload bytes moved through a claim-check store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadFlow {
    /// Fetched for a handler, through a pointer.
    Fetched,
    /// Stored for an outgoing message too large to send as it is.
    Stored,
}

/// Payload bytes moved so far, by way.
#[derive(Debug, Default)]
pub struct PayloadBytes {
    fetched: AtomicU64,
    stored: AtomicU64,
}

impl PayloadBytes {
    fn counter(&self, flow: PayloadFlow) -> &AtomicU64 {
        match flow {
            PayloadFlow::Fetched => &self.fetched,
            PayloadFlow::Stored => &self.stored,
        }
    }

    /// Counts `bytes` moved that way.
    pub fn add(&self, flow: PayloadFlow, bytes: u64) {
        self.counter(flow).fetch_add(bytes, Ordering::Relaxed);
    }

    /// Bytes moved so far that way.
    pub fn get(&self, flow: PayloadFlow) -> u64 {
        self.counter(flow).load(Ordering::Relaxed)
    }
}
