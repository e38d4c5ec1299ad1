//! Celery messages as kombu's SQS transport writes them, for unit tests (the end-to-end tests
//! send real ones from Celery itself).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

/// Protocol 2 headers as Celery 5 writes them for task `task` with id `id`.
pub fn v2_headers(task: &str, id: &str) -> Value {
    json!({
        "lang": "py", "task": task, "id": id, "shadow": null, "eta": null, "expires": null,
        "group": null, "group_index": null, "retries": 0, "timelimit": [null, null],
        "root_id": id, "parent_id": null, "argsrepr": "(1,)", "kwargsrepr": "{}",
        "origin": "gen1@host", "ignore_result": false,
    })
}

/// An envelope as kombu's SQS transport sends it: base64 of the JSON, the body base64 inside.
pub fn kombu(headers: Value, content_type: &str, body: &[u8]) -> Vec<u8> {
    STANDARD
        .encode(plain_kombu(headers, content_type, body))
        .into_bytes()
}

/// The same with `sqs_base64_encoding` off.
pub fn plain_kombu(headers: Value, content_type: &str, body: &[u8]) -> Vec<u8> {
    let envelope = json!({
        "body": STANDARD.encode(body),
        "content-encoding": "utf-8",
        "content-type": content_type,
        "headers": headers,
        "properties": {
            "correlation_id": "x", "reply_to": "", "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": "celery"},
            "priority": 0, "body_encoding": "base64", "delivery_tag": "t",
        },
    });
    serde_json::to_vec(&envelope).expect("a JSON value serializes")
}

pub fn v2_json(task: &str, id: &str, args: Value, kwargs: Value) -> Vec<u8> {
    let body =
        json!([args, kwargs, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]);
    kombu(
        v2_headers(task, id),
        "application/json",
        &serde_json::to_vec(&body).expect("a JSON value serializes"),
    )
}
