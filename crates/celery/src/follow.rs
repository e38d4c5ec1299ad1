//! What a Celery task sends when it succeeds: its callbacks (`link=`) and the next task of its
//! chain, sent as a Celery worker sends them (`celery.app.trace`), so a workflow that a
//! producer started keeps going whether its next step runs on qhost or on a Celery worker.
//!
//! A worker applies each callback signature, then pops the last signature of the `chain` and
//! applies it with the rest of the chain, each with the task's return value put first in the
//! arguments unless the signature is immutable (`.si()`), and with this task as the parent.
//! qhost does the same, the return value being the one the handler set through
//! `qhost:handler/result-value` (`None` if it set none), with one difference it documents:
//! several callbacks go out as separate tasks rather than as one group.
//!
//! A signature's task id is the one the producer froze into it (a chain's tasks all have one),
//! so the ids a caller holds are the ones that run; otherwise it is derived from the outbox key
//! like a handler's own task. Its queue is the signature's `queue` option (named as kombu's SQS
//! transport names queues, on SQS), or the queue the task came from. It is laid out as the
//! broker's Celery producers lay it out (`Envelope`), so a Celery worker there can run it. The follow-ups go through the
//! outbox, committed with the task's completion: sent once, and only when the run acked.
//!
//! Refused before the task runs (each with why, dead-lettered so it can be redriven to a
//! Celery worker): a chord (its counter lives in Celery's result backend), errbacks (qhost
//! would not call them on failure), and callbacks that are themselves groups, chains or chords.

use serde_json::{Map, Value};

use super::DecodeError;
use super::send::{self, Request};
use super::task::Task;
use qhost_message::Outgoing;
use qhost_message::rules::Envelope;

/// A task to send once the consumed task's run is complete.
#[derive(Clone, Debug, PartialEq)]
pub struct FollowUp {
    /// The queue it goes to.
    pub queue: String,
    /// How it is laid out.
    envelope: Envelope,
    /// The task, with the signature's own arguments.
    request: Request,
    /// The id the producer gave it, if any.
    id: Option<String>,
    /// Whether the parent's return value goes first in its arguments (not for `.si()`).
    takes_result: bool,
}

impl FollowUp {
    /// The outbox message for this follow-up; `derived` is its outbox key, which names the
    /// task when the producer did not, and `parent` the consumed task's return value.
    pub fn outgoing(&self, derived: &str, parent: &Value) -> Outgoing {
        let id = (self.id.clone()).unwrap_or_else(|| send::task_id(derived));
        let encoded = if self.takes_result {
            let mut request = self.request.clone();
            let own = as_list(std::mem::take(&mut request.args));
            request.args = Value::Array(std::iter::once(parent.clone()).chain(own).collect());
            request.encode(&id, &self.queue, self.envelope)
        } else {
            self.request.encode(&id, &self.queue, self.envelope)
        };
        let mut msg = Outgoing::new(&self.queue, encoded.body);
        msg.attributes = encoded.attributes;
        if self.queue.ends_with(".fifo") {
            // kombu's group on a FIFO queue.
            msg.group_id = Some("default".into());
        }
        msg
    }
}

/// The tasks `task` sends when it succeeds: its callbacks, then the next task of its chain,
/// laid out as `envelope` says; `home` is the queue it came from. Refused: what qhost does not
/// carry on (see the module docs).
pub fn follow_ups(
    task: &Task,
    home: &str,
    envelope: Envelope,
) -> Result<Vec<FollowUp>, DecodeError> {
    let links = &task.links;
    if links.chord {
        return Err(unsupported(
            "it is part of a chord, whose counter lives in Celery's result backend",
        ));
    }
    if links.errbacks {
        return Err(unsupported(
            "it has errbacks (link_error), which qhost would not call when it fails",
        ));
    }
    let parent = |chain: Value| Parent {
        id: &task.id,
        root: task.root_id.as_deref().unwrap_or(&task.id),
        chain,
        envelope,
    };
    let mut out = Vec::with_capacity(links.callbacks.len() + 1);
    for sig in &links.callbacks {
        out.push(follow_up(sig, &parent(Value::Null), home)?);
    }
    if let Some((next, rest)) = links.chain.split_last() {
        let rest = match rest {
            [] => Value::Null,
            rest => Value::Array(rest.to_vec()),
        };
        out.push(follow_up(next, &parent(rest), home)?);
    }
    Ok(out)
}

/// The task a follow-up comes from.
struct Parent<'a> {
    id: &'a str,
    root: &'a str,
    /// The chain it carries on.
    chain: Value,
    envelope: Envelope,
}

/// One signature applied as a worker applies it on success.
fn follow_up(sig: &Value, parent: &Parent<'_>, home: &str) -> Result<FollowUp, DecodeError> {
    let Value::Object(sig) = sig else {
        return Err(bad("a callback or chain entry is not a signature (a dict)"));
    };
    if let Some(kind) = sig.get("subtask_type").and_then(Value::as_str) {
        return Err(unsupported(&format!(
            "a callback is a {kind}; qhost sends plain task signatures only"
        )));
    }
    let name = match sig.get("task") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        _ => return Err(bad("a signature has no task name")),
    };
    let args = send::list_or_empty(sig.get("args").cloned(), "args").map_err(|e| bad(&e))?;
    let kwargs = send::dict_or_empty(sig.get("kwargs").cloned(), "kwargs").map_err(|e| bad(&e))?;
    let immutable = sig.get("immutable").and_then(Value::as_bool) == Some(true);
    let mut options = match sig.get("options") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(options)) => options.clone(),
        Some(_) => return Err(bad("a signature's options are not a dict")),
    };
    let (eta, expires) = send::schedule(&mut options).map_err(|e| bad(&e))?;
    let queue = match options.get("queue") {
        None | Some(Value::Null) => home.to_string(),
        Some(Value::String(queue)) => match parent.envelope {
            Envelope::Kombu => sqs_name(queue),
            Envelope::Amqp => queue.clone(),
        },
        Some(_) => return Err(bad("a signature's queue option is not a queue name")),
    };
    let id = options
        .get("task_id")
        .and_then(Value::as_str)
        .map(String::from);
    let request = Request {
        name,
        args,
        kwargs,
        eta,
        expires,
        root_id: Some(parent.root.to_string()),
        parent_id: Some(parent.id.to_string()),
        chain: parent.chain.clone(),
    };
    Ok(FollowUp {
        queue,
        envelope: parent.envelope,
        request,
        id,
        takes_result: !immutable,
    })
}

fn as_list(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

/// The SQS name kombu's SQS transport gives queue `name`: `.` becomes `-`, other punctuation
/// but `-` and `_` becomes `_`, and a `.fifo` suffix is kept.
pub fn sqs_name(name: &str) -> String {
    let translate = |s: &str| -> String {
        s.chars()
            .map(|c| match c {
                '.' => '-',
                '-' | '_' => c,
                c if c.is_ascii_punctuation() => '_',
                c => c,
            })
            .collect()
    };
    match name.strip_suffix(".fifo") {
        Some(stem) => format!("{}.fifo", translate(stem)),
        None => translate(name),
    }
}

fn unsupported(why: &str) -> DecodeError {
    DecodeError::Unsupported(why.to_string())
}

fn bad(why: &str) -> DecodeError {
    DecodeError::Protocol(why.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fixtures::{kombu, v2_headers};
    use crate::{ContentType, decode};

    fn task_with(embed: Value) -> Task {
        let body = serde_json::to_vec(&json!([[1], {}, embed])).unwrap();
        let raw = kombu(v2_headers("proj.first", "id-1"), "application/json", &body);
        decode(&raw, &[ContentType::Json]).unwrap()
    }

    fn sig(task: &str, args: Value, options: Value, immutable: bool) -> Value {
        json!({"task": task, "args": args, "kwargs": {}, "options": options,
               "subtask_type": null, "immutable": immutable, "chord_size": null})
    }

    fn sent(f: &FollowUp, derived: &str) -> Task {
        sent_after(f, derived, &Value::Null)
    }

    /// What `f` sends when its parent returned `parent`.
    fn sent_after(f: &FollowUp, derived: &str, parent: &Value) -> Task {
        decode(&f.outgoing(derived, parent).body, &[ContentType::Json]).unwrap()
    }

    #[test]
    fn a_chain_s_next_task_carries_the_rest_of_the_chain_and_its_frozen_id() {
        let third = sig("proj.third", json!([3]), json!({"task_id": "id-3"}), true);
        let second = sig(
            "proj.second",
            json!([2]),
            json!({"task_id": "id-2", "queue": "proj.slow"}),
            false,
        );
        let task = task_with(json!({"chain": [third, second], "callbacks": null}));
        let ups = follow_ups(&task, "celery", Envelope::Kombu).unwrap();
        assert_eq!(ups.len(), 1);
        assert_eq!(
            ups[0].queue, "proj-slow",
            "kombu's name for the queue option"
        );
        let next = sent_after(&ups[0], "p:id-1/0", &json!({"total": 7}));
        assert_eq!(
            (next.name.as_str(), next.id.as_str()),
            ("proj.second", "id-2")
        );
        assert_eq!(
            next.args,
            json!([{"total": 7}, 2]),
            "the parent's result first"
        );
        assert_eq!(
            sent(&ups[0], "p:id-1/0").args,
            json!([null, 2]),
            "None when it set none"
        );
        assert_eq!(
            (next.parent_id.as_deref(), next.root_id.as_deref()),
            (Some("id-1"), Some("id-1"))
        );
        // The third is sent by whoever runs the second.
        let after = follow_ups(&next, "proj-slow", Envelope::Kombu).unwrap();
        assert_eq!(after.len(), 1);
        let last = sent_after(&after[0], "q:id-2/0", &json!("ignored"));
        assert_eq!(
            (last.name.as_str(), last.id.as_str()),
            ("proj.third", "id-3")
        );
        assert_eq!(last.args, json!([3]), "immutable: its own arguments only");
        assert_eq!(last.root_id.as_deref(), Some("id-1"));
        assert!(
            follow_ups(&last, "celery", Envelope::Kombu)
                .unwrap()
                .is_empty(),
            "the chain ends"
        );
    }

    #[test]
    fn on_amqp_a_follow_up_keeps_its_queue_s_name_and_travels_as_celery_sends_there() {
        let next = sig(
            "proj.next",
            json!([2]),
            json!({"task_id": "n", "queue": "proj.slow"}),
            true,
        );
        let task = task_with(json!({"chain": [next], "callbacks": null}));
        let ups = follow_ups(&task, "celery", Envelope::Amqp).unwrap();
        assert_eq!(
            ups[0].queue, "proj.slow",
            "RabbitMQ's queue names are Celery's own"
        );
        let msg = ups[0].outgoing("p:k/0", &Value::Null);
        let headers = (msg.attributes.iter())
            .find(|a| a.name == qhost_message::wire::AMQP_HEADERS)
            .and_then(qhost_message::Attribute::text)
            .expect("its headers");
        let Value::Object(headers) = serde_json::from_str(headers).unwrap() else {
            panic!("{headers}")
        };
        let read = crate::decode_amqp(&msg.body, "application/json", headers, &[ContentType::Json])
            .unwrap();
        assert_eq!(
            (
                read.name.as_str(),
                read.id.as_str(),
                read.parent_id.as_deref()
            ),
            ("proj.next", "n", Some("id-1"))
        );
    }

    #[test]
    fn callbacks_go_first_each_with_an_id_derived_from_its_outbox_key_when_it_has_none() {
        let link = sig("proj.notify", json!([]), json!({}), true);
        let next = sig("proj.next", json!([]), json!({"task_id": "n"}), true);
        let task = task_with(json!({"callbacks": [link], "chain": [next]}));
        let ups = follow_ups(&task, "orders.fifo", Envelope::Kombu).unwrap();
        let names: Vec<String> = ups.iter().map(|f| sent(f, "p:k/0").name).collect();
        assert_eq!(names, ["proj.notify", "proj.next"]);
        let first = ups[0].outgoing("p:k/0", &Value::Null);
        assert_eq!(sent(&ups[0], "p:k/0").id, send::task_id("p:k/0"));
        assert_eq!(
            (first.queue.as_str(), first.group_id.as_deref()),
            ("orders.fifo", Some("default"))
        );
    }

    #[test]
    fn what_qhost_does_not_carry_on_is_refused_with_why() {
        let group = json!({"task": "celery.group", "subtask_type": "group", "kwargs": {}});
        let cases = [
            (json!({"chord": {"task": "proj.sum"}}), "part of a chord"),
            (
                json!({"errbacks": [sig("e", json!([]), json!({}), true)]}),
                "errbacks",
            ),
            (json!({"callbacks": [group]}), "a callback is a group"),
            (json!({"chain": ["proj.x"]}), "not a signature"),
            (
                json!({"callbacks": [{"task": "t", "options": {"queue": 3}}]}),
                "queue option",
            ),
        ];
        for (embed, says) in cases {
            let err = follow_ups(&task_with(embed.clone()), "celery", Envelope::Kombu).unwrap_err();
            assert!(err.to_string().contains(says), "{embed}: {err}");
        }
    }

    #[test]
    fn queue_names_are_kombu_s() {
        assert_eq!(sqs_name("proj.tasks"), "proj-tasks");
        assert_eq!(sqs_name("a:b/c-d_e"), "a_b_c-d_e");
        assert_eq!(sqs_name("orders.v2.fifo"), "orders-v2.fifo");
    }
}
