//! Payloads in Redis: `SET key value PX ttl`, so an orphaned payload (its message dead-lettered
//! and never redriven, say) expires by itself.

use std::time::Duration;

use async_trait::async_trait;
use redis::AsyncCommands as _;

use super::store::{PayloadError, PayloadStore};
use qhost_redis_link::{RedisDeadlines, RedisLink, RedisTarget};

/// A Redis payload store.
#[derive(Clone)]
pub struct RedisPayloads {
    conn: RedisLink,
    prefix: String,
    ttl: Duration,
}

impl std::fmt::Debug for RedisPayloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisPayloads")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: redis::RedisError) -> PayloadError {
    PayloadError::Unavailable(format!("redis: {e}"))
}

/// The shortest response deadline of a payload call.
const PAYLOAD_RESPONSE: Duration = Duration::from_secs(10);

impl RedisPayloads {
    /// Connects to `target` (a server or a cluster); keys are `PREFIX:payload:KEY` and live
    /// for `ttl`.
    pub async fn connect(
        target: &RedisTarget,
        prefix: &str,
        ttl: Duration,
    ) -> anyhow::Result<Self> {
        // A payload of many megabytes takes longer to move than a lease: never less than
        // PAYLOAD_RESPONSE, however short the configured deadline.
        let timeouts = RedisDeadlines {
            connect: target.deadlines.connect,
            response: target.deadlines.response.max(PAYLOAD_RESPONSE),
        };
        let conn = RedisLink::connect(target, timeouts)
            .await
            .map_err(|e| anyhow::anyhow!("the Redis payload store: {e:#}"))?;
        Ok(RedisPayloads {
            conn,
            prefix: format!("{prefix}:payload:"),
            ttl,
        })
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

#[async_trait]
impl PayloadStore for RedisPayloads {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), PayloadError> {
        let mut conn = self.conn.clone();
        let opts = redis::SetOptions::default()
            .with_expiration(redis::SetExpiry::PX(self.ttl.as_millis() as u64));
        conn.set_options::<_, _, ()>(self.key(key), bytes, opts)
            .await
            .map_err(unavailable)
    }

    async fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, PayloadError> {
        let mut conn = self.conn.clone();
        // The length first, in the same round trip: a value over `max` is never transferred.
        let full = self.key(key);
        let (exists, length): (bool, u64) = redis::pipe()
            .exists(&full)
            .strlen(&full)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        if !exists {
            return Err(PayloadError::Missing(format!("redis:{key}")));
        }
        if length > max {
            return Err(PayloadError::Larger(format!("redis:{key}"), max));
        }
        let value: Option<Vec<u8>> = conn.get(full).await.map_err(unavailable)?;
        value.ok_or_else(|| PayloadError::Missing(format!("redis:{key}")))
    }

    async fn delete(&self, key: &str) -> Result<(), PayloadError> {
        let mut conn = self.conn.clone();
        conn.del::<_, ()>(self.key(key)).await.map_err(unavailable)
    }
}
