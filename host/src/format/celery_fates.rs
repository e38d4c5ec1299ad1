//! A Celery queue's deliveries through the real pipeline on in-memory parts: routed by task
//! name, keyed by task id, held back until due, dropped when expired, dead-lettered when not a
//! task qhost runs.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::celery::fixtures::{kombu, v2_headers, v2_json};
use crate::handler::{HandlerMessage, Invocation, Outcome};
use crate::message::wire::DEAD_LETTER_REASON;
use crate::message::{Received, find_attribute};
use crate::pipeline::test_bed::{JOBS, PLUGIN, TestBed};

/// What the handler was given, in order.
type Seen = Arc<Mutex<Vec<HandlerMessage>>>;

/// A bed on a Celery queue with `routes` (its queue lines), whose plugin acks and records
/// what it is given.
fn celery_bed(routes: &str) -> (TestBed, Seen) {
    celery_bed_granted(routes, "")
}

/// As [`celery_bed`], with `manifest` for the plugin.
fn celery_bed_granted(routes: &str, manifest: &str) -> (TestBed, Seen) {
    let seen = Seen::default();
    let record = Arc::clone(&seen);
    let handler = move |msg: HandlerMessage| {
        record.lock().unwrap().push(msg);
        Ok(Invocation::new(Outcome::Ack))
    };
    let queue = format!("format = \"celery\"\n{routes}");
    (TestBed::with_queue(&queue, manifest, handler), seen)
}

fn routed_by_name() -> String {
    format!("tasks = {{ \"proj.tasks.remind\" = \"{PLUGIN}\" }}\n")
}

fn reason(bed_dead: &[Received]) -> String {
    assert_eq!(bed_dead.len(), 1, "one dead letter");
    (find_attribute(&bed_dead[0].attributes, DEAD_LETTER_REASON).and_then(|a| a.text()))
        .expect("a reason")
        .to_string()
}

#[tokio::test(start_paused = true)]
async fn a_task_sent_twice_runs_once_keyed_by_its_task_id() {
    let (bed, seen) = celery_bed(&routed_by_name());
    let task = v2_json(
        "proj.tasks.remind",
        "a9e5a73a",
        json!([42]),
        json!({"month": "12"}),
    );
    // The second copy as SQS delivers a duplicate: another message, once the first ran.
    bed.send_body(task.clone()).await;
    assert_eq!(bed.deliver().await, 1);
    bed.send_body(task).await;
    assert_eq!(bed.deliver().await, 1);

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "the second copy is a duplicate");
    assert_eq!(seen[0].idempotency_key, "a9e5a73a");
    let body: Value = serde_json::from_slice(&seen[0].body).unwrap();
    assert_eq!(
        (&body["task"], &body["args"], &body["kwargs"]["month"]),
        (&json!("proj.tasks.remind"), &json!([42]), &json!("12"))
    );
    let task_name = find_attribute(&seen[0].attributes, "celery-task").and_then(|a| a.text());
    assert_eq!(task_name, Some("proj.tasks.remind"));
    let c = bed.counts();
    assert_eq!((c.received, c.invoked, c.acked, c.duplicates), (2, 1, 1, 1));
    assert_eq!(bed.depth(JOBS).await.total(), 0, "both deleted");
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_task_s_hard_time_limit_is_the_handler_s_deadline() {
    let (bed, seen) = celery_bed(&routed_by_name());
    let mut headers = v2_headers("proj.tasks.remind", "limited");
    headers["timelimit"] = json!([2.5, 1]);
    bed.send_body(kombu(headers, "application/json", b"[[], {}, {}]"))
        .await;
    bed.send_body(v2_json("proj.tasks.remind", "free", json!([]), json!({})))
        .await;
    bed.deliver().await;

    let mut limits: Vec<_> = (seen.lock().unwrap().iter())
        .map(|m| (m.idempotency_key.clone(), m.time_limit))
        .collect();
    limits.sort();
    assert_eq!(
        limits,
        [
            ("free".to_string(), None),
            (
                "limited".to_string(),
                Some(std::time::Duration::from_millis(2500))
            )
        ]
    );
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_celery_republished_runs_again_and_its_copies_once() {
    let (bed, seen) = celery_bed(&routed_by_name());
    bed.send_body(v2_json("proj.tasks.remind", "t1", json!([]), json!({})))
        .await;
    bed.deliver().await;
    let mut headers = v2_headers("proj.tasks.remind", "t1");
    headers["retries"] = json!(1);
    let retry = kombu(headers, "application/json", b"[[], {}, {}]");
    for _ in 0..2 {
        bed.send_body(retry.clone()).await;
        bed.deliver().await;
    }

    let keys: Vec<String> = (seen.lock().unwrap().iter())
        .map(|m| m.idempotency_key.clone())
        .collect();
    assert_eq!(keys, ["t1", "t1/retry-1"]);
    assert_eq!(bed.counts().duplicates, 1);
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_task_the_queue_does_not_route_is_dead_lettered_unless_it_has_a_default() {
    let (bed, seen) = celery_bed(&routed_by_name());
    bed.send_body(v2_json("proj.tasks.other", "u1", json!([]), json!({})))
        .await;
    bed.deliver().await;
    let dead = bed.contents(&bed.queue.config.dead_letter).await;
    let why = reason(&dead);
    assert!(
        why.contains(
            "task `proj.tasks.other` is not one this queue routes (tasks: proj.tasks.remind)"
        ),
        "{why}"
    );
    assert!(seen.lock().unwrap().is_empty());
    bed.close().await;

    let (bed, seen) = celery_bed(&format!("plugin = \"{PLUGIN}\"\n"));
    bed.send_body(v2_json("proj.tasks.other", "u1", json!([]), json!({})))
        .await;
    bed.deliver().await;
    assert_eq!(seen.lock().unwrap().len(), 1, "the default plugin runs it");
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn pickle_and_garbage_are_dead_lettered_with_why_and_nothing_runs() {
    let (bed, seen) = celery_bed(&routed_by_name());
    let pickle = kombu(
        v2_headers("proj.tasks.remind", "p1"),
        "application/x-python-serialize",
        b"\x80\x04.",
    );
    bed.send_body(pickle).await;
    bed.deliver().await;
    let why = reason(&bed.contents(&bed.queue.config.dead_letter).await);
    assert!(why.contains("pickle") && why.contains("refused"), "{why}");

    bed.send_body("{not kombu").await;
    bed.deliver().await;
    let dead = bed.contents(&bed.queue.config.dead_letter).await;
    assert_eq!(dead.len(), 2);
    assert!(seen.lock().unwrap().is_empty());
    let c = bed.counts();
    assert_eq!((c.invoked, c.dead_lettered), (0, 2));
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_task_not_due_is_hidden_until_its_eta_using_no_attempt() {
    let (bed, seen) = celery_bed(&routed_by_name());
    let mut headers = v2_headers("proj.tasks.remind", "later");
    headers["eta"] = json!("2099-01-01T00:00:00+00:00");
    bed.send_body(kombu(headers, "application/json", b"[[], {}, {}]"))
        .await;
    bed.deliver().await;

    assert!(seen.lock().unwrap().is_empty(), "not run early");
    assert_eq!(bed.split(JOBS).await, (0, 1), "kept, hidden");
    let c = bed.counts();
    assert_eq!(
        (c.deferred, c.invoked, c.failures, c.dead_lettered),
        (1, 0, 0, 0)
    );
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_expired_task_is_acked_without_running_and_counted() {
    let (bed, seen) = celery_bed(&routed_by_name());
    let mut headers = v2_headers("proj.tasks.remind", "stale");
    headers["expires"] = json!("2020-01-01T00:00:00+00:00");
    bed.send_body(kombu(headers, "application/json", b"[[], {}, {}]"))
        .await;
    bed.deliver().await;

    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(bed.depth(JOBS).await.total(), 0, "deleted");
    assert!(bed.contents(&bed.queue.config.dead_letter).await.is_empty());
    let c = bed.counts();
    assert_eq!((c.expired, c.invoked, c.acked), (1, 0, 0));
    bed.close().await;
}

/// A protocol 2 task whose embed is `embed`.
fn with_embed(task: &str, id: &str, embed: Value) -> Vec<u8> {
    let body = serde_json::to_vec(&json!([[], {}, embed])).unwrap();
    kombu(v2_headers(task, id), "application/json", &body)
}

#[tokio::test(start_paused = true)]
async fn a_chain_s_next_task_is_sent_once_when_the_first_acks_and_then_runs() {
    let granted = format!("[outbox]\ncelery = [\"{JOBS}\"]\n");
    let (bed, seen) = celery_bed_granted(&routed_by_name(), &granted);
    let next = json!({"task": "proj.tasks.remind", "args": [2], "kwargs": {},
                      "options": {"task_id": "second"}, "immutable": true, "subtask_type": null});
    let first = with_embed("proj.tasks.remind", "first", json!({"chain": [next]}));
    bed.send_body(first.clone()).await;
    assert_eq!(bed.deliver().await, 1);
    // A duplicate of the first, after it completed: its outbox was sent, so nothing again.
    bed.send_body(first).await;
    assert_eq!(
        bed.deliver().await,
        2,
        "the duplicate and the chain's next task"
    );
    assert_eq!(bed.deliver().await, 0, "nothing more was sent");

    let seen = seen.lock().unwrap().clone();
    let keys: Vec<&str> = seen.iter().map(|m| m.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["first", "second"]);
    let body: Value = serde_json::from_slice(&seen[1].body).unwrap();
    assert_eq!(
        (&body["args"], &body["parent_id"], &body["root_id"]),
        (&json!([2]), &json!("first"), &json!("first"))
    );
    let c = bed.counts();
    assert_eq!((c.invoked, c.acked, c.duplicates), (2, 2, 1));
    bed.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_chain_to_a_queue_the_plugin_may_not_send_to_is_dead_lettered_unrun() {
    let (bed, seen) = celery_bed(&routed_by_name());
    let next = json!({"task": "proj.tasks.remind", "options": {"queue": "proj.slow"}});
    bed.send_body(with_embed(
        "proj.tasks.remind",
        "c1",
        json!({"callbacks": [next]}),
    ))
    .await;
    bed.send_body(with_embed(
        "proj.tasks.remind",
        "c2",
        json!({"chord": {"task": "sum"}}),
    ))
    .await;
    bed.deliver().await;

    assert!(seen.lock().unwrap().is_empty(), "neither ran");
    let dead = bed.contents(&bed.queue.config.dead_letter).await;
    let mut reasons: Vec<String> = (dead.iter())
        .filter_map(|m| {
            find_attribute(&m.attributes, DEAD_LETTER_REASON)?
                .text()
                .map(String::from)
        })
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons[0].contains("not run by qhost: it is part of a chord"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("to queue `proj-slow`, and plugin `p` may not send Celery tasks there"),
        "{reasons:?}"
    );
    assert_eq!(bed.depth(JOBS).await.total(), 0, "nothing else was sent");
    bed.close().await;
}
