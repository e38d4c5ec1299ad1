//! The store's schema, versioned: `qhost_versions` in the schema lists the versions applied,
//! and a host applies the ones it knows and the database lacks, at start, in one transaction
//! under an advisory lock on the schema's name, so hosts starting at once migrate it once and
//! a host that fails half way leaves nothing half done. A schema newer than this qhost knows
//! is refused with why: an older host must not write records whose meaning changed.

use anyhow::{Context as _, bail};
use deadpool_postgres::Pool;

/// The newest schema version this qhost knows.
pub const SCHEMA_VERSION: i32 = 2;

/// Each version's text, `qhost_schema` standing for the schema's quoted name.
const VERSIONS: &[(i32, &str)] = &[
    (1, include_str!("sql/v1.sql")),
    (2, include_str!("sql/v2.sql")),
];

/// The oldest server the store runs on (`gen_random_uuid()` is built in from 13).
const MIN_SERVER: i32 = 130_000;

/// Creates the schema `name` (`quoted` for SQL) if it is absent, and applies the versions it
/// lacks.
pub(crate) async fn migrate(pool: &Pool, name: &str, quoted: &str) -> anyhow::Result<()> {
    let mut client = (pool.get().await).context("connecting to the PostgreSQL store")?;
    let server: i32 = client
        .query_one("SELECT current_setting('server_version_num')::integer", &[])
        .await?
        .get(0);
    if server < MIN_SERVER {
        bail!("the PostgreSQL store needs PostgreSQL 13 or newer; this server is {server}");
    }
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('qhost-migrate' || chr(31) || $1, 0))",
        &[&name],
    )
    .await?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {quoted};
         CREATE TABLE IF NOT EXISTS {quoted}.qhost_versions (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await
    .with_context(|| format!("creating the store's schema {name}"))?;
    let at: i32 = tx
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {quoted}.qhost_versions"),
            &[],
        )
        .await?
        .get(0);
    if at > SCHEMA_VERSION {
        bail!(
            "the store's schema {name} is at version {at}, newer than this qhost knows \
             ({SCHEMA_VERSION}): a newer qhost migrated it. Run that version, or name another \
             schema (idempotency.schema)"
        );
    }
    for (version, text) in VERSIONS.iter().filter(|(v, _)| *v > at) {
        tx.batch_execute(&text.replace("qhost_schema", quoted))
            .await
            .with_context(|| format!("migrating the store's schema {name} to version {version}"))?;
        tx.execute(
            &format!("INSERT INTO {quoted}.qhost_versions (version) VALUES ($1)"),
            &[version],
        )
        .await?;
        tracing::info!(schema = name, version, "migrated the PostgreSQL store");
    }
    tx.commit().await?;
    Ok(())
}

/// The version the schema `quoted` is at, without changing anything: `None` when there is no
/// store in it yet.
pub(crate) async fn applied(pool: &Pool, quoted: &str) -> anyhow::Result<Option<i32>> {
    let client = (pool.get().await).context("connecting to the PostgreSQL store")?;
    let table = format!("{quoted}.qhost_versions");
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let sql = format!("SELECT coalesce(max(version), 0) FROM {table}");
    Ok(Some(client.query_one(&sql, &[]).await?.get(0)))
}
