//! A twist for the source contract's test wrapper (`qhost::testing::Twisted`) that fails
//! chosen operations, to drive the pipeline through its failure paths against the real local
//! queue underneath.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use qhost::sources::{QueueSource, SourceError};
use qhost::testing::{Twist, Twisted};

/// Fails the first `n` batch deletes; everything else goes to the queue underneath.
#[derive(Debug)]
pub struct FailingAcks {
    left: AtomicU32,
}

impl FailingAcks {
    /// `inner`, its first `n` settle calls failing.
    pub fn wrap(inner: Arc<dyn QueueSource>, n: u32) -> Twisted<FailingAcks> {
        Twisted {
            inner,
            twist: FailingAcks {
                left: AtomicU32::new(n),
            },
        }
    }
}

#[async_trait]
impl Twist for FailingAcks {
    async fn settle(&self) -> Result<(), SourceError> {
        let taken = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match taken {
            Ok(_) => Err(SourceError::Backend(anyhow::anyhow!(
                "injected delete failure"
            ))),
            Err(_) => Ok(()),
        }
    }
}
