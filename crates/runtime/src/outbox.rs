//! What an invocation's outbox accepts, checked when the handler calls `outbox.send`, before
//! anything is committed: the handler hears why a message cannot go, and decides (reject,
//! retry, send something else). Once accepted, a message is what the host will send.
//!
//! In order: the message count, the plugin's grant for the target queue (none by default),
//! qhost's reserved attribute names (a plugin cannot forge a dead-letter reason, a body
//! encoding or a derived key), the bytes one message may send in all, then SQS's rules for
//! the message as it will travel, stamped with qhost's attributes and offloaded if it will be
//! ([`rules::check_as_sent`]).

use serde::Deserialize;

use qhost_celery as celery;
use qhost_message::Outgoing;
use qhost_message::rules::{self, SendShape};
use qhost_message::wire::{self, message_size};

/// Outbox messages one invocation may queue.
pub(crate) const MAX_OUTBOX_MESSAGES: usize = 100;
/// The largest outbox body accepted: above SQS's 1 MiB a body needs the payload store.
pub(crate) const MAX_OUTBOX_BODY: usize = 64 * 1024 * 1024;

/// The outbox a plugin is granted: no queue unless named, and a cap on what one message may
/// send, so a handler cannot make the host hold unbounded memory on its behalf.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct OutboxGrant {
    /// Queue names the plugin may send to; `"*"` grants every queue.
    #[serde(default)]
    pub queues: Vec<String>,
    /// Bytes (bodies and attributes) the plugin may send from one message.
    #[serde(default = "default_outbox_bytes")]
    pub max_bytes: usize,
    /// Queues whose messages are Celery tasks (`qhost_celery::send`); each is granted too.
    #[serde(default)]
    pub celery: Vec<String>,
}

impl Default for OutboxGrant {
    fn default() -> Self {
        OutboxGrant {
            queues: Vec::new(),
            max_bytes: default_outbox_bytes(),
            celery: Vec::new(),
        }
    }
}

fn default_outbox_bytes() -> usize {
    8 << 20
}

impl OutboxGrant {
    /// Whether the plugin may send to `queue`.
    pub fn allows(&self, queue: &str) -> bool {
        self.queues.iter().any(|q| q == "*" || q == queue) || self.is_celery(queue)
    }

    /// Whether messages to `queue` are Celery tasks.
    pub fn is_celery(&self, queue: &str) -> bool {
        self.celery.iter().any(|q| q == queue)
    }
}

/// One plugin's outbox rules.
#[derive(Clone, Debug)]
pub struct OutboxPolicy {
    /// What its manifest grants.
    pub grant: OutboxGrant,
    /// How the host sends.
    pub shape: SendShape,
}

/// Who is sending: what the stamp needs.
#[derive(Clone, Copy, Debug)]
pub struct Sender<'a> {
    /// The plugin's name.
    pub plugin: &'a str,
    /// `NAME@VERSION`.
    pub producer: &'a str,
    /// The idempotency key of the message being handled.
    pub key: &'a str,
}

impl OutboxPolicy {
    /// Stamps `msg` as the next message of `held` and checks it; the error is for the guest.
    pub fn admit(
        &self,
        held: &[Outgoing],
        sender: Sender<'_>,
        mut msg: Outgoing,
    ) -> Result<Outgoing, String> {
        if held.len() >= MAX_OUTBOX_MESSAGES {
            return Err(format!(
                "the outbox holds at most {MAX_OUTBOX_MESSAGES} messages"
            ));
        }
        if !self.grant.allows(&msg.queue) {
            return Err(format!(
                "this plugin may not send to queue `{}` (its manifest's [outbox] queues must name it)",
                msg.queue
            ));
        }
        if let Some(a) = msg
            .attributes
            .iter()
            .find(|a| a.name.starts_with(wire::RESERVED_PREFIX))
        {
            return Err(format!(
                "attribute `{}` is reserved: names starting with `{}` are qhost's own",
                a.name,
                wire::RESERVED_PREFIX
            ));
        }
        if msg.body.len() > MAX_OUTBOX_BODY {
            return Err(format!(
                "a body of {} bytes is over the {MAX_OUTBOX_BODY}-byte limit",
                msg.body.len()
            ));
        }
        let derived = wire::derived_key(sender.plugin, sender.key, held.len());
        if self.grant.is_celery(&msg.queue) {
            let id = celery::send::task_id(&derived);
            let task = celery::send::task_message(&msg.body, &id, &msg.queue, self.shape.envelope)?;
            msg.body = task.body;
            msg.attributes.extend(task.attributes);
        }
        wire::stamp(&mut msg, &derived, sender.producer);
        let total = held
            .iter()
            .chain(std::iter::once(&msg))
            .map(|m| message_size(m.body.len(), &m.attributes))
            .sum::<usize>();
        if total > self.grant.max_bytes {
            return Err(format!(
                "the outbox would hold {total} bytes; this plugin may send {} from one message ([outbox] max-bytes)",
                self.grant.max_bytes
            ));
        }
        rules::check_as_sent(&msg, &self.shape).map_err(|r| r.0)?;
        Ok(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qhost_message::Attribute;

    const SENDER: Sender<'static> = Sender {
        plugin: "p",
        producer: "p@v1",
        key: "k",
    };

    fn policy(queues: &[&str], max_bytes: usize) -> OutboxPolicy {
        OutboxPolicy {
            grant: OutboxGrant {
                queues: queues.iter().map(|q| q.to_string()).collect(),
                max_bytes,
                celery: Vec::new(),
            },
            shape: SendShape::default(),
        }
    }

    #[test]
    fn a_celery_queue_s_message_is_sent_as_celery_s_task_with_a_derived_id() {
        let mut celery = policy(&[], 1 << 20);
        celery.grant.celery = vec!["tasks".into()];
        let task = Outgoing::new("tasks", r#"{"task": "proj.add", "args": [1]}"#);
        let sent = celery.admit(&[], SENDER, task).unwrap();
        let read = qhost_celery::decode(&sent.body, &[qhost_celery::ContentType::Json]).unwrap();
        assert_eq!(read.name, "proj.add");
        assert_eq!(read.id, qhost_celery::send::task_id("p:k/0"));
        let err = (celery.admit(&[], SENDER, Outgoing::new("tasks", "hello"))).unwrap_err();
        assert!(err.contains("a task as JSON"), "{err}");
    }

    #[test]
    fn an_admitted_message_is_stamped_with_a_scoped_key() {
        let held = vec![Outgoing::new("out", "first")];
        let msg = policy(&["out"], 1 << 20)
            .admit(&held, SENDER, Outgoing::new("out", "second"))
            .unwrap();
        let key = msg
            .attributes
            .iter()
            .find(|a| a.name == wire::IDEMPOTENCY_KEY);
        assert_eq!(key.and_then(Attribute::text), Some("p:k/1"));
        assert_eq!(msg.dedup_id.as_deref().map(str::len), Some(64));
    }

    #[test]
    fn refusals_say_why() {
        let p = policy(&["out"], 100);
        let cases = [
            (
                Outgoing::new("elsewhere", "x"),
                "may not send to queue `elsewhere`",
            ),
            (
                Outgoing::new("out", vec![b'x'; 200]),
                "may send 100 from one message",
            ),
        ];
        for (msg, says) in cases {
            let e = p.admit(&[], SENDER, msg).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
        let eight: Vec<_> = (0..8)
            .map(|i| Attribute::number(format!("n{i}"), i))
            .collect();
        let binary = Outgoing {
            attributes: eight,
            ..Outgoing::new("out", vec![0xff])
        };
        let e = policy(&["*"], 1 << 20)
            .admit(&[], SENDER, binary)
            .unwrap_err();
        assert!(e.contains("11 attributes"), "{e}");
        let forged = Outgoing::new("out", "x")
            .with_attribute(Attribute::string(wire::BODY_ENCODING, "base64"));
        let e = p.admit(&[], SENDER, forged).unwrap_err();
        assert!(e.contains("`qhost-body-encoding` is reserved"), "{e}");
        let full = vec![Outgoing::new("out", "x"); MAX_OUTBOX_MESSAGES];
        let e = p
            .admit(&full, SENDER, Outgoing::new("out", "y"))
            .unwrap_err();
        assert!(e.contains("at most 100 messages"), "{e}");
    }
}
