//! `[idempotency] kind = "postgres"`: the store in a PostgreSQL database.
//!
//! ```toml
//! [idempotency]
//! kind = "postgres"
//! url = "postgres://qhost@db.internal:5432/app?sslmode=verify-full"
//! password = { env = "PGPASSWORD" }   # or { file = "…" }, or in the URL
//! schema = "qhost"                     # the store's tables; another name for another fleet
//! pool-size = 8                        # connections (default: from max-in-flight and lanes)
//! ca-file = "ca.pem"                   # a private CA, for sslmode=verify-full
//! ```

use std::path::PathBuf;

use anyhow::bail;

use super::deadlines::PostgresDeadlines;
use super::file::RawIdempotency;
use super::secret;

/// A PostgreSQL database and how its connections are made (the store's, and pgmq's).
#[derive(Clone, PartialEq, Eq)]
pub struct PgConnection {
    /// The database's URL.
    pub url: String,
    /// The password, when the URL carries none.
    pub password: Option<String>,
    /// Connections at most.
    pub pool_size: usize,
    /// A private CA's certificates to trust (beside the platform's) for `sslmode=verify-full`.
    pub ca_file: Option<PathBuf>,
    /// How long connecting and each statement may take.
    pub deadlines: PostgresDeadlines,
}

impl std::fmt::Debug for PgConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConnection")
            .field("url", &crate::redis_link::redacted(&self.url))
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

/// Where the PostgreSQL store is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresStoreSettings {
    /// The database.
    pub db: PgConnection,
    /// The schema the store's tables live in.
    pub schema: String,
}

/// A connection's fields as written, under `section` (`idempotency`, `source`).
pub(super) struct RawConnection<'a> {
    pub section: &'a str,
    pub url: Option<String>,
    pub password: Option<&'a secret::RawSecret>,
    pub pool_size: Option<u32>,
    pub ca_file: Option<PathBuf>,
}

/// The connection `raw` gives; the pool sized from `max_in_flight` and `lanes` unless it says.
pub(super) fn connection(
    raw: RawConnection<'_>,
    max_in_flight: u32,
    lanes: u32,
) -> anyhow::Result<PgConnection> {
    let section = raw.section;
    let Some(url) = raw.url else {
        bail!("{section}.url is required (postgres://USER@HOST:5432/DATABASE)");
    };
    if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
        bail!(
            "{section}.url `{}` must start with postgres:// or postgresql://",
            crate::redis_link::redacted(&url)
        );
    }
    let password = (raw.password)
        .map(|p| secret::read(&format!("{section}.password"), p))
        .transpose()?;
    let pool_size = match raw.pool_size {
        Some(n) if (1..=256).contains(&n) => n as usize,
        Some(n) => bail!("{section}.pool-size is {n}; it must be between 1 and 256"),
        None => default_pool(max_in_flight, lanes),
    };
    Ok(PgConnection {
        url,
        password,
        pool_size,
        ca_file: raw.ca_file,
        deadlines: PostgresDeadlines {
            connect: std::time::Duration::ZERO,
            statement: std::time::Duration::ZERO,
        },
    })
}

/// The default schema.
const SCHEMA: &str = "qhost";

/// The settings `raw` gives; the pool sized from `max_in_flight` and `lanes` unless it says.
pub(super) fn settings(
    raw: RawIdempotency,
    max_in_flight: u32,
    lanes: u32,
) -> anyhow::Result<PostgresStoreSettings> {
    if raw.urls.is_some() || raw.cluster.is_some() {
        bail!("idempotency.urls and cluster are only for kind = \"redis\"");
    }
    let schema = raw.schema.unwrap_or_else(|| SCHEMA.into());
    check_schema(&schema)?;
    let raw_connection = RawConnection {
        section: "idempotency",
        url: raw.url,
        password: raw.password.as_ref(),
        pool_size: raw.pool_size,
        ca_file: raw.ca_file,
    };
    Ok(PostgresStoreSettings {
        db: connection(raw_connection, max_in_flight, lanes)?,
        schema,
    })
}

/// Connections for a host: each call holds one for a round trip, and leases and completions
/// go a batch per call, so a quarter of the messages in flight (4 to 16) per lane keeps calls
/// from waiting without filling the server's `max_connections` (100 by default) with a fleet.
pub(super) fn default_pool(max_in_flight: u32, lanes: u32) -> usize {
    ((max_in_flight / 4).clamp(4, 16) * lanes) as usize
}

/// A schema name: lower-case letters, digits and underscores, starting with a letter or an
/// underscore, at most 63 bytes (PostgreSQL's identifiers), so it needs no quoting anywhere an
/// operator types it.
fn check_schema(schema: &str) -> anyhow::Result<()> {
    let first_ok = schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_');
    let rest_ok =
        (schema.chars()).all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || schema.len() > 63 || schema.starts_with("pg_") {
        bail!(
            "idempotency.schema `{schema}`: write lower-case letters, digits and underscores, \
             starting with a letter, at most 63 (and not pg_…)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, StoreKind};

    fn parse(idempotency: &str) -> anyhow::Result<Config> {
        Config::parse(&format!(
            "max-in-flight = 32\nlanes = 2\n[idempotency]\nkind = \"postgres\"\n{idempotency}"
        ))
    }

    #[test]
    fn defaults_are_the_qhost_schema_and_a_pool_from_the_in_flight_bound() {
        let c = parse("url = \"postgres://postgres@127.0.0.1:5432/test\"").unwrap();
        let StoreKind::Postgres(s) = c.store else {
            panic!("{:?}", c.store)
        };
        assert_eq!(s.schema, "qhost");
        assert_eq!(s.db.pool_size, 16, "8 per lane at 32 in flight");
        assert_eq!(s.db.password, None);
        assert_eq!(s.db.deadlines.statement, std::time::Duration::from_secs(5));
        assert_eq!(super::default_pool(4096, 1), 16);
        assert_eq!(super::default_pool(1, 1), 4);
    }

    #[test]
    fn the_password_comes_from_a_file_and_never_shows() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let c = parse(&format!(
            "url = \"postgres://qhost@db.example/app\"\npassword = {{ file = {file:?} }}\n\
             schema = \"fleet_b\""
        ))
        .unwrap();
        let StoreKind::Postgres(s) = &c.store else {
            panic!("{:?}", c.store)
        };
        assert_eq!(
            (s.db.password.as_deref(), s.schema.as_str()),
            (Some("s3cret"), "fleet_b")
        );
        assert!(!format!("{c:?}").contains("s3cret"));
        let e = parse("url = \"mysql://u:hunter2@h/\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("postgres://") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn bad_settings_say_what_to_write() {
        let cases = [
            ("", "idempotency.url is required"),
            ("url = \"redis://127.0.0.1\"", "must start with postgres://"),
            (
                "url = \"postgres://h/d\"\nschema = \"Bad-Name\"",
                "idempotency.schema `Bad-Name`",
            ),
            (
                "url = \"postgres://h/d\"\nschema = \"pg_catalog\"",
                "not pg_",
            ),
            (
                "url = \"postgres://h/d\"\npool-size = 0",
                "between 1 and 256",
            ),
            (
                "url = \"postgres://h/d\"\ncluster = true",
                "only for kind = \"redis\"",
            ),
            (
                "url = \"postgres://h/d\"\npassword = { env = \"QHOST_TEST_UNSET_PG\" }",
                "`QHOST_TEST_UNSET_PG` is not set",
            ),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", parse(text).unwrap_err());
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
