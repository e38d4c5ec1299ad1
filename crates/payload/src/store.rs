//! The payload store boundary: put, get and delete whole payloads by key.
//!
//! Three implementations: Redis (`SET` with a TTL), S3 (any S3-compatible endpoint) and the
//! embedded store (files in the data directory). A store tells a missing payload apart from a
//! store it cannot reach, because the pipeline treats them differently: a missing payload will
//! never appear (a reject), an unreachable store may come back (a retry).

use async_trait::async_trait;

/// Why a payload could not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The store answered that there is no such payload.
    #[error("payload {0} not found (deleted, expired, or never stored)")]
    Missing(String),
    /// The store could not be reached or failed.
    #[error("payload store unavailable: {0}")]
    Unavailable(String),
    /// The payload holds more than the reader would take; reading stopped there.
    #[error("payload {0} holds more than the {1} bytes its pointer declares")]
    Larger(String, u64),
}

/// One store's keyspace. Keys are chosen by the caller (qhost's are hex digests).
#[async_trait]
pub trait PayloadStore: Send + Sync + std::fmt::Debug {
    /// Stores `bytes` under `key`, replacing what was there.
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), PayloadError>;
    /// The payload under `key`, if it holds at most `max` bytes: reading stops at `max + 1`,
    /// so a payload larger than its pointer declares never fills host memory.
    async fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, PayloadError>;
    /// Deletes `key`; deleting a missing key succeeds.
    async fn delete(&self, key: &str) -> Result<(), PayloadError>;
}

#[async_trait]
impl<T: PayloadStore + ?Sized> PayloadStore for std::sync::Arc<T> {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), PayloadError> {
        (**self).put(key, bytes).await
    }

    async fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, PayloadError> {
        (**self).get(key, max).await
    }

    async fn delete(&self, key: &str) -> Result<(), PayloadError> {
        (**self).delete(key).await
    }
}
