//! Which queues exist on the embedded queue (`[source] queues`).
//!
//! On SQS a queue exists once someone creates it, and a send to any other name is refused. The
//! embedded queue had no such step, so a typo in an outbox's queue (`sent-emials`) filled a
//! queue no one reads and the run reported success. Now the configuration is the creation
//! step: the queues it consumes, their dead-letter queues and its schedules' targets exist, and
//! `[source] queues` names the rest (a queue only a person or another system reads, such as
//! the example's `sent-emails`). `queues = ["*"]` asks for the old way: every name exists.

use std::collections::BTreeSet;

use anyhow::bail;

use super::{Config, SourceKind};
use crate::message::wire::valid_queue_name;

/// The queue the built-in example's outbox sends to, which its defaults declare.
const EXAMPLE_OUTBOX: &str = "sent-emails";

/// Checks `[source] queues`: `Some(names)`, or `None` for `["*"]` (any name exists).
/// Unset, it is empty, or the example's outbox queue when the file configures no queue (the
/// built-in defaults run the email-reminder example).
pub(crate) fn source_queues(
    raw: Option<Vec<String>>,
    defaults: bool,
) -> anyhow::Result<Option<Vec<String>>> {
    let Some(names) = raw else {
        let example = defaults.then(|| EXAMPLE_OUTBOX.to_string());
        return Ok(Some(example.into_iter().collect()));
    };
    if names.iter().any(|n| n == "*") {
        if names.len() > 1 {
            bail!("source.queues: \"*\" (every name exists) stands alone, without other names");
        }
        return Ok(None);
    }
    if let Some(bad) = names.iter().find(|n| !valid_queue_name(n)) {
        bail!(
            "source.queues: `{bad}` is not a queue name (1 to 80 letters, digits, `-` and `_`, \
             with `.fifo` at the end of a FIFO queue)"
        );
    }
    Ok(Some(names))
}

impl Config {
    /// The queues that exist on the embedded queue: each consumed queue, its dead-letter
    /// queue, each schedule's target and `[source] queues` (`None`: every name, or the source
    /// is not the embedded queue).
    pub fn local_queues(&self) -> Option<BTreeSet<String>> {
        if self.source != SourceKind::Local {
            return None;
        }
        let named = self.source_queues.as_ref()?;
        let consumed = (self.queues.iter()).flat_map(|q| [&q.name, &q.dead_letter]);
        let scheduled = self.schedules.iter().map(|s| s.target.queue());
        Some(
            (consumed.map(String::as_str).chain(scheduled))
                .chain(named.iter().map(String::as_str))
                .map(str::to_string)
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumed_dead_letter_scheduled_and_named_queues_exist_and_no_other() {
        let config = Config::parse(
            "[source]\nqueues = [\"audit\"]\n[[queue]]\nname = \"jobs\"\nplugin = \"p\"\n\
             [[schedule]]\nname = \"nightly\"\ncron = \"0 3 * * *\"\nqueue = \"reports\"\nbody = \"go\"\n",
        )
        .unwrap();
        let exist: Vec<String> = config.local_queues().unwrap().into_iter().collect();
        assert_eq!(exist, ["audit", "jobs", "jobs-dlq", "reports"]);
    }

    #[test]
    fn the_built_in_defaults_declare_the_examples_outbox_and_a_star_declares_every_name() {
        let defaults = Config::parse("").unwrap().local_queues().unwrap();
        assert!(defaults.contains("sent-emails") && defaults.contains("reminders"));
        let own = Config::parse("[[queue]]\nname = \"q\"\nplugin = \"p\"\n").unwrap();
        assert!(!own.local_queues().unwrap().contains("sent-emails"));
        let any = Config::parse("[source]\nqueues = [\"*\"]\n").unwrap();
        assert_eq!(any.local_queues(), None);
    }

    #[test]
    fn a_star_among_names_or_a_bad_name_is_refused() {
        let err = |text: &str| Config::parse(text).unwrap_err().to_string();
        assert!(err("[source]\nqueues = [\"*\", \"a\"]\n").contains("stands alone"));
        assert!(err("[source]\nqueues = [\"a/b\"]\n").contains("`a/b` is not a queue name"));
    }
}
