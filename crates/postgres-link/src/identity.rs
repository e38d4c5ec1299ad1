//! Which database a pool reaches, so the host can tell when the store and the queue share one
//! (and a completion can then write its outbox into the queue in its own transaction), however
//! their URLs spell the server: a host name, an address, a pooler in between.
//!
//! A database is the server's system identifier (made by `initdb`; a replica shares its
//! primary's, so the server's start time comes with it) and the database's name. The role
//! comes too: a completion writes as the store's role, and only the queue's own role is known
//! to be allowed to write its tables.

use anyhow::Context as _;
use deadpool_postgres::Pool;

/// A database and the role a pool uses on it; equal for two pools that reach the same
/// database as the same role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The server's system identifier and start time.
    server: String,
    /// The database's name.
    pub database: String,
    /// The role the pool's connections log in as.
    role: String,
}

/// The identity of the database `pool` reaches.
pub async fn identity(pool: &Pool) -> anyhow::Result<Identity> {
    let client = pool.get().await.context("connecting to PostgreSQL")?;
    let row = client
        .query_one(
            "SELECT (SELECT system_identifier FROM pg_control_system())::text
                    || '@' || pg_postmaster_start_time()::text,
                    current_database()::text, current_user::text",
            &[],
        )
        .await
        .context("asking PostgreSQL which database it is")?;
    Ok(Identity {
        server: row.get(0),
        database: row.get(1),
        role: row.get(2),
    })
}
