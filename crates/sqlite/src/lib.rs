//! The embedded database behind the `local` backends.
//!
//! The local queue and idempotency store keep their state in one SQLite file under the data
//! directory, so that `qhost send` in one process reaches `qhost run` in another and a restart
//! forgets nothing. WAL mode lets readers and one writer proceed together; a busy timeout
//! makes cross-process writers wait their turn instead of failing. Without a path the database
//! lives in memory, for tests and benchmarks.
//!
//! rusqlite is synchronous, so every call runs on tokio's blocking pool.

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use rusqlite::Connection;

/// A shareable SQLite connection whose calls run off the async threads.
#[derive(Clone, Debug)]
pub struct Db {
    conn: Arc<Mutex<Connection>>,
}

impl Db {
    /// Opens (creating if needed) the database at `path`, or an in-memory one for `None`.
    pub fn open(path: Option<&Path>) -> anyhow::Result<Self> {
        let conn = match path {
            Some(path) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating data directory {}", dir.display()))?;
                }
                let conn = Connection::open(path)
                    .with_context(|| format!("opening {}", path.display()))?;
                conn.pragma_update(None, "journal_mode", "WAL")?;
                conn.pragma_update(None, "synchronous", "NORMAL")?;
                conn
            }
            None => Connection::open_in_memory()?,
        };
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        Ok(Db {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `f` with the connection on the blocking pool.
    pub async fn call<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> anyhow::Result<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut conn = conn
                .lock()
                .map_err(|_| anyhow::anyhow!("database lock poisoned"))?;
            f(&mut conn)
        })
        .await
        .context("database task failed")?
    }

    /// Runs `f` with the connection on the current thread (for set-up).
    pub fn call_now<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| anyhow::anyhow!("database lock poisoned"))?;
        f(&mut conn)
    }
}
