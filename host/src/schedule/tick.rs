//! A tick: one firing of a schedule, identified by its scheduled time, and the message it sends.
//!
//! The identity is what makes a tick fire once: its key `schedule:NAME:TICK` (the tick in RFC
//! 3339, UTC) is claimed in the store by the host that fires it, is the message's
//! `qhost-idempotency-key` (so a qhost consumer keyed by message id locks on it, however often
//! the message is sent), its FIFO deduplication id (hashed), and, for a Celery task, its task id
//! (derived). A tick fired by hand (`qhost schedule fire`) is its own: keyed by the moment it
//! was asked for, to the millisecond, marked `by-hand`.

use jiff::Timestamp;
use serde_json::json;

use super::clock::FleetClock;
use crate::celery::send::{task_id, task_message};
use crate::config::schedule::{ScheduleConfig, ScheduleTarget};
use crate::digest::sha256_hex;
use crate::idempotency::key::scoped;
use crate::message::{Attribute, Outgoing, rules, wire};

/// On a schedule's message: the schedule's name.
pub(crate) const SCHEDULE_ATTRIBUTE: &str = "qhost-schedule";
/// On a schedule's message: the tick it is for (RFC 3339, UTC).
pub(crate) const TICK_ATTRIBUTE: &str = "qhost-tick";

/// One firing of a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tick {
    schedule: String,
    at: Timestamp,
    by_hand: bool,
}

impl Tick {
    /// The tick of `schedule` scheduled at `at`.
    pub(crate) fn at(schedule: &str, at: Timestamp) -> Self {
        Tick {
            schedule: schedule.to_string(),
            at,
            by_hand: false,
        }
    }

    /// An extra tick of `schedule` asked for at `now`.
    pub(crate) fn by_hand(schedule: &str, now: Timestamp) -> Self {
        Tick {
            schedule: schedule.to_string(),
            at: now,
            by_hand: true,
        }
    }

    /// The tick a record names.
    pub(crate) fn of_record(schedule: &str, fired: &super::record::Fired) -> Option<Self> {
        Some(Tick {
            schedule: schedule.to_string(),
            at: fired.label.parse().ok()?,
            by_hand: fired.by_hand,
        })
    }

    /// What a record keeps of it, fired by `host` now on the fleet's `clock`.
    pub(crate) fn fired(&self, host: &str, clock: &FleetClock) -> super::record::Fired {
        super::record::Fired {
            tick: self.at.as_second(),
            label: self.label(),
            by_hand: self.by_hand,
            host: host.to_string(),
            at_ms: clock.now_ms(),
            skew_ms: clock.skew_ms(),
        }
    }

    /// When it is for.
    pub(crate) fn time(&self) -> Timestamp {
        self.at
    }

    /// Its time as its messages carry it: RFC 3339, UTC (to the millisecond when by hand).
    pub(crate) fn label(&self) -> String {
        if self.by_hand {
            format!("{:.3}", self.at)
        } else {
            self.at.to_string()
        }
    }

    /// Its key: `schedule:NAME:TICK` (`schedule:NAME:by-hand:TIME` for an extra one).
    pub(crate) fn key(&self) -> String {
        let hand = if self.by_hand { "by-hand:" } else { "" };
        format!("schedule:{}:{hand}{}", self.schedule, self.label())
    }

    /// Where its claim lives in the store (one key: one slot on a cluster).
    pub(crate) fn stored_key(&self, namespace: &str) -> String {
        let key = self.key();
        scoped(namespace, "schedule", &key["schedule:".len()..])
    }

    /// The message it sends to `schedule`'s target.
    pub(crate) fn message(&self, schedule: &ScheduleConfig) -> Outgoing {
        let key = self.key();
        let (queue, body, mut attributes, group) = match &schedule.target {
            ScheduleTarget::Queue {
                queue,
                body,
                attributes,
                group,
            } => {
                let body = if body.is_empty() {
                    json!({"schedule": schedule.name, "tick": self.label()})
                        .to_string()
                        .into_bytes()
                } else {
                    body.clone()
                };
                (queue, body, attributes.clone(), group.as_deref())
            }
            ScheduleTarget::Celery {
                task,
                args,
                kwargs,
                queue,
                envelope,
            } => {
                let what = json!({"task": task, "args": args, "kwargs": kwargs}).to_string();
                let task = task_message(what.as_bytes(), &self.celery_task_id(), queue, *envelope)
                    .unwrap_or_else(|e| unreachable!("a checked schedule's task: {e}"));
                (queue, task.body, task.attributes, None)
            }
        };
        attributes.push(Attribute::string(SCHEDULE_ATTRIBUTE, &schedule.name));
        attributes.push(Attribute::string(TICK_ATTRIBUTE, self.label()));
        attributes.push(Attribute::string(wire::IDEMPOTENCY_KEY, &key));
        let fifo = queue.ends_with(".fifo");
        Outgoing {
            queue: queue.clone(),
            body,
            attributes,
            delay_seconds: 0,
            // A FIFO queue needs a group; a standard queue takes one when it is asked for
            // (SQS fair queues: the group is the tenant whose dwell time SQS evens out).
            group_id: match fifo {
                true => Some(group.unwrap_or(&schedule.name).to_string()),
                false => group.map(str::to_string),
            },
            dedup_id: Some(sha256_hex(key.as_bytes())),
        }
    }

    /// Whether `schedule`'s ticks are messages SQS takes (size, attributes, FIFO ids): checked
    /// when the configuration is, so no tick is refused at its time.
    pub(crate) fn check(schedule: &ScheduleConfig) -> Result<(), String> {
        let tick = Tick::by_hand(&schedule.name, Timestamp::UNIX_EPOCH);
        rules::check(&tick.message(schedule)).map_err(|r| r.0)
    }

    /// The Celery task id of a task tick: derived from its key, so every send of it is one task.
    pub(crate) fn celery_task_id(&self) -> String {
        task_id(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schedule::{CatchUpPolicy, Overlap};
    use crate::message::find_attribute;
    use crate::message::rules::Envelope;
    use crate::schedule::calendar::Calendar;

    fn schedule(target: ScheduleTarget) -> ScheduleConfig {
        ScheduleConfig {
            name: "monthly".into(),
            calendar: Calendar::parse("0 9 1 * *", "UTC").unwrap(),
            target,
            catch_up: std::time::Duration::from_secs(3600),
            catch_up_policy: CatchUpPolicy::All,
            overlap: Overlap::Skip,
            max_clock_skew: std::time::Duration::from_secs(30),
            keep_ticks: std::time::Duration::from_secs(86_400),
        }
    }

    #[test]
    fn a_tick_is_keyed_by_its_scheduled_time_on_every_part_of_its_message() {
        let at: Timestamp = "2026-12-01T09:00:00Z".parse().unwrap();
        let tick = Tick::at("monthly", at);
        assert_eq!(tick.key(), "schedule:monthly:2026-12-01T09:00:00Z");
        assert_eq!(
            tick.stored_key("ns"),
            "ns:{schedule:monthly:2026-12-01T09:00:00Z}"
        );
        let s = schedule(ScheduleTarget::Queue {
            queue: "reminders.fifo".into(),
            body: b"{}".to_vec(),
            attributes: vec![Attribute::string("kind", "monthly")],
            group: None,
        });
        let m = tick.message(&s);
        let attr =
            |name| find_attribute(&m.attributes, name).and_then(|a| a.text().map(str::to_string));
        assert_eq!(attr("kind").as_deref(), Some("monthly"));
        assert_eq!(attr(SCHEDULE_ATTRIBUTE).as_deref(), Some("monthly"));
        assert_eq!(
            attr(TICK_ATTRIBUTE).as_deref(),
            Some("2026-12-01T09:00:00Z")
        );
        assert_eq!(attr(wire::IDEMPOTENCY_KEY), Some(tick.key()));
        assert_eq!(m.group_id.as_deref(), Some("monthly"));
        // On a standard queue, a group only when one is named (SQS fair queues).
        let standard = |group: Option<&str>| {
            let s = schedule(ScheduleTarget::Queue {
                queue: "reminders".into(),
                body: Vec::new(),
                attributes: Vec::new(),
                group: group.map(str::to_string),
            });
            tick.message(&s).group_id
        };
        assert_eq!(standard(None), None);
        assert_eq!(standard(Some("tenant-7")).as_deref(), Some("tenant-7"));
        assert_eq!(m.dedup_id, Some(sha256_hex(tick.key().as_bytes())));
        assert_eq!(
            m,
            Tick::at("monthly", at).message(&s),
            "the same every time"
        );
        let by_hand = Tick::by_hand("monthly", "2026-12-04T17:30:05.123Z".parse().unwrap());
        assert_eq!(
            by_hand.key(),
            "schedule:monthly:by-hand:2026-12-04T17:30:05.123Z"
        );
    }

    #[test]
    fn a_task_tick_is_one_celery_task_id_however_often_it_is_sent() {
        let s = schedule(ScheduleTarget::Celery {
            task: "proj.tasks.cron_monthly_email_reminder".into(),
            args: json!([]),
            kwargs: json!({"dry": false}),
            queue: "celery".into(),
            envelope: Envelope::Kombu,
        });
        let tick = Tick::at("monthly", "2026-12-01T09:00:00Z".parse().unwrap());
        let m = tick.message(&s);
        let task = crate::celery::decode(&m.body, &[crate::celery::ContentType::Json]).unwrap();
        assert_eq!(task.id, tick.celery_task_id());
        assert_eq!(task.name, "proj.tasks.cron_monthly_email_reminder");
        assert_eq!(m.group_id, None);
    }

    #[test]
    fn on_rabbitmq_a_task_tick_is_sent_as_celery_sends_there() {
        let mut target = ScheduleTarget::Celery {
            task: "proj.tasks.cron_monthly_email_reminder".into(),
            args: json!([]),
            kwargs: json!({}),
            queue: "celery".into(),
            envelope: Envelope::Kombu,
        };
        target.lay_out(Envelope::Amqp);
        let tick = Tick::at("monthly", "2026-12-01T09:00:00Z".parse().unwrap());
        let m = tick.message(&schedule(target));
        let attr = |name: &str| find_attribute(&m.attributes, name);
        let headers = attr(wire::AMQP_HEADERS)
            .and_then(|a| a.text())
            .expect("its headers");
        let headers: serde_json::Value = serde_json::from_str(headers).unwrap();
        assert_eq!(headers["id"], json!(tick.celery_task_id()));
        assert!(attr(wire::AMQP_CONTENT_TYPE).is_some());
        let body: serde_json::Value = serde_json::from_slice(&m.body).unwrap();
        assert_eq!(body[0], json!([]), "the body is [args, kwargs, embed]");
        assert!(
            rules::check(&m).is_ok(),
            "a tick SQS's rules take, on every source"
        );
    }
}
