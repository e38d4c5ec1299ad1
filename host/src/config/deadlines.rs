//! `[timeouts]`: how long each call to SQS, S3, Redis and PostgreSQL may take, and how long a queue may go
//! without finishing a message before readiness reports it stalled.
//!
//! Every remote call has a deadline, because one answer that never arrives (a half-open
//! connection, a load balancer that swallows a reply, a partition without a reset) must fail the
//! call rather than freeze whatever waits on it. The defaults suit services that answer in
//! milliseconds; each is a field of its own so an operator can move one without the others.

use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

use crate::aws::AwsDeadlines;
use crate::redis_link::RedisDeadlines;

/// `[timeouts]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawTimeouts {
    pub connect_ms: Option<u64>,
    pub sqs_call_ms: Option<u64>,
    pub sqs_receive_margin_ms: Option<u64>,
    pub s3_call_ms: Option<u64>,
    pub redis_response_ms: Option<u64>,
    pub postgres_statement_ms: Option<u64>,
    pub stalled_after_secs: Option<u64>,
}

/// The checked deadlines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// SQS calls.
    pub sqs: AwsDeadlines,
    /// S3 calls (the payload store).
    pub s3: AwsDeadlines,
    /// Redis calls (the idempotency store, and the Redis payload store).
    pub redis: RedisDeadlines,
    /// PostgreSQL: connecting (and waiting for a pooled connection), and how long the server
    /// lets one statement run before it cancels it.
    pub postgres: PostgresDeadlines,
    /// A queue with messages visible that finishes none for this long is reported not ready.
    pub stalled_after: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            sqs: AwsDeadlines::SQS,
            s3: AwsDeadlines::S3,
            redis: RedisDeadlines::default(),
            postgres: PostgresDeadlines {
                connect: AwsDeadlines::SQS.connect,
                statement: Duration::from_secs(5),
            },
            stalled_after: Duration::from_secs(60),
        }
    }
}

/// How long the PostgreSQL store's calls may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostgresDeadlines {
    /// Connecting, and waiting for a free connection of the pool.
    pub connect: Duration,
    /// One statement, on the server (`statement_timeout`).
    pub statement: Duration,
}

/// A field in milliseconds, within `min..=max`, or its default.
fn ms(
    name: &str,
    value: Option<u64>,
    default: Duration,
    min: u64,
    max: u64,
) -> anyhow::Result<Duration> {
    let Some(value) = value else {
        return Ok(default);
    };
    if !(min..=max).contains(&value) {
        bail!("timeouts.{name} is {value}; it must be between {min} and {max} (milliseconds)");
    }
    Ok(Duration::from_millis(value))
}

/// Checks `[timeouts]`.
pub(crate) fn deadlines(raw: RawTimeouts) -> anyhow::Result<Deadlines> {
    let d = Deadlines::default();
    let connect = ms("connect-ms", raw.connect_ms, d.sqs.connect, 100, 60_000)?;
    let margin = ms(
        "sqs-receive-margin-ms",
        raw.sqs_receive_margin_ms,
        d.sqs.receive_margin,
        100,
        60_000,
    )?;
    let sqs = AwsDeadlines {
        connect,
        call: ms("sqs-call-ms", raw.sqs_call_ms, d.sqs.call, 100, 300_000)?,
        receive_margin: margin,
    };
    let s3 = AwsDeadlines {
        connect,
        call: ms("s3-call-ms", raw.s3_call_ms, d.s3.call, 100, 3_600_000)?,
        receive_margin: margin,
    };
    let redis = RedisDeadlines {
        connect,
        response: ms(
            "redis-response-ms",
            raw.redis_response_ms,
            d.redis.response,
            10,
            300_000,
        )?,
    };
    let postgres = PostgresDeadlines {
        connect,
        statement: ms(
            "postgres-statement-ms",
            raw.postgres_statement_ms,
            d.postgres.statement,
            10,
            300_000,
        )?,
    };
    let stalled_after = match raw.stalled_after_secs {
        None => d.stalled_after,
        Some(secs) if (5..=86_400).contains(&secs) => Duration::from_secs(secs),
        Some(secs) => {
            bail!("timeouts.stalled-after-secs is {secs}; it must be between 5 and 86400")
        }
    };
    Ok(Deadlines {
        sqs,
        s3,
        redis,
        postgres,
        stalled_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides_and_refusals_name_the_field() {
        assert_eq!(
            deadlines(RawTimeouts::default()).unwrap(),
            Deadlines::default()
        );
        let set = deadlines(RawTimeouts {
            connect_ms: Some(500),
            sqs_call_ms: Some(2_000),
            redis_response_ms: Some(250),
            stalled_after_secs: Some(30),
            ..RawTimeouts::default()
        })
        .unwrap();
        assert_eq!(set.sqs.connect, Duration::from_millis(500));
        assert_eq!(set.s3.connect, Duration::from_millis(500));
        assert_eq!(set.redis.connect, Duration::from_millis(500));
        assert_eq!(set.sqs.call, Duration::from_secs(2));
        assert_eq!(set.s3.call, AwsDeadlines::S3.call);
        assert_eq!(set.redis.response, Duration::from_millis(250));
        assert_eq!(set.stalled_after, Duration::from_secs(30));
        let zero = RawTimeouts {
            sqs_call_ms: Some(0),
            ..RawTimeouts::default()
        };
        assert_eq!(
            deadlines(zero).unwrap_err().to_string(),
            "timeouts.sqs-call-ms is 0; it must be between 100 and 300000 (milliseconds)"
        );
        let stall = RawTimeouts {
            stalled_after_secs: Some(1),
            ..RawTimeouts::default()
        };
        assert!(
            deadlines(stall)
                .unwrap_err()
                .to_string()
                .contains("stalled-after-secs")
        );
    }
}
