//! `[source] kind = "rabbitmq"`: the broker's URL and password, the consumers' prefetch,
//! whether qhost declares its queues (and as what), how a delayed put-back waits, which queues
//! keep their order, and the broker's `consumer_timeout`.
//!
//! ```toml
//! [source]
//! kind = "rabbitmq"
//! url = "amqps://qhost@rabbit.internal:5671/orders"   # the vhost is the path; %2f for /
//! password = { env = "RABBITMQ_PASSWORD" }             # or { file = "…" }, or in the URL
//! prefetch = 32            # unacked deliveries per queue per lane (default: max-in-flight)
//! declare = true           # declare the queues and their dead-letter queues (default)
//! queue-type = "quorum"    # or "classic"
//! delivery-limit = 20      # quorum queues: RabbitMQ's own limit, a net under max-attempts
//! delay-by = "delay-queue" # or "hold": how a retry's delay waits (docs/rabbitmq.md)
//! ordered = ["payments"]   # one message at a time, in order, one consumer fleet-wide
//! consumer-timeout-ms = 1800000 # the broker's consumer_timeout, if it was changed
//! # send targets that are exchanges, named as queues are (outbox grants, `qhost send`):
//! exchanges = { order-created = { exchange = "orders", routing-key = "order.created" } }
//! ```

use anyhow::{Context as _, bail};

use super::file::RawSource;
use super::secret;
use crate::redis_link::redacted;
use crate::source::rabbitmq::{DelayBy, ExchangeTarget, QueueType, RabbitSettings};

/// The settings `raw` gives, with consumers holding `max_in_flight` unless it says otherwise.
pub(super) fn settings(raw: RawSource, max_in_flight: u32) -> anyhow::Result<RabbitSettings> {
    if raw.region.is_some() || raw.endpoint_url.is_some() {
        bail!("source.region and source.endpoint-url are only for kind = \"sqs\"");
    }
    let url = url(&raw)?;
    let prefetch = raw.prefetch.unwrap_or(max_in_flight);
    if !(1..=u32::from(u16::MAX)).contains(&prefetch) {
        bail!("source.prefetch is {prefetch}; it must be between 1 and 65535");
    }
    let queue_type = match (raw.queue_type.as_deref(), raw.delivery_limit) {
        (None | Some("quorum"), limit) => QueueType::Quorum {
            delivery_limit: limit.unwrap_or(20),
        },
        (Some("classic"), None) => QueueType::Classic,
        (Some("classic"), Some(_)) => {
            bail!(
                "source.delivery-limit is for quorum queues; a classic queue does not count deliveries"
            )
        }
        (Some(other), _) => {
            bail!("source.queue-type `{other}` is not supported; expected `quorum` or `classic`")
        }
    };
    let declare = raw.declare.unwrap_or(true);
    if !declare && (raw.queue_type.is_some() || raw.delivery_limit.is_some()) {
        bail!(
            "source.queue-type and delivery-limit say how qhost declares queues; with \
             declare = false the queues are used as they exist"
        );
    }
    let delay_by = match raw.delay_by.as_deref() {
        None | Some("delay-queue") => DelayBy::DelayQueue,
        Some("hold") => DelayBy::Hold,
        Some(other) => {
            bail!("source.delay-by `{other}` is not supported; expected `delay-queue` or `hold`")
        }
    };
    let consumer_timeout = match raw.consumer_timeout_ms {
        None => RabbitSettings::DEFAULT_CONSUMER_TIMEOUT,
        Some(ms) if ms >= MIN_CONSUMER_TIMEOUT_MS => std::time::Duration::from_millis(ms),
        Some(ms) => bail!(
            "source.consumer-timeout-ms is {ms}; RabbitMQ checks it about once a minute, so \
             below {MIN_CONSUMER_TIMEOUT_MS} ms it cannot be kept: give the broker's value"
        ),
    };
    Ok(RabbitSettings {
        url,
        prefetch: prefetch as u16,
        declare: declare.then_some(queue_type),
        delay_by,
        ordered: raw.ordered.unwrap_or_default(),
        consumer_timeout,
        connection_name: format!("qhost pid {}", std::process::id()),
        exchanges: exchanges(raw.exchanges.unwrap_or_default())?,
    })
}

/// The shortest `consumer-timeout-ms` taken: the broker checks its timeout once a minute.
const MIN_CONSUMER_TIMEOUT_MS: u64 = 60_000;

/// Refuses an `ordered` name no `[[queue]]` consumes (a typo would leave a queue unordered).
pub(super) fn check_ordered(
    settings: &RabbitSettings,
    queues: &[super::QueueConfig],
) -> anyhow::Result<()> {
    for name in &settings.ordered {
        if !queues.iter().any(|q| &q.name == name) {
            let names = queues.iter().map(|q| q.name.as_str());
            let near = crate::nearest(names, name)
                .map(|n| format!(" (did you mean `{n}`?)"))
                .unwrap_or_default();
            bail!("source.ordered names `{name}`, which no [[queue]] consumes{near}");
        }
    }
    Ok(())
}

/// The exchange targets, each named as a queue is (a grant and a handler's send name it so).
fn exchanges(
    raw: std::collections::BTreeMap<String, super::file::RawExchange>,
) -> anyhow::Result<std::collections::BTreeMap<String, ExchangeTarget>> {
    (raw.into_iter())
        .map(|(name, e)| {
            if !crate::message::wire::valid_queue_name(&name) {
                bail!(
                    "source.exchanges: `{name}` must be named as a queue is (letters, digits, \
                     `-` and `_`, at most 80), so handlers and grants can name it"
                );
            }
            if e.exchange.is_empty() {
                bail!(
                    "source.exchanges.{name}: exchange is empty (the default exchange routes by \
                     queue name: send to the queue instead)"
                );
            }
            let target = ExchangeTarget {
                exchange: e.exchange,
                routing_key: e.routing_key,
            };
            Ok((name, target))
        })
        .collect()
}

/// The URL with the password in it (from `password`, when the URL carries none).
fn url(raw: &RawSource) -> anyhow::Result<String> {
    let Some(text) = raw.url.as_deref() else {
        bail!("source.url is required for kind = \"rabbitmq\" (amqp://HOST:5672/VHOST)");
    };
    let mut url = url::Url::parse(text)
        .with_context(|| format!("source.url `{}` is not a URL", redacted(text)))?;
    if !matches!(url.scheme(), "amqp" | "amqps") {
        bail!(
            "source.url `{}` must start with amqp:// or amqps:// (TLS)",
            redacted(text)
        );
    }
    if let Some(password) = &raw.password {
        if url.password().is_some() {
            bail!("source.url carries a password and source.password is set: keep one");
        }
        let password = secret::read("source.password", password)?;
        (url.set_password(Some(&password)))
            .map_err(|()| anyhow::anyhow!("source.url has no user to go with source.password"))?;
    }
    Ok(url.to_string())
}

/// Refuses the RabbitMQ fields on a source of another `kind` (`url`, `password` and
/// `declare` are pgmq's too).
pub(super) fn refuse_fields(raw: &RawSource, kind: &str) -> anyhow::Result<()> {
    let shared = kind != "pgmq" && kind != "nats";
    let set = [
        ("url", shared && raw.url.is_some()),
        ("password", shared && raw.password.is_some()),
        ("prefetch", raw.prefetch.is_some()),
        ("declare", shared && raw.declare.is_some()),
        ("queue-type", raw.queue_type.is_some()),
        ("delivery-limit", raw.delivery_limit.is_some()),
        ("delay-by", raw.delay_by.is_some()),
        ("ordered", raw.ordered.is_some()),
        ("consumer-timeout-ms", raw.consumer_timeout_ms.is_some()),
        ("exchanges", raw.exchanges.is_some()),
    ];
    if let Some((field, _)) = set.iter().find(|(_, is_set)| *is_set) {
        bail!("source.{field} is only for kind = \"rabbitmq\" (this source is `{kind}`)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, SourceKind};
    use crate::source::rabbitmq::{DelayBy, QueueType};

    fn parse(source: &str) -> anyhow::Result<Config> {
        Config::parse(&format!(
            "max-in-flight = 8\n[source]\nkind = \"rabbitmq\"\n{source}"
        ))
    }

    #[test]
    fn defaults_are_quorum_queues_delay_queues_and_the_in_flight_bound() {
        let c = parse("url = \"amqp://guest:guest@127.0.0.1:5672/%2f\"").unwrap();
        let SourceKind::Rabbitmq(s) = c.source else {
            panic!("{:?}", c.source)
        };
        assert_eq!(s.url, "amqp://guest:guest@127.0.0.1:5672/%2f");
        assert_eq!(s.prefetch, 8);
        assert_eq!(s.declare, Some(QueueType::Quorum { delivery_limit: 20 }));
        assert_eq!(s.delay_by, DelayBy::DelayQueue);
    }

    #[test]
    fn the_password_comes_from_a_file_and_errors_never_show_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret/with:chars\n").unwrap();
        let c = parse(&format!(
            "url = \"amqps://qhost@rabbit.example:5671/orders\"\npassword = {{ file = {:?} }}\n\
             declare = false\ndelay-by = \"hold\"",
            file
        ))
        .unwrap();
        let SourceKind::Rabbitmq(s) = c.source else {
            panic!()
        };
        let url = url::Url::parse(&s.url).unwrap();
        // Percent-encoded in the URL, as AMQP URIs carry it (the client decodes it).
        assert_eq!(
            (url.username(), url.password()),
            ("qhost", Some("s3cret%2Fwith%3Achars"))
        );
        assert_eq!((s.declare, s.delay_by), (None, DelayBy::Hold));
        let e = parse("url = \"http://u:hunter2@h/\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("amqp://") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn ordered_queues_are_consumed_queues_and_holds_end_before_the_consumer_timeout() {
        let c = Config::parse(
            "[source]\nkind = \"rabbitmq\"\nurl = \"amqp://h/\"\nordered = [\"payments\"]\n\
             consumer-timeout-ms = 600000\n\
             [[queue]]\nname = \"payments\"\nplugin = \"p\"\n[[queue]]\nname = \"mail\"\nplugin = \"p\"\n",
        )
        .unwrap();
        let SourceKind::Rabbitmq(s) = c.source else {
            panic!()
        };
        assert!(s.is_ordered("payments") && !s.is_ordered("mail"));
        assert_eq!(s.longest_hold(), std::time::Duration::from_secs(300));
        let e = Config::parse(
            "[source]\nkind = \"rabbitmq\"\nurl = \"amqp://h/\"\nordered = [\"payment\"]\n\
             [[queue]]\nname = \"payments\"\nplugin = \"p\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("did you mean `payments`?"), "{e}");
    }

    #[test]
    fn exchange_targets_are_named_as_queues_are() {
        let c = parse(
            "url = \"amqp://h/\"\n\
             exchanges = { order-created = { exchange = \"orders\", routing-key = \"order.created\" } }",
        )
        .unwrap();
        let SourceKind::Rabbitmq(s) = c.source else {
            panic!()
        };
        let target = &s.exchanges["order-created"];
        assert_eq!(
            (target.exchange.as_str(), target.routing_key.as_str()),
            ("orders", "order.created")
        );
        let e = parse("url = \"amqp://h/\"\nexchanges = { \"a/b\" = { exchange = \"x\", routing-key = \"k\" } }")
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be named as a queue is"), "{e}");
    }

    #[test]
    fn mistakes_say_what_to_write() {
        let cases = [
            ("", "source.url is required"),
            (
                "url = \"amqp://h/\"\nqueue-type = \"stream\"",
                "expected `quorum` or `classic`",
            ),
            (
                "url = \"amqp://h/\"\nqueue-type = \"classic\"\ndelivery-limit = 3",
                "quorum",
            ),
            (
                "url = \"amqp://h/\"\ndeclare = false\nqueue-type = \"classic\"",
                "declare = false",
            ),
            (
                "url = \"amqp://h/\"\ndelay-by = \"sleep\"",
                "`delay-queue` or `hold`",
            ),
            ("url = \"amqp://h/\"\nprefetch = 0", "between 1 and 65535"),
            (
                "url = \"amqp://h/\"\nordered = [\"nope\"]",
                "source.ordered names `nope`, which no [[queue]] consumes",
            ),
            (
                "url = \"amqp://h/\"\nconsumer-timeout-ms = 1000",
                "below 60000 ms it cannot be kept",
            ),
            (
                "url = \"amqp://h/\"\npassword = { env = \"QHOST_TEST_UNSET_PW\" }",
                "QHOST_TEST_UNSET_PW",
            ),
        ];
        for (source, says) in cases {
            let e = parse(source).unwrap_err().to_string();
            assert!(e.contains(says), "{source}: {e}");
        }
        let e = Config::parse("[source]\nkind = \"sqs\"\nprefetch = 4").unwrap_err();
        assert!(
            e.to_string().contains("only for kind = \"rabbitmq\""),
            "{e}"
        );
    }
}
