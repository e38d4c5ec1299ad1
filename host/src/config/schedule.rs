//! `[[schedule]]`: cron in qhost. Each entry names when it ticks (a cron expression in a time
//! zone) and what a tick sends (a message to a queue, or a Celery task), and how the fleet treats
//! ticks no host was up for (`catch-up-secs`, `catch-up-policy`) and a tick whose previous one is
//! still being handled (`overlap`). Everything is checked here, the calendar included (an
//! expression that never fires, an unknown zone); what a tick's target queue makes of it is
//! checked against the queues and plugins by `qhost check`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Deserialize;

use crate::message::rules::Envelope;
use crate::message::{Attribute, wire};
use crate::schedule::calendar::Calendar;

/// One `[[schedule]]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawSchedule {
    pub name: Option<String>,
    pub cron: Option<String>,
    pub timezone: Option<String>,
    pub queue: Option<String>,
    pub body: Option<toml::Value>,
    pub attributes: Option<BTreeMap<String, String>>,
    pub group: Option<String>,
    pub celery_task: Option<String>,
    pub args: Option<toml::Value>,
    pub kwargs: Option<toml::Value>,
    pub catch_up_secs: Option<u64>,
    pub catch_up_policy: Option<String>,
    pub overlap: Option<String>,
    pub max_clock_skew_secs: Option<u64>,
    pub keep_ticks_secs: Option<u64>,
}

/// A checked `[[schedule]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleConfig {
    /// Its name: in its ticks' keys (`schedule:NAME:TICK`) and on every message it sends.
    pub name: String,
    /// When it ticks: the cron expression (five fields, or six with seconds first) in its IANA
    /// time zone.
    pub calendar: Calendar,
    /// What a tick sends.
    pub target: ScheduleTarget,
    /// How far back a host that comes up fires ticks no host was up for.
    pub catch_up: Duration,
    /// Which of those it fires.
    pub catch_up_policy: CatchUpPolicy,
    /// What a tick does while the previous tick's message is still being handled.
    pub overlap: Overlap,
    /// How far a host's clock may be from the store's before it stops firing.
    pub max_clock_skew: Duration,
    /// How long a fired tick is remembered: what `backfill` can tell apart, at most this far
    /// back.
    pub keep_ticks: Duration,
}

/// What a tick sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleTarget {
    /// A message to a queue.
    Queue {
        /// The queue's name.
        queue: String,
        /// The body: text as written, or a table as JSON.
        body: Vec<u8>,
        /// Attributes, as string attributes.
        attributes: Vec<Attribute>,
        /// The message group on a FIFO queue (default: the schedule's name).
        group: Option<String>,
    },
    /// A Celery task, sent as a Celery producer would.
    Celery {
        /// The task's registered name.
        task: String,
        /// Positional arguments (a JSON list).
        args: serde_json::Value,
        /// Keyword arguments (a JSON object).
        kwargs: serde_json::Value,
        /// The queue the task goes to (`celery` unless named).
        queue: String,
        /// How the task is laid out: as the source's Celery producers lay it out.
        envelope: Envelope,
    },
}

impl ScheduleTarget {
    /// Lays a Celery task out as `on` says (the host's source's way).
    pub(crate) fn lay_out(&mut self, on: Envelope) {
        if let ScheduleTarget::Celery { envelope, .. } = self {
            *envelope = on;
        }
    }

    /// The queue a tick's message goes to.
    pub fn queue(&self) -> &str {
        match self {
            ScheduleTarget::Queue { queue, .. } | ScheduleTarget::Celery { queue, .. } => queue,
        }
    }
}

/// Which missed ticks inside the catch-up window a host fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatchUpPolicy {
    /// Each, oldest first.
    All,
    /// Only the newest; the others count as missed.
    Latest,
}

/// What a due tick does while the previous tick's message is still being handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlap {
    /// Fire anyway.
    Allow,
    /// Do not fire it; count it as skipped.
    Skip,
    /// Hold it until the previous one is done, then fire it; a newer tick due meanwhile replaces
    /// it and the held one counts as skipped.
    BufferOne,
}

impl Overlap {
    /// As written in the file.
    pub fn name(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer-one",
        }
    }
}

/// The catch-up window unless set: an hour.
pub(crate) const DEFAULT_CATCH_UP: Duration = Duration::from_secs(3600);
/// The clock skew a host may have unless set.
pub(crate) const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(30);
/// How long fired ticks are remembered unless set: a week.
pub(crate) const DEFAULT_KEEP_TICKS: Duration = Duration::from_secs(7 * 24 * 3600);
/// Where a Celery task goes unless a queue is named: Celery's default queue.
const CELERY_DEFAULT_QUEUE: &str = "celery";

/// Checks every `[[schedule]]`: names unique, fields in range.
pub(crate) fn schedules(raw: Option<Vec<RawSchedule>>) -> anyhow::Result<Vec<ScheduleConfig>> {
    let checked = raw
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, s)| schedule(i, s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (i, s) in checked.iter().enumerate() {
        if checked[..i].iter().any(|o| o.name == s.name) {
            bail!("schedule[{i}].name `{}` is used twice", s.name);
        }
    }
    Ok(checked)
}

fn schedule(index: usize, s: RawSchedule) -> anyhow::Result<ScheduleConfig> {
    let name = s.name.clone().unwrap_or_default();
    if name.is_empty()
        || name.len() > 80
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        bail!(
            "schedule[{index}].name `{name}` must be 1 to 80 letters, digits, `-`, `_` or `.`: it is part of every tick's key"
        );
    }
    // Named by its name from here on: what the user wrote and will look for.
    let field = |f: &str| format!("schedule `{name}`: {f}");
    let Some(cron) = s.cron.clone() else {
        bail!(
            "{} is missing: five fields (`0 9 1 * *`: 09:00 on the 1st), or six with seconds first",
            field("cron")
        );
    };
    let catch_up = Duration::from_secs(s.catch_up_secs.unwrap_or(DEFAULT_CATCH_UP.as_secs()));
    let keep_ticks = Duration::from_secs(s.keep_ticks_secs.unwrap_or(DEFAULT_KEEP_TICKS.as_secs()));
    if keep_ticks < catch_up || keep_ticks.as_secs() > 366 * 24 * 3600 {
        bail!(
            "{} is {} s; it must be at least catch-up-secs ({} s) and at most a year",
            field("keep-ticks-secs"),
            keep_ticks.as_secs(),
            catch_up.as_secs()
        );
    }
    let max_clock_skew = Duration::from_secs(
        s.max_clock_skew_secs
            .unwrap_or(DEFAULT_MAX_CLOCK_SKEW.as_secs()),
    );
    if max_clock_skew.is_zero() || max_clock_skew.as_secs() > 3600 {
        bail!(
            "{} must be between 1 and 3600",
            field("max-clock-skew-secs")
        );
    }
    let zone = s.timezone.clone().unwrap_or_else(|| "UTC".into());
    let calendar = Calendar::parse(&cron, &zone).map_err(|e| {
        let which = if e.contains("time zone") {
            "timezone"
        } else {
            "cron"
        };
        anyhow::anyhow!("{}: {e}", field(which))
    })?;
    Ok(ScheduleConfig {
        calendar,
        catch_up,
        catch_up_policy: catch_up_policy(s.catch_up_policy.as_deref(), &field)?,
        overlap: overlap(s.overlap.as_deref(), &field)?,
        max_clock_skew,
        keep_ticks,
        target: target(s, &field)?,
        name,
    })
}

fn catch_up_policy(
    text: Option<&str>,
    field: &dyn Fn(&str) -> String,
) -> anyhow::Result<CatchUpPolicy> {
    Ok(match text.unwrap_or("all") {
        "all" => CatchUpPolicy::All,
        "latest" => CatchUpPolicy::Latest,
        other => bail!(
            "{} `{other}` is not one: \"all\" or \"latest\"",
            field("catch-up-policy")
        ),
    })
}

fn overlap(text: Option<&str>, field: &dyn Fn(&str) -> String) -> anyhow::Result<Overlap> {
    Ok(match text.unwrap_or("skip") {
        "allow" => Overlap::Allow,
        "skip" => Overlap::Skip,
        "buffer-one" => Overlap::BufferOne,
        other => bail!(
            "{} `{other}` is not one: \"allow\", \"skip\" or \"buffer-one\"",
            field("overlap")
        ),
    })
}

/// What a `[[schedule]]` says a tick sends, as written: a queue message's fields, or a Celery
/// task's arguments (each checked against the other's by the target it makes).
struct Sends {
    body: Option<toml::Value>,
    attributes: Option<BTreeMap<String, String>>,
    group: Option<String>,
    args: Option<toml::Value>,
    kwargs: Option<toml::Value>,
}

fn target(s: RawSchedule, field: &dyn Fn(&str) -> String) -> anyhow::Result<ScheduleTarget> {
    let sends = Sends {
        body: s.body,
        attributes: s.attributes,
        group: s.group,
        args: s.args,
        kwargs: s.kwargs,
    };
    match (s.celery_task, s.queue) {
        (Some(task), queue) => celery_target(task, queue, sends, field),
        (None, Some(queue)) => {
            if sends.args.is_some() || sends.kwargs.is_some() {
                bail!(
                    "{}: `args` and `kwargs` are a Celery task's; a queue message has `body` and `attributes`",
                    field("args")
                );
            }
            queue_target(queue, sends, field)
        }
        (None, None) => bail!(
            "{}: say what a tick sends: `queue = \"Q\"` (with `body`), or `celery-task = \"proj.tasks.name\"`",
            field("queue")
        ),
    }
}

fn queue_target(
    queue: String,
    sends: Sends,
    field: &dyn Fn(&str) -> String,
) -> anyhow::Result<ScheduleTarget> {
    check_queue_name(&queue, &field("queue"))?;
    let Sends {
        body,
        attributes,
        group,
        ..
    } = sends;
    let body = match body {
        None => Vec::new(),
        Some(toml::Value::String(text)) => text.into_bytes(),
        Some(table @ toml::Value::Table(_)) => {
            serde_json::to_vec(&table).with_context(|| field("body"))?
        }
        Some(other) => bail!(
            "{} is a {}: write text, or an inline table (sent as JSON)",
            field("body"),
            other.type_str()
        ),
    };
    let attributes: Vec<Attribute> = attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| {
            if name.starts_with(wire::RESERVED_PREFIX) {
                bail!(
                    "{} `{name}`: names starting with `{}` are qhost's own",
                    field("attributes"),
                    wire::RESERVED_PREFIX
                );
            }
            Ok(Attribute::string(name, value))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(ScheduleTarget::Queue {
        queue,
        body,
        attributes,
        group,
    })
}

fn celery_target(
    task: String,
    queue: Option<String>,
    sends: Sends,
    field: &dyn Fn(&str) -> String,
) -> anyhow::Result<ScheduleTarget> {
    let Sends {
        body,
        attributes,
        args,
        kwargs,
        ..
    } = sends;
    if task.is_empty() {
        bail!(
            "{} is empty: name the task as Celery registers it",
            field("celery-task")
        );
    }
    if body.is_some() || attributes.is_some() {
        bail!(
            "{}: a Celery task's arguments are `args` and `kwargs`, not `body` or `attributes`",
            field("celery-task")
        );
    }
    let json = |v: Option<toml::Value>| v.map(serde_json::to_value).transpose();
    let args = json(args)?.unwrap_or_else(|| serde_json::json!([]));
    let kwargs = json(kwargs)?.unwrap_or_else(|| serde_json::json!({}));
    if !args.is_array() {
        bail!("{} is a list: args = [1, \"two\"]", field("args"));
    }
    if !kwargs.is_object() {
        bail!(
            "{} is a table: kwargs = {{ user = \"all\" }}",
            field("kwargs")
        );
    }
    let queue = queue.unwrap_or_else(|| CELERY_DEFAULT_QUEUE.into());
    check_queue_name(&queue, &field("queue"))?;
    Ok(ScheduleTarget::Celery {
        task,
        args,
        kwargs,
        queue,
        envelope: Envelope::Kombu,
    })
}

/// SQS's rule for queue names: 1 to 80 letters, digits, `-` and `_`, and `.fifo` at the end of
/// a FIFO queue's.
fn check_queue_name(queue: &str, field: &str) -> anyhow::Result<()> {
    let stem = queue.strip_suffix(".fifo").unwrap_or(queue);
    if queue.is_empty()
        || queue.len() > 80
        || !stem
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!(
            "{field} `{queue}` is not a queue name: 1 to 80 letters, digits, `-` or `_` (and `.fifo` at the end of a FIFO queue's)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<Vec<ScheduleConfig>> {
        #[derive(Deserialize)]
        struct File {
            schedule: Vec<RawSchedule>,
        }
        let file: File = toml::from_str(text)?;
        schedules(Some(file.schedule))
    }

    #[test]
    fn a_queue_schedule_takes_its_defaults() {
        let s = parse(
            "[[schedule]]\nname = \"monthly\"\ncron = \"0 9 1 * *\"\nqueue = \"reminders\"\nbody = { kind = \"monthly\" }\nattributes = { source = \"cron\" }\n",
        )
        .unwrap();
        let s = &s[0];
        assert_eq!((s.calendar.zone(), s.catch_up), ("UTC", DEFAULT_CATCH_UP));
        assert_eq!(s.catch_up_policy, CatchUpPolicy::All);
        assert_eq!(s.overlap, Overlap::Skip);
        assert_eq!(s.max_clock_skew, DEFAULT_MAX_CLOCK_SKEW);
        let ScheduleTarget::Queue {
            queue,
            body,
            attributes,
            group,
        } = &s.target
        else {
            panic!("a queue target: {:?}", s.target)
        };
        assert_eq!(queue, "reminders");
        assert_eq!(body, br#"{"kind":"monthly"}"#);
        assert_eq!(attributes, &[Attribute::string("source", "cron")]);
        assert_eq!(group, &None);
    }

    #[test]
    fn a_celery_schedule_is_a_task_on_celerys_default_queue() {
        let s = parse(
            "[[schedule]]\nname = \"m\"\ncron = \"@monthly\"\ncelery-task = \"proj.tasks.cron_monthly_email_reminder\"\nkwargs = { dry = false }\n",
        )
        .unwrap();
        assert_eq!(
            s[0].target,
            ScheduleTarget::Celery {
                task: "proj.tasks.cron_monthly_email_reminder".into(),
                args: serde_json::json!([]),
                kwargs: serde_json::json!({"dry": false}),
                queue: "celery".into(),
                envelope: crate::message::rules::Envelope::Kombu,
            }
        );
    }

    #[test]
    fn every_bad_value_names_its_field() {
        let base = "[[schedule]]\nname = \"m\"\ncron = \"* * * * *\"\n";
        for (extra, says) in [
            (
                "queue = \"q\"\noverlap = \"never\"\n",
                "schedule `m`: overlap `never`",
            ),
            (
                "queue = \"q\"\ncatch-up-policy = \"some\"\n",
                "catch-up-policy",
            ),
            ("", "say what a tick sends"),
            (
                "queue = \"a/b\"\n",
                "schedule `m`: queue `a/b` is not a queue name",
            ),
            (
                "queue = \"q\"\nbody = 3\n",
                "schedule `m`: body is a integer",
            ),
            (
                "queue = \"q\"\nattributes = { qhost-tick = \"x\" }\n",
                "qhost's own",
            ),
            (
                "celery-task = \"t\"\nargs = { a = 1 }\n",
                "schedule `m`: args is a list",
            ),
            ("celery-task = \"t\"\nbody = \"x\"\n", "not `body`"),
            ("queue = \"q\"\nargs = [1]\n", "a Celery task's"),
            (
                "queue = \"q\"\nmax-clock-skew-secs = 0\n",
                "max-clock-skew-secs",
            ),
            (
                "queue = \"q\"\ncatch-up-secs = 99999999\n",
                "keep-ticks-secs",
            ),
            (
                "queue = \"q\"\ntimezone = \"Europe/Nowhere\"\n",
                "schedule `m`: timezone: `Europe/Nowhere`",
            ),
        ] {
            let e = format!("{:#}", parse(&format!("{base}{extra}")).unwrap_err());
            assert!(e.contains(says), "{extra:?}: {e}");
        }
        let e = parse("[[schedule]]\nname = \"a b\"\ncron = \"* * * * *\"\nqueue = \"q\"\n")
            .unwrap_err();
        assert!(e.to_string().contains("schedule[0].name `a b`"), "{e}");
        let twice = format!("{base}queue = \"q\"\n{base}queue = \"q\"\n");
        let e = parse(&twice).unwrap_err();
        assert!(e.to_string().contains("used twice"), "{e}");
    }
}
