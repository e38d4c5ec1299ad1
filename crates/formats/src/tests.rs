//! What the formats' tests share, and what holds across formats.

use qhost_message::{Attribute, Received, find_attribute};

/// A message received with `body`.
pub(crate) fn received(body: &str) -> Received {
    Received {
        id: "sqs-id".into(),
        handle: "r".into(),
        queue: "q".into(),
        body: body.as_bytes().to_vec(),
        attributes: Vec::new(),
        delivery_count: 1,
        sent_at_ms: 0,
        group_id: None,
        malformed: None,
    }
}

/// The text of attribute `name`.
pub(crate) fn attribute_text(attributes: &[Attribute], name: &str) -> Option<String> {
    find_attribute(attributes, name)
        .and_then(Attribute::text)
        .map(str::to_string)
}

/// What a format cannot read comes back as what it is: Celery's decode error as itself (a
/// caller can tell a pickle apart), an envelope's as its reason; either is the text a dead
/// letter carries.
#[test]
fn an_unreadable_message_says_what_it_is_not() {
    use crate::{Formats, MessageFormat, Unreadable};
    use qhost_celery::DecodeError;
    use qhost_celery::fixtures::{kombu, v2_headers};
    let formats = Formats::default();
    let celery = formats.for_queue("c", &MessageFormat::named("celery").unwrap());
    let pickled = kombu(
        v2_headers("t", "id"),
        "application/x-python-serialize",
        b"x",
    );
    let msg = received(&String::from_utf8_lossy(&pickled));
    let error = celery.read(&msg, &msg.body, &[]).unwrap_err();
    assert_eq!(error, Unreadable::Celery(DecodeError::Pickle));
    assert!(error.to_string().contains("(pickle) is refused"), "{error}");
    let sns = formats.for_queue("s", &MessageFormat::Sns);
    let msg = received("{}");
    let error = sns.read(&msg, &msg.body, &[]).unwrap_err();
    assert!(
        matches!(&error, Unreadable::Envelope(why) if why.starts_with("not an SNS notification")),
        "{error:?}"
    );
}

/// A Celery task as RabbitMQ carries it (its headers as attributes, the way the RabbitMQ
/// source writes them, its serializer as the `amqp-content-type` property, the body
/// `[args, kwargs, embed]` bare) reads as the task: routed by name, keyed by id, its list and
/// boolean headers read back.
#[test]
fn a_celery_task_as_amqp_carries_it_reads_as_the_task() {
    use crate::{Formats, KeyBasis, MessageFormat, Route};
    use qhost_message::wire;
    let formats = Formats::default();
    let celery = formats.for_queue("c", &MessageFormat::named("celery").unwrap());
    let mut msg = received(
        r#"[[1], {"month": "2026-12"}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]"#,
    );
    msg.attributes = vec![
        Attribute::string("task", "proj.tasks.echo"),
        Attribute::string("id", "6f1c"),
        Attribute::number("retries", 2),
        Attribute::string("timelimit", "[30,null]"),
        Attribute::string("ignore_result", "true"),
        Attribute::string("lang", "py"),
        Attribute::string(wire::AMQP_CONTENT_TYPE, "application/json"),
        Attribute::string(wire::AMQP_CORRELATION_ID, "6f1c"),
    ];
    let runs = celery.read(&msg, &msg.body, &msg.attributes).unwrap();
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert!(
        matches!(&run.route, Route::Named { names, .. } if names == &["proj.tasks.echo"]),
        "{:?}",
        run.route
    );
    assert!(
        matches!(&run.key, KeyBasis::Fixed(k) if k.contains("6f1c")),
        "{:?}",
        run.key
    );
    assert_eq!(run.time_limit, Some(std::time::Duration::from_secs(30)));
    let view: serde_json::Value = serde_json::from_slice(&run.view.as_ref().unwrap().body).unwrap();
    assert_eq!(
        (view["args"][0].clone(), view["retries"].clone()),
        (1.into(), 2.into())
    );
    // The serializer is the content type property's: pickle is refused unread.
    msg.attributes[6] =
        Attribute::string(wire::AMQP_CONTENT_TYPE, "application/x-python-serialize");
    let refused = celery.read(&msg, &msg.body, &msg.attributes).unwrap_err();
    assert!(
        refused.to_string().contains("(pickle) is refused"),
        "{refused}"
    );
}
