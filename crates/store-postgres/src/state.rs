//! A completion whose run read state to decide. Its reads carry the sha1 of what the run saw,
//! and PostgreSQL has no built-in sha1 (it is pgcrypto's, an extension qhost does not ask a
//! database to install), so this one step is a transaction of its own: lock the keys it reads
//! and writes and its lease's row (`lock_reads`), compare what they hold with what the run saw,
//! then complete in the same transaction, or roll back with a conflict. Runs that read no state
//! (the usual case) complete in one call, batched. Writers of a key take the same advisory lock
//! in `complete`, so nothing changes a key between the check and the commit.

use deadpool_postgres::GenericClient as _;

use qhost_store::commit::sha1_hex;
use qhost_store::{Committed, Completion, IdempotencyError, StoreResult};

use crate::PostgresStore;
use crate::error::failed;

impl PostgresStore {
    /// Completes `done`, whose run read state: its answer.
    pub(crate) async fn complete_reading(
        &self,
        done: &Completion,
    ) -> StoreResult<StoreResult<Committed>> {
        let mut client = self.client().await?;
        // BEGIN, the locks and reads, the completion (counted where it is made), COMMIT.
        self.trips(3);
        let tx = client.transaction().await.map_err(failed)?;
        let (mut lock_bucket, mut lock_key, mut read_bucket, mut read_key) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for b in &done.state.buckets {
            for read in &b.reads {
                read_bucket.push(b.bucket.as_str());
                read_key.push(read.key.as_str());
            }
            let written = b.writes.iter().map(|(k, _)| k.as_str());
            for key in b.reads.iter().map(|r| r.key.as_str()).chain(written) {
                lock_bucket.push(b.bucket.as_str());
                lock_key.push(key);
            }
        }
        let sql = self.sql("SELECT held, vals FROM {s}.lock_reads($1, $2, $3, $4, $5, $6)");
        let statement = tx.prepare_cached(&sql).await.map_err(failed)?;
        let row = tx
            .query_one(
                &statement,
                &[
                    &done.lease.key,
                    &done.lease.owner,
                    &lock_bucket,
                    &lock_key,
                    &read_bucket,
                    &read_key,
                ],
            )
            .await
            .map_err(failed)?;
        let key = || done.lease.key.clone();
        // The lease is checked before the state: a lost lease is lost, whatever the state.
        if !row.get::<_, bool>(0) {
            return Ok(Err(IdempotencyError::LeaseLost(key())));
        }
        let now: Vec<Option<Vec<u8>>> = row.get::<_, Option<_>>(1).unwrap_or_default();
        let seen = done.state.buckets.iter().flat_map(|b| &b.reads);
        if now.len() != read_key.len()
            || seen
                .zip(&now)
                .any(|(read, value)| value.as_deref().map(sha1_hex) != read.seen)
        {
            return Ok(Err(IdempotencyError::Conflict(key())));
        }
        let mut answers = self.complete_on(&tx, &[done]).await?;
        tx.commit().await.map_err(failed)?;
        Ok(answers.remove(0))
    }
}
