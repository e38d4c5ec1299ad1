//! Messages shaped as kombu's SQS transport and Celery's protocols write them (the end-to-end
//! tests send real ones from Celery itself).

use std::io::Write as _;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::envelope::MAX_INFLATED;
use super::fixtures::{kombu, plain_kombu, v2_headers, v2_json};
use super::*;

const JSON: &[ContentType] = &[ContentType::Json];
const BOTH: &[ContentType] = &[ContentType::Json, ContentType::Msgpack];

#[test]
fn a_protocol_2_json_task_is_read_from_both_base64_layers() {
    let raw = v2_json(
        "proj.tasks.add",
        "a9e5a73a-1",
        json!([1, 2]),
        json!({"to": "x@example.com"}),
    );
    let task = decode(&raw, JSON).unwrap();
    assert_eq!(task.name, "proj.tasks.add");
    assert_eq!(task.id, "a9e5a73a-1");
    assert_eq!(task.args, json!([1, 2]));
    assert_eq!(task.kwargs, json!({"to": "x@example.com"}));
    assert_eq!((task.retries, task.protocol), (0, 2));
    assert_eq!(task.root_id.as_deref(), Some("a9e5a73a-1"));
    assert_eq!(task.key(), "a9e5a73a-1");
    let seen: Value = serde_json::from_slice(&task.handler_body()).unwrap();
    assert_eq!(seen["task"], "proj.tasks.add");
    assert_eq!(seen["kwargs"]["to"], "x@example.com");
    assert_eq!(task.attributes()[0].text(), Some("proj.tasks.add"));
}

#[test]
fn an_envelope_sent_without_the_outer_base64_reads_the_same() {
    let body = serde_json::to_vec(&json!([[1], {}, {}])).unwrap();
    let plain = plain_kombu(v2_headers("t", "id-1"), "application/json", &body);
    let wrapped = kombu(v2_headers("t", "id-1"), "application/json", &body);
    assert_eq!(
        decode(&plain, JSON).unwrap(),
        decode(&wrapped, JSON).unwrap()
    );
}

#[test]
fn a_protocol_1_body_dict_is_a_task_too() {
    let body = json!({
        "task": "proj.tasks.old", "id": "v1-id", "args": ["a"], "kwargs": {"k": 1},
        "retries": 3, "eta": "2030-01-01T00:00:00+00:00", "expires": null, "utc": true,
        "taskset": "g-1", "timelimit": [30, 20],
    });
    let raw = kombu(
        json!({}),
        "application/json",
        &serde_json::to_vec(&body).unwrap(),
    );
    let task = decode(&raw, JSON).unwrap();
    assert_eq!(
        (task.name.as_str(), task.id.as_str(), task.protocol),
        ("proj.tasks.old", "v1-id", 1)
    );
    assert_eq!(task.group.as_deref(), Some("g-1"));
    assert_eq!(task.time_limit, (Some(30.0), Some(20.0)));
    assert_eq!(
        task.key(),
        "v1-id/retry-3",
        "a republished retry is a run of its own"
    );
}

#[test]
fn kombus_type_tags_reach_the_handler_as_the_strings_kombu_wrote() {
    let args = json!([
        {"__type__": "datetime", "__value__": "2026-12-02T10:00:00+00:00"},
        {"__type__": "decimal", "__value__": "12.50"},
        [{"__type__": "uuid", "__value__": "5f0c…"}],
    ]);
    let raw = v2_json(
        "t",
        "i",
        args,
        json!({"when": {"__type__": "date", "__value__": "2026-12-02"}}),
    );
    let task = decode(&raw, JSON).unwrap();
    assert_eq!(
        task.args,
        json!(["2026-12-02T10:00:00+00:00", "12.50", ["5f0c…"]])
    );
    assert_eq!(task.kwargs, json!({"when": "2026-12-02"}));

    let odd = v2_json(
        "t",
        "i",
        json!([{"__type__": "frozenset", "__value__": [1]}]),
        json!({}),
    );
    let err = decode(&odd, JSON).unwrap_err();
    assert!(err.to_string().contains("`frozenset`"), "{err}");
}

#[test]
fn a_compressed_body_inflates_and_a_bomb_is_refused() {
    let body = serde_json::to_vec(&json!([["big"], {}, {}])).unwrap();
    let mut headers = v2_headers("t", "z");
    headers["compression"] = json!("application/x-gzip");
    let raw = kombu(headers.clone(), "application/json", &zlib(&body));
    assert_eq!(decode(&raw, JSON).unwrap().args, json!(["big"]));

    let bomb = zlib(&vec![b' '; MAX_INFLATED as usize + 1]);
    let err = decode(&kombu(headers.clone(), "application/json", &bomb), JSON).unwrap_err();
    assert!(matches!(err, DecodeError::Compression(_)), "{err}");
    assert!(err.to_string().contains("more than 64 MiB"), "{err}");

    headers["compression"] = json!("application/x-bz2");
    let err = decode(&kombu(headers, "application/json", &body), JSON).unwrap_err();
    assert!(err.to_string().contains("application/x-bz2"), "{err}");
}

fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(bytes).unwrap();
    z.finish().unwrap()
}

#[test]
fn msgpack_is_read_only_where_the_queue_accepts_it() {
    let body = rmp_serde::to_vec(&json!([[7], {"n": "x"}, {}])).unwrap();
    let raw = kombu(v2_headers("t", "m"), "application/x-msgpack", &body);
    assert_eq!(decode(&raw, BOTH).unwrap().args, json!([7]));
    let err = decode(&raw, JSON).unwrap_err();
    assert_eq!(
        err.to_string(),
        "content type `application/x-msgpack` is not accepted on this queue (accept-content = [json])"
    );
}

#[test]
fn pickle_is_refused_unread_whatever_the_queue_accepts() {
    // Not even a valid pickle: it is refused by its content type alone, never parsed.
    let raw = kombu(
        v2_headers("t", "p"),
        "application/x-python-serialize",
        b"\x80\x04cos\nsystem\n",
    );
    assert_eq!(decode(&raw, BOTH).unwrap_err(), DecodeError::Pickle);
}

#[test]
fn what_is_not_a_celery_message_says_what_it_is_not() {
    let cases: [(&[u8], &str); 6] = [
        (b"hello", "neither a kombu JSON envelope nor base64 of one"),
        (b"[1, 2]", "not a kombu envelope"),
        (br#"{"content-type": "application/json"}"#, "no `body`"),
        (br#"{"body": "e30="}"#, "no `content-type`"),
        (
            br#"{"body": "!!", "content-type": "application/json", "properties": {"body_encoding": "base64"}}"#,
            "says base64 but does not decode",
        ),
        (
            br#"{"body": "{}", "content-type": "application/json", "headers": {"task": "t", "id": "i"}}"#,
            "a protocol 2 body is [args, kwargs, embed]",
        ),
    ];
    for (raw, says) in cases {
        let err = decode(raw, JSON).unwrap_err();
        assert!(
            err.to_string().contains(says),
            "{}: {err}",
            String::from_utf8_lossy(raw)
        );
    }
    let no_id = kombu(json!({"task": "t"}), "application/json", b"[[], {}, {}]");
    assert!(
        decode(&no_id, JSON)
            .unwrap_err()
            .to_string()
            .contains("no task id")
    );
    let bad_args = kombu(
        v2_headers("t", "i"),
        "application/json",
        br#"[{"a": 1}, {}, {}]"#,
    );
    assert!(
        decode(&bad_args, JSON)
            .unwrap_err()
            .to_string()
            .contains("`args` is a dict")
    );
}

#[test]
fn eta_and_expires_say_when_a_task_is_due_and_when_it_is_too_late() {
    let mut headers = v2_headers("t", "e");
    headers["eta"] = json!("2030-01-01T00:00:10.500000+00:00");
    headers["expires"] = json!("2030-01-01T01:00:00");
    let raw = kombu(headers, "application/json", b"[[], {}, {}]");
    let task = decode(&raw, JSON).unwrap();
    let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000 + s);
    assert_eq!(task.due_in(at(0)), Some(Duration::from_millis(10_500)));
    assert_eq!(task.due_in(at(11)), None);
    assert!(!task.expired(at(3_599)), "an offset-less time is UTC");
    assert!(task.expired(at(3_600)));

    // The same instant written with another offset, or as Zulu time.
    for eta in ["2030-01-01T02:00:10.5+02:00", "2030-01-01T00:00:10.500Z"] {
        let mut headers = v2_headers("t", "e");
        headers["eta"] = json!(eta);
        let raw = kombu(headers, "application/json", b"[[], {}, {}]");
        let task = decode(&raw, JSON).unwrap();
        assert_eq!(
            task.due_in(at(0)),
            Some(Duration::from_millis(10_500)),
            "{eta}"
        );
    }

    let mut headers = v2_headers("t", "e");
    headers["eta"] = json!("next tuesday");
    let raw = kombu(headers, "application/json", b"[[], {}, {}]");
    assert!(
        decode(&raw, JSON)
            .unwrap_err()
            .to_string()
            .contains("`eta` `next tuesday`")
    );
}
