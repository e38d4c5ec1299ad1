//! `[rollout]`: how a new version of a plugin takes traffic when its file changes under a
//! running host.
//!
//! ```toml
//! [rollout]                          # the default for every plugin
//! mode = "canary"                    # "immediate" (the default): the new version takes all at once
//! percent = 10                       # share of keys the canary gets (1 to 99)
//! promote-after-messages = 500       # promoted once it handled this many without tripping...
//! promote-after-secs = 600           # ...and/or this long passed (at least one of the two)
//! rollback-margin-percent = 5        # rolled back when its failure share exceeds the serving
//! rollback-min-messages = 20         #   version's by more than this, over at least this many
//! rollback-on = ["memory-limit"]     # failure kinds that roll back at the first one
//!
//! [rollout.plugin.email-reminder]    # one plugin's own, over the default
//! percent = 25
//! ```
//!
//! `immediate` stays the default: on a laptop and in the demo, the file a developer drops is the
//! one they want to see run. A fleet turns canaries on with one line.
//!
//! Checked in two stages like the rest of the file: serde refuses unknown fields and wrong
//! types; [`RolloutConfig::check`] refuses values that make no policy, naming the field.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// `[rollout]` (or `[rollout.plugin.NAME]`) as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawPolicy {
    pub mode: Option<String>,
    pub percent: Option<u32>,
    pub promote_after_messages: Option<u64>,
    pub promote_after_secs: Option<u64>,
    pub rollback_margin_percent: Option<f64>,
    pub rollback_min_messages: Option<u64>,
    pub rollback_on: Option<Vec<String>>,
}

/// `[rollout]` as written: the default policy's fields and per-plugin ones (serde's `flatten`
/// would lose `deny_unknown_fields`, so the default's fields are spelled out again).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawRollout {
    pub mode: Option<String>,
    pub percent: Option<u32>,
    pub promote_after_messages: Option<u64>,
    pub promote_after_secs: Option<u64>,
    pub rollback_margin_percent: Option<f64>,
    pub rollback_min_messages: Option<u64>,
    pub rollback_on: Option<Vec<String>>,
    #[serde(default)]
    pub plugin: BTreeMap<String, RawPolicy>,
}

impl RawRollout {
    fn default_policy(&self) -> RawPolicy {
        RawPolicy {
            mode: self.mode.clone(),
            percent: self.percent,
            promote_after_messages: self.promote_after_messages,
            promote_after_secs: self.promote_after_secs,
            rollback_margin_percent: self.rollback_margin_percent,
            rollback_min_messages: self.rollback_min_messages,
            rollback_on: self.rollback_on.clone(),
        }
    }
}

/// How a canary run failed, as rollout counts and its rules name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureKind {
    /// The guest trapped.
    Trap,
    /// It ran past its deadline.
    Timeout,
    /// It hit its memory limit.
    MemoryLimit,
    /// It rejected the message.
    Reject,
    /// It asked for a retry.
    Retry,
}

impl FailureKind {
    /// Every kind, in the order records and metrics list them.
    pub const ALL: [FailureKind; 5] = [
        FailureKind::Trap,
        FailureKind::Timeout,
        FailureKind::MemoryLimit,
        FailureKind::Reject,
        FailureKind::Retry,
    ];

    /// The name the configuration, records and metrics use.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Trap => "trap",
            FailureKind::Timeout => "timeout",
            FailureKind::MemoryLimit => "memory-limit",
            FailureKind::Reject => "reject",
            FailureKind::Retry => "retry",
        }
    }

    fn named(name: &str) -> Option<Self> {
        FailureKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One plugin's checked policy.
#[derive(Clone, Debug, PartialEq)]
pub enum RolloutPolicy {
    /// A new version takes all traffic as soon as it loads.
    Immediate,
    /// A new version takes a share of keys until a rule decides.
    Canary(Canary),
}

/// A canary's share and rules.
#[derive(Clone, Debug, PartialEq)]
pub struct Canary {
    /// Percent of keys (by a stable hash of the key) that run on the canary.
    pub percent: u8,
    /// Promoted once it handled this many messages without tripping a rollback rule.
    pub promote_after_messages: Option<u64>,
    /// Promoted once this long passed since it started without tripping one.
    pub promote_after: Option<Duration>,
    /// Rolled back when its failure share exceeds the serving version's by more than this
    /// (a fraction, 0.05 for 5 percentage points)...
    pub rollback_margin: f64,
    /// ...over at least this many of its messages.
    pub rollback_min_messages: u64,
    /// Failure kinds that roll it back at the first one.
    pub rollback_on: Vec<FailureKind>,
}

impl Eq for Canary {}

/// Every plugin's policy.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RolloutConfig {
    default: Option<Canary>,
    plugins: BTreeMap<String, RolloutPolicy>,
}

impl Eq for RolloutPolicy {}

impl RolloutConfig {
    /// The policy for `plugin`.
    pub fn policy(&self, plugin: &str) -> RolloutPolicy {
        match self.plugins.get(plugin) {
            Some(policy) => policy.clone(),
            None => match &self.default {
                Some(canary) => RolloutPolicy::Canary(canary.clone()),
                None => RolloutPolicy::Immediate,
            },
        }
    }

    /// Checks `raw`, naming the first field that makes no policy.
    pub(crate) fn check(raw: &RawRollout) -> anyhow::Result<Self> {
        let base = raw.default_policy();
        let default = policy("rollout", &base, &RawPolicy::default())?;
        let mut plugins = BTreeMap::new();
        for (name, own) in &raw.plugin {
            if !crate::message::wire::valid_plugin_name(name) {
                anyhow::bail!("rollout.plugin.{name}: `{name}` is not a plugin name");
            }
            let at = format!("rollout.plugin.{name}");
            plugins.insert(name.clone(), policy(&at, own, &base)?);
        }
        let default = match default {
            RolloutPolicy::Immediate => None,
            RolloutPolicy::Canary(c) => Some(c),
        };
        Ok(RolloutConfig { default, plugins })
    }
}

/// `own` over `base`, checked; `at` names it in errors.
fn policy(at: &str, own: &RawPolicy, base: &RawPolicy) -> anyhow::Result<RolloutPolicy> {
    let mode = own.mode.as_deref().or(base.mode.as_deref());
    match mode.unwrap_or("immediate") {
        "immediate" => return Ok(RolloutPolicy::Immediate),
        "canary" => {}
        other => anyhow::bail!("{at}.mode is `{other}`: write \"immediate\" or \"canary\""),
    }
    let percent = own.percent.or(base.percent).unwrap_or(10);
    if !(1..=99).contains(&percent) {
        anyhow::bail!("{at}.percent is {percent}: a canary takes between 1 and 99 percent of keys");
    }
    let messages = own.promote_after_messages.or(base.promote_after_messages);
    let secs = own.promote_after_secs.or(base.promote_after_secs);
    if messages.is_none() && secs.is_none() {
        anyhow::bail!(
            "{at}: a canary needs a promotion rule: promote-after-messages and/or promote-after-secs"
        );
    }
    if messages == Some(0) || secs == Some(0) {
        anyhow::bail!("{at}.promote-after-messages and promote-after-secs must be above 0");
    }
    let margin = (own.rollback_margin_percent)
        .or(base.rollback_margin_percent)
        .unwrap_or(5.0);
    if !(0.0..=100.0).contains(&margin) {
        anyhow::bail!("{at}.rollback-margin-percent is {margin}: between 0 and 100");
    }
    let min = (own.rollback_min_messages)
        .or(base.rollback_min_messages)
        .unwrap_or(20);
    if min == 0 {
        anyhow::bail!("{at}.rollback-min-messages must be at least 1");
    }
    let mut at_once = Vec::new();
    for name in own
        .rollback_on
        .as_ref()
        .or(base.rollback_on.as_ref())
        .into_iter()
        .flatten()
    {
        let kind = FailureKind::named(name).ok_or_else(|| {
            let known: Vec<_> = FailureKind::ALL.iter().map(|k| k.name()).collect();
            anyhow::anyhow!(
                "{at}.rollback-on: `{name}` is not a failure kind ({})",
                known.join(", ")
            )
        })?;
        at_once.push(kind);
    }
    Ok(RolloutPolicy::Canary(Canary {
        percent: percent as u8,
        promote_after_messages: messages,
        promote_after: secs.map(Duration::from_secs),
        rollback_margin: margin / 100.0,
        rollback_min_messages: min,
        rollback_on: at_once,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> anyhow::Result<RolloutConfig> {
        let raw: RawRollout = toml::from_str(text)?;
        RolloutConfig::check(&raw)
    }

    #[test]
    fn immediate_is_the_default_and_a_plugin_overrides_the_default_policy() {
        let none = parsed("").unwrap();
        assert_eq!(none.policy("any"), RolloutPolicy::Immediate);
        let c = parsed(
            "mode = \"canary\"\npercent = 20\npromote-after-messages = 100\nrollback-on = [\"trap\"]\n\
             [plugin.mail]\npercent = 50\n[plugin.audit]\nmode = \"immediate\"\n",
        )
        .unwrap();
        let RolloutPolicy::Canary(default) = c.policy("other") else {
            panic!("the default is a canary");
        };
        assert_eq!(default.percent, 20);
        assert_eq!(default.rollback_on, vec![FailureKind::Trap]);
        assert_eq!(
            (default.rollback_margin, default.rollback_min_messages),
            (0.05, 20)
        );
        let RolloutPolicy::Canary(mail) = c.policy("mail") else {
            panic!("mail inherits the mode");
        };
        assert_eq!((mail.percent, mail.promote_after_messages), (50, Some(100)));
        assert_eq!(c.policy("audit"), RolloutPolicy::Immediate);
    }

    #[test]
    fn nonsense_is_refused_naming_the_field() {
        let cases = [
            ("mode = \"slow\"", "rollout.mode is `slow`"),
            (
                "mode = \"canary\"\npercent = 0\npromote-after-secs = 5",
                "rollout.percent is 0",
            ),
            (
                "mode = \"canary\"\npercent = 100\npromote-after-secs = 5",
                "rollout.percent is 100",
            ),
            ("mode = \"canary\"", "a canary needs a promotion rule"),
            (
                "mode = \"canary\"\npromote-after-secs = 5\nrollback-on = [\"boom\"]",
                "rollout.rollback-on: `boom` is not a failure kind",
            ),
            (
                "mode = \"canary\"\npromote-after-secs = 5\nrollback-margin-percent = 150.0",
                "rollout.rollback-margin-percent is 150",
            ),
            (
                "[plugin.mail]\nmode = \"canary\"\npercent = 120\npromote-after-secs = 1",
                "rollout.plugin.mail.percent is 120",
            ),
            (
                "[plugin.\"../x\"]\nmode = \"canary\"",
                "rollout.plugin.../x: `../x` is not a plugin name",
            ),
        ];
        for (text, expected) in cases {
            let e = parsed(text).unwrap_err().to_string();
            assert!(
                e.contains(expected),
                "`{text}`: expected `{expected}` in {e}"
            );
        }
        let typo = parsed("percnt = 5").unwrap_err().to_string();
        assert!(typo.contains("unknown field `percnt`"), "{typo}");
    }
}
