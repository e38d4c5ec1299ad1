//! A source for tests that delegates every call to another source, except where a test's
//! [`Twist`] steps in before a call: to count it, slow it down, leave it unanswered or fail it.
//! One wrapper, so a test names only the call it is about (behind the `conformance` feature,
//! with the suite: both are for sources' and the host's tests).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use qhost_message::{Outgoing, Received};

use crate::{Capabilities, QueueDepth, QueueSource, SourceError};

/// What a test does before a call reaches the source underneath: each step may wait, count,
/// or fail the call with an error (which the caller gets instead of the source's answer). Each
/// lets the call through unless the test says otherwise.
#[async_trait]
pub trait Twist: Send + Sync + std::fmt::Debug + 'static {
    /// Before a batch of deliveries is settled.
    async fn settle(&self) -> Result<(), SourceError> {
        Ok(())
    }
    /// Before one delivery is put back.
    async fn put_back(&self) -> Result<(), SourceError> {
        Ok(())
    }
    /// Before a batch of deliveries is put back.
    async fn put_back_batch(&self) -> Result<(), SourceError> {
        Ok(())
    }
    /// Before a delivery's hold is kept.
    async fn hold(&self) -> Result<(), SourceError> {
        Ok(())
    }
}

/// `inner`, with `twist` before its calls.
#[derive(Debug)]
pub struct Twisted<T> {
    /// The source every call reaches in the end.
    pub inner: Arc<dyn QueueSource>,
    /// What the test does first.
    pub twist: T,
}

#[async_trait]
impl<T: Twist> QueueSource for Twisted<T> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        hold: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, SourceError> {
        self.inner.receive(queue, max, hold, wait).await
    }

    async fn settle(
        &self,
        queue: &str,
        handles: &[String],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        self.twist.settle().await?;
        self.inner.settle(queue, handles).await
    }

    async fn put_back(
        &self,
        queue: &str,
        handle: &str,
        after: Duration,
    ) -> Result<(), SourceError> {
        self.twist.put_back().await?;
        self.inner.put_back(queue, handle, after).await
    }

    async fn put_back_batch(
        &self,
        queue: &str,
        entries: &[(String, Duration)],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        self.twist.put_back_batch().await?;
        self.inner.put_back_batch(queue, entries).await
    }

    async fn hold(&self, queue: &str, handle: &str, hold: Duration) -> Result<(), SourceError> {
        self.twist.hold().await?;
        self.inner.hold(queue, handle, hold).await
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
