//! `[source] kind = "pgmq"`: queues in a PostgreSQL database, in pgmq's schema.
//!
//! ```toml
//! [source]
//! kind = "pgmq"
//! url = "postgres://qhost@db.internal:5432/app?sslmode=verify-full"
//! password = { env = "PGPASSWORD" }   # or { file = "…" }, or in the URL
//! declare = true         # create each consumed queue and its dead-letter queue (default)
//! install-pgmq = false   # install pgmq's SQL-only schema where the database has no pgmq
//! poll-ms = 250          # the longest pause between reads of an empty queue
//! notify = false         # wait on pgmq's insert notifications (pgmq 1.7+) instead of polling
//! pool-size = 8          # connections (default: from max-in-flight and lanes)
//! ca-file = "ca.pem"     # a private CA, for sslmode=verify-full
//! ```

use std::time::Duration;

use anyhow::bail;

use super::file::RawSource;
use super::postgres::{PgConnection, RawConnection, connection};

/// Where the pgmq queues are, and how the source reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgmqSourceSettings {
    /// The database.
    pub db: PgConnection,
    /// Whether the host creates its queues when absent.
    pub declare: bool,
    /// Whether the host installs pgmq's SQL-only schema where there is no pgmq.
    pub install: bool,
    /// The longest pause between reads of an empty queue.
    pub poll: Duration,
    /// Whether the host sets up pgmq's insert notifications and waits on them.
    pub notify: bool,
}

/// The fields only `kind = "pgmq"` takes.
pub(super) fn only_pgmq(raw: &RawSource) -> [(&'static str, bool); 4] {
    [
        ("install-pgmq", raw.install_pgmq.is_some()),
        ("poll-ms", raw.poll_ms.is_some()),
        ("notify", raw.notify.is_some()),
        ("pool-size", raw.pool_size.is_some()),
    ]
}

/// The settings `raw` gives; the pool sized from `max_in_flight` and `lanes` unless it says.
pub(super) fn settings(
    raw: RawSource,
    max_in_flight: u32,
    lanes: u32,
) -> anyhow::Result<PgmqSourceSettings> {
    if raw.region.is_some() || raw.endpoint_url.is_some() {
        bail!("source.region and source.endpoint-url are only for kind = \"sqs\"");
    }
    let poll = match raw.poll_ms {
        None => Duration::from_millis(250),
        Some(ms) if (10..=10_000).contains(&ms) => Duration::from_millis(ms),
        Some(ms) => bail!("source.poll-ms is {ms}; it must be between 10 and 10000"),
    };
    let raw_connection = RawConnection {
        section: "source",
        url: raw.url,
        password: raw.password.as_ref(),
        pool_size: raw.pool_size,
        ca_file: raw.ca_file,
    };
    Ok(PgmqSourceSettings {
        db: connection(raw_connection, max_in_flight, lanes)?,
        declare: raw.declare.unwrap_or(true),
        install: raw.install_pgmq.unwrap_or(false),
        poll,
        notify: raw.notify.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, SourceKind};

    fn parse(source: &str) -> anyhow::Result<Config> {
        Config::parse(&format!(
            "max-in-flight = 16\n[source]\nkind = \"pgmq\"\n{source}"
        ))
    }

    #[test]
    fn defaults_declare_queues_and_install_nothing() {
        let c = parse("url = \"postgres://postgres@127.0.0.1:5432/test\"").unwrap();
        let SourceKind::Pgmq(s) = &c.source else {
            panic!("{:?}", c.source)
        };
        assert!(s.declare && !s.install && !s.notify);
        assert_eq!((s.poll.as_millis(), s.db.pool_size), (250, 4));
        assert_eq!(s.db.deadlines.statement, std::time::Duration::from_secs(5));
    }

    #[test]
    fn mistakes_say_what_to_write() {
        let cases = [
            ("", "source.url is required"),
            ("url = \"amqp://h/\"", "must start with postgres://"),
            (
                "url = \"postgres://h/d\"\npoll-ms = 1",
                "between 10 and 10000",
            ),
            (
                "url = \"postgres://h/d\"\nprefetch = 4",
                "only for kind = \"rabbitmq\"",
            ),
            (
                "url = \"postgres://h/d\"\nregion = \"eu-west-1\"",
                "only for kind = \"sqs\"",
            ),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", parse(text).unwrap_err());
            assert!(err.contains(expected), "{text}: {err}");
        }
        let err = Config::parse(
            "[source]\nkind = \"rabbitmq\"\nurl = \"amqp://h/\"\ninstall-pgmq = true",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("only for kind = \"pgmq\""),
            "{err}"
        );
    }
}
