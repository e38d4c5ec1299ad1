//! The manifest's `[flow]`: where a message's flow key comes from, and its limits.
//!
//! ```toml
//! [flow]
//! key = "attribute:tenant"      # attribute:NAME | json:/POINTER | group
//! max-concurrency = 3           # runs of one key at once across the fleet
//! rate = "20/s"                 # runs of one key per s or min across the fleet
//! fair = true                   # fair shares of a host's slots among keys (the default)
//! weights = { enterprise = 5 }  # a key's share against the default weight of 1
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use crate::digest::sha256_hex;
use crate::idempotency::key::{KeyInput, KeySource};
use crate::idempotency::rate::Rate;
use crate::message::Attribute;

/// The most runs of one key at once that `max-concurrency` may allow.
const MAX_CONCURRENCY: u32 = 10_000;
/// The largest weight a key may be given.
const MAX_WEIGHT: u32 = 1_000;
/// Flow keys longer than this are stored as their sha256, so a message cannot make the store
/// keep a key of any size.
const MAX_KEY_BYTES: usize = 128;

/// Where a message's flow key comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FlowKeySource {
    /// Where an idempotency key may come from, as a producer names it: a string or number
    /// attribute, or a JSON pointer into the body the handler sees (so a formatted queue's
    /// view, such as a Celery task's kwargs, is what it points into).
    Named(KeySource),
    /// The message group: a FIFO queue's, or the `MessageGroupId` of a standard queue's
    /// fair-queue message.
    Group,
}

impl FromStr for FlowKeySource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.parse::<KeySource>() {
            _ if s == "group" => Ok(FlowKeySource::Group),
            Ok(source) if source.may_name_other_bodies() => Ok(FlowKeySource::Named(source)),
            _ => Err(format!(
                "`{s}` is not a flow key source; expected `attribute:NAME`, `json:/POINTER` or `group`"
            )),
        }
    }
}

impl fmt::Display for FlowKeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowKeySource::Named(source) => source.fmt(f),
            FlowKeySource::Group => f.write_str("group"),
        }
    }
}

impl<'de> Deserialize<'de> for FlowKeySource {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// What a flow key is read from: the body and attributes the handler sees, and the group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlowInput<'a> {
    /// The body.
    pub body: &'a [u8],
    /// The attributes.
    pub attributes: &'a [Attribute],
    /// The message group, if any.
    pub group: Option<&'a str>,
}

impl FlowKeySource {
    /// Whether the key is read from the body (a payload it points to is fetched first).
    pub(crate) fn reads_body(&self) -> bool {
        matches!(self, FlowKeySource::Named(KeySource::JsonPointer(_)))
    }

    /// The flow key of a message, or `None` when it holds none (the default flow).
    pub(crate) fn derive(&self, input: FlowInput<'_>) -> Option<String> {
        let key = match self {
            FlowKeySource::Named(source) => source
                .derive(KeyInput {
                    id: "",
                    body: input.body,
                    attributes: input.attributes,
                    sha256: None,
                })
                .ok()?,
            FlowKeySource::Group => input.group.filter(|g| !g.is_empty())?.to_string(),
        };
        Some(if key.len() > MAX_KEY_BYTES {
            format!("sha256:{}", sha256_hex(key.as_bytes()))
        } else {
            key
        })
    }
}

/// A plugin's flow control; the default has no key and no limits (nothing is gated).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct FlowPolicy {
    /// Where the flow key comes from; `None`: every message is in the default flow.
    #[serde(default)]
    pub key: Option<FlowKeySource>,
    /// Runs of one key at once across the fleet.
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// Runs of one key per period across the fleet.
    #[serde(default)]
    pub rate: Option<Rate>,
    /// Whether a host gives keys fair shares of its in-flight slots (with a key only).
    #[serde(default = "yes")]
    pub fair: bool,
    /// Keys' weights in the fair shares; a key not named weighs 1.
    #[serde(default)]
    pub weights: BTreeMap<String, u32>,
}

fn yes() -> bool {
    true
}

impl Default for FlowPolicy {
    fn default() -> Self {
        FlowPolicy {
            key: None,
            max_concurrency: None,
            rate: None,
            fair: true,
            weights: BTreeMap::new(),
        }
    }
}

impl FlowPolicy {
    /// Whether anything gates this plugin's runs by flow.
    pub(crate) fn is_gated(&self) -> bool {
        self.key.is_some() || self.max_concurrency.is_some() || self.rate.is_some()
    }

    /// Whether a host shares its slots fairly among this plugin's keys.
    pub(crate) fn is_fair(&self) -> bool {
        self.fair && self.key.is_some()
    }

    /// `key`'s weight in the fair shares.
    pub(crate) fn weight(&self, key: &str) -> u32 {
        self.weights.get(key).copied().unwrap_or(1)
    }

    /// Checks the limits' ranges; the error names the field.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if let Some(n) = self.max_concurrency {
            anyhow::ensure!(
                (1..=MAX_CONCURRENCY).contains(&n),
                "flow.max-concurrency must be between 1 and {MAX_CONCURRENCY}"
            );
        }
        for (key, weight) in &self.weights {
            anyhow::ensure!(
                (1..=MAX_WEIGHT).contains(weight),
                "flow.weights.{key} must be between 1 and {MAX_WEIGHT}"
            );
        }
        anyhow::ensure!(
            self.weights.is_empty() || self.key.is_some(),
            "flow.weights needs flow.key: weights are per flow key"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(
        body: &'a str,
        attributes: &'a [Attribute],
        group: Option<&'a str>,
    ) -> FlowInput<'a> {
        FlowInput {
            body: body.as_bytes(),
            attributes,
            group,
        }
    }

    #[test]
    fn sources_parse_print_and_refuse_what_they_are_not() {
        for text in ["attribute:tenant", "json:/customer/id", "group"] {
            let source: FlowKeySource = text.parse().unwrap();
            assert_eq!(source.to_string(), text);
        }
        for bad in ["", "message-id", "attribute:", "json:x", "body-sha256"] {
            let e = bad.parse::<FlowKeySource>().unwrap_err();
            assert!(e.contains("is not a flow key source"), "{e}");
        }
    }

    #[test]
    fn keys_come_from_each_source_and_a_missing_one_is_the_default_flow() {
        let attrs = [Attribute::string("tenant", "acme")];
        let body = r#"{"customer":{"id":42}}"#;
        let tenant: FlowKeySource = "attribute:tenant".parse().unwrap();
        let customer: FlowKeySource = "json:/customer/id".parse().unwrap();
        assert_eq!(
            tenant.derive(input(body, &attrs, None)).as_deref(),
            Some("acme")
        );
        assert_eq!(
            customer.derive(input(body, &attrs, None)).as_deref(),
            Some("42")
        );
        let group = FlowKeySource::Group;
        assert_eq!(
            group.derive(input(body, &[], Some("g1"))).as_deref(),
            Some("g1")
        );
        assert_eq!(tenant.derive(input(body, &[], None)), None);
        assert_eq!(customer.derive(input("not json", &[], None)), None);
        assert_eq!(group.derive(input(body, &[], None)), None);
    }

    #[test]
    fn a_long_key_is_stored_as_its_digest() {
        let long = "t".repeat(MAX_KEY_BYTES + 1);
        let attrs = [Attribute::string("tenant", &long)];
        let key = ("attribute:tenant".parse::<FlowKeySource>().unwrap())
            .derive(input("", &attrs, None))
            .unwrap();
        assert_eq!(key, format!("sha256:{}", sha256_hex(long.as_bytes())));
    }

    #[test]
    fn limits_are_checked_by_name() {
        let policy: FlowPolicy = toml::from_str("max-concurrency = 0").unwrap();
        let e = policy.check().unwrap_err().to_string();
        assert!(e.contains("flow.max-concurrency"), "{e}");
        let policy: FlowPolicy = toml::from_str("weights = { a = 2 }").unwrap();
        let e = policy.check().unwrap_err().to_string();
        assert!(e.contains("needs flow.key"), "{e}");
        let policy: FlowPolicy = toml::from_str("key = \"group\"\nweights = { a = 0 }").unwrap();
        assert!(
            policy
                .check()
                .unwrap_err()
                .to_string()
                .contains("flow.weights.a")
        );
        let policy: FlowPolicy =
            toml::from_str("key = \"attribute:tenant\"\nmax-concurrency = 3\nrate = \"20/s\"")
                .unwrap();
        policy.check().unwrap();
        assert!(policy.is_gated() && policy.is_fair());
        assert!(toml::from_str::<FlowPolicy>("key = \"message-id\"").is_err());
    }
}
