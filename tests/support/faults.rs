//! A queue wrapper that fails chosen operations, to drive the pipeline through its failure
//! paths against the real local queue underneath.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use qhost::sources::{QueueDepth, QueueSource, SourceError};
use qhost::{Outgoing, Received};

/// Fails the first `fail_acks` batch deletes; everything else goes to the inner queue.
#[derive(Debug)]
pub struct FailingAcks {
    inner: Arc<dyn QueueSource>,
    fail_acks: AtomicU32,
}

impl FailingAcks {
    /// Wraps `inner`, failing its first `n` ack calls.
    pub fn new(inner: Arc<dyn QueueSource>, n: u32) -> Self {
        FailingAcks {
            inner,
            fail_acks: AtomicU32::new(n),
        }
    }
}

#[async_trait]
impl QueueSource for FailingAcks {
    fn capabilities(&self) -> qhost::sources::Capabilities {
        self.inner.capabilities()
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, SourceError> {
        self.inner.receive(queue, max, visibility, wait).await
    }

    async fn settle(
        &self,
        queue: &str,
        receipts: &[String],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        let left = self.fail_acks.load(Ordering::SeqCst);
        if left > 0 {
            self.fail_acks.store(left - 1, Ordering::SeqCst);
            return Err(SourceError::Backend(anyhow::anyhow!(
                "injected delete failure"
            )));
        }
        self.inner.settle(queue, receipts).await
    }

    async fn put_back(
        &self,
        queue: &str,
        receipt: &str,
        delay: Duration,
    ) -> Result<(), SourceError> {
        self.inner.put_back(queue, receipt, delay).await
    }

    async fn hold(&self, queue: &str, receipt: &str, hold: Duration) -> Result<(), SourceError> {
        self.inner.hold(queue, receipt, hold).await
    }

    async fn send(&self, messages: &[Outgoing]) -> Result<Vec<String>, SourceError> {
        self.inner.send(messages).await
    }

    async fn depth(&self, queue: &str) -> Result<QueueDepth, SourceError> {
        self.inner.depth(queue).await
    }

    fn depth_is_exact(&self) -> bool {
        self.inner.depth_is_exact()
    }
}
