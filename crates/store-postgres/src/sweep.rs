//! Deletes the rows whose time has passed: leases and completed records past their dedup
//! window (and their fencing counter's margin), state values past their time to live, shared
//! records, rate cells and flow slots past their expiry. Each delete takes at most [`BATCH`]
//! rows and skips rows another call holds, so it never holds a lock long nor waits on one; a
//! table with more to delete gets more batches in the same pass, up to [`MAX_BATCHES`].
//! Every host runs it; two at once skip each other's rows.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;

/// Rows a delete takes at most.
const BATCH: u64 = 500;

/// Deletes per table per pass at most.
const MAX_BATCHES: usize = 20;

/// How often a pass runs.
const EVERY: Duration = Duration::from_secs(10);

/// Each table, with the condition that makes a row removable and the columns that name it.
const TABLES: &[(&str, &str, &str)] = &[
    ("leases", "forget_ms < {s}.clock_ms()", "key"),
    ("kv", "expires_ms < {s}.clock_ms()", "bucket, key"),
    ("records", "expires_ms < {s}.clock_ms()", "key"),
    ("rate", "forget_ms < {s}.clock_ms()", "key"),
    ("slots", "expires_ms < {s}.clock_ms()", "key, holder"),
];

/// The running sweeper; stopped when dropped.
pub(crate) struct Sweeper(tokio::task::JoinHandle<()>);

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Sweeper {
    /// Starts sweeping the store in `schema` (quoted).
    pub(crate) fn start(pool: Pool, schema: Arc<str>) -> Self {
        Sweeper(tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = pass(&pool, &schema).await {
                    tracing::warn!(error = %format!("{e:#}"), "could not delete expired rows from the PostgreSQL store; will try again");
                }
            }
        }))
    }
}

/// One pass over every table: how many rows went.
pub(crate) async fn pass(pool: &Pool, schema: &str) -> anyhow::Result<u64> {
    let client = pool.get().await?;
    let mut deleted = 0;
    for (table, expired, id) in TABLES {
        let sql = format!(
            "DELETE FROM {{s}}.{table} WHERE ({id}) IN (
                 SELECT {id} FROM {{s}}.{table} WHERE {expired} LIMIT {BATCH} FOR UPDATE SKIP LOCKED)"
        )
        .replace("{s}", schema);
        let statement = client.prepare_cached(&sql).await?;
        for _ in 0..MAX_BATCHES {
            let gone = client.execute(&statement, &[]).await?;
            deleted += gone;
            if gone < BATCH {
                break;
            }
        }
    }
    Ok(deleted)
}
