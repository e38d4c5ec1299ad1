//! `[source] kind = "nats"`: streams on NATS JetStream, each consumed by a durable pull
//! consumer.
//!
//! ```toml
//! [source]
//! kind = "nats"
//! url = "nats://nats.internal:4222"   # several, comma-separated; tls://… for TLS
//! token = { env = "NATS_TOKEN" }       # or nkey = { file = "…" } (a seed), or
//!                                      # credentials-file = "…", or user:password in the URL
//! declare = true       # create each consumed queue's stream and consumer, and its
//!                      # dead-letter stream (default)
//! consumer = "qhost"   # the durable pull consumer's name on each stream
//! max-deliver = 10     # max_deliver of a consumer qhost creates (default: no bound; the
//!                      # plugin's max-attempts decides)
//! ca-file = "ca.pem"   # a private CA for tls:// servers
//! ```

use std::path::PathBuf;

use anyhow::bail;

use super::file::RawSource;
use super::secret;
use crate::source::nats::NatsAuth;

/// Where the NATS servers are, and how the source uses them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsSourceSettings {
    /// The servers' URLs.
    pub servers: Vec<String>,
    /// How the source authenticates.
    pub auth: NatsAuth,
    /// A private CA for TLS.
    pub ca_file: Option<PathBuf>,
    /// Whether the host creates streams and consumers when absent.
    pub declare: bool,
    /// The durable consumer's name.
    pub consumer: String,
    /// `max_deliver` of a consumer qhost creates.
    pub max_deliver: Option<i64>,
}

/// The fields only `kind = "nats"` takes.
pub(super) fn only_nats(raw: &RawSource) -> [(&'static str, bool); 5] {
    [
        ("token", raw.token.is_some()),
        ("nkey", raw.nkey.is_some()),
        ("credentials-file", raw.credentials_file.is_some()),
        ("consumer", raw.consumer.is_some()),
        ("max-deliver", raw.max_deliver.is_some()),
    ]
}

/// The settings `raw` gives.
pub(super) fn settings(raw: RawSource) -> anyhow::Result<NatsSourceSettings> {
    if raw.region.is_some() || raw.endpoint_url.is_some() {
        bail!("source.region and source.endpoint-url are only for kind = \"sqs\"");
    }
    let auth = auth(&raw)?;
    let Some(url) = raw.url else {
        bail!("source.url is required for kind = \"nats\" (nats://HOST:4222)");
    };
    let servers: Vec<String> = url.split(',').map(|s| s.trim().to_string()).collect();
    for s in &servers {
        let scheme_ok = ["nats://", "tls://"].iter().any(|p| s.starts_with(p));
        if !scheme_ok {
            bail!("source.url `{s}` must start with nats:// or tls://");
        }
    }
    let consumer = raw.consumer.unwrap_or_else(|| "qhost".into());
    let bad = |c: char| matches!(c, '.' | '*' | '>') || c.is_whitespace();
    if consumer.is_empty() || consumer.contains(bad) {
        bail!("source.consumer `{consumer}` is not a consumer name: no . * > or white space");
    }
    if let Some(n) = raw.max_deliver
        && n < 1
    {
        bail!("source.max-deliver is {n}; it must be 1 or more (leave it out for no bound)");
    }
    Ok(NatsSourceSettings {
        servers,
        auth,
        ca_file: raw.ca_file,
        declare: raw.declare.unwrap_or(true),
        consumer,
        max_deliver: raw.max_deliver,
    })
}

/// How `raw` says to authenticate: one way at most.
fn auth(raw: &RawSource) -> anyhow::Result<NatsAuth> {
    let ways = [
        raw.token.is_some(),
        raw.nkey.is_some(),
        raw.credentials_file.is_some(),
        raw.password.is_some(),
    ];
    if ways.iter().filter(|w| **w).count() > 1 {
        bail!("source: give one of token, nkey, credentials-file or password, not several");
    }
    Ok(if let Some(token) = &raw.token {
        NatsAuth::Token(secret::read("source.token", token)?)
    } else if let Some(seed) = &raw.nkey {
        NatsAuth::Nkey(secret::read("source.nkey", seed)?)
    } else if let Some(file) = &raw.credentials_file {
        let text = std::fs::read_to_string(file).map_err(|e| {
            anyhow::anyhow!(
                "source.credentials-file: cannot read `{}`: {e}",
                file.display()
            )
        })?;
        NatsAuth::Credentials(text)
    } else if let Some(password) = &raw.password {
        let user = (raw.url.as_deref())
            .and_then(|u| u.split_once("://"))
            .and_then(|(_, rest)| rest.split_once('@'))
            .map(|(user, _)| user.split(':').next().unwrap_or_default().to_string());
        let Some(user) = user.filter(|u| !u.is_empty()) else {
            bail!("source.password needs a user in the URL (nats://USER@HOST:4222)");
        };
        NatsAuth::UserPassword(user, secret::read("source.password", password)?)
    } else {
        NatsAuth::None
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, SourceKind};

    fn parse(source: &str) -> anyhow::Result<Config> {
        Config::parse(&format!("[source]\nkind = \"nats\"\n{source}"))
    }

    #[test]
    fn defaults_declare_streams_for_a_consumer_named_qhost() {
        let c = parse("url = \"nats://127.0.0.1:4222\"").unwrap();
        let SourceKind::Nats(s) = &c.source else {
            panic!("{:?}", c.source)
        };
        assert!(s.declare);
        assert_eq!((s.consumer.as_str(), s.max_deliver), ("qhost", None));
        assert_eq!(s.servers, ["nats://127.0.0.1:4222"]);
    }

    #[test]
    fn mistakes_say_what_to_write() {
        let cases = [
            ("", "source.url is required"),
            ("url = \"amqp://h/\"", "must start with nats:// or tls://"),
            ("url = \"nats://h:4222\"\nmax-deliver = 0", "1 or more"),
            (
                "url = \"nats://h:4222\"\nconsumer = \"a.b\"",
                "not a consumer name",
            ),
            (
                "url = \"nats://h:4222\"\ntoken = \"t\"\nnkey = \"SU\"",
                "not several",
            ),
            ("url = \"nats://h:4222\"\npassword = \"p\"", "needs a user"),
            (
                "url = \"nats://h:4222\"\nprefetch = 4",
                "only for kind = \"rabbitmq\"",
            ),
            (
                "url = \"nats://h:4222\"\npoll-ms = 100",
                "only for kind = \"pgmq\"",
            ),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", parse(text).unwrap_err());
            assert!(err.contains(expected), "{text}: {err}");
        }
        let err =
            Config::parse("[source]\nkind = \"pgmq\"\nurl = \"postgres://h/d\"\nconsumer = \"c\"")
                .unwrap_err();
        assert!(
            err.to_string().contains("only for kind = \"nats\""),
            "{err}"
        );
        let err = Config::parse("[source]\nkind = \"sqs\"\nca-file = \"ca.pem\"").unwrap_err();
        assert!(err.to_string().contains("ca-file"), "{err}");
    }
}
