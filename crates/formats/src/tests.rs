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
