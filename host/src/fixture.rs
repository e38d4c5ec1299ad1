//! `qhost fixture KIND`: a realistic message of a kind, as its producer sends it to SQS, to
//! paste into a test case (or feed to `qhost inspect`): a plain SQS message, an SNS
//! notification, an EventBridge event, an S3 event notification, a Celery task (kombu's SQS
//! envelope), or an Amazon SQS Extended Client pointer. Ids and times are fresh each time; the
//! shapes are the producers' own, field for field.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::message::Attribute;

/// The kinds `qhost fixture` makes.
pub(crate) const FIXTURE_KINDS: [&str; 6] = [
    "sqs",
    "sns",
    "eventbridge",
    "s3",
    "celery",
    "extended-client",
];

/// A message as its producer sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fixture {
    /// The `format` of a queue that reads it (`qhost`, `sns`, …).
    pub format: &'static str,
    /// The body.
    pub body: String,
    /// Its message attributes.
    pub attributes: Vec<Attribute>,
    /// What to know before pasting it.
    pub note: Option<&'static str>,
    /// For a Celery task, the task itself (`{task, args, kwargs}`): what a test file writes as
    /// `celery-task` instead of kombu's base64 envelope.
    pub celery_task: Option<Value>,
}

/// The formats a body can be wrapped in as its producer delivers it (`qhost send --format`).
pub(crate) const WRAP_FORMATS: [&str; 4] = ["sns", "eventbridge", "s3", "celery"];

/// `body` as a producer of `format` delivers it to `queue`: an SNS notification whose
/// `Message` is the body, an EventBridge event whose `detail` is it (JSON), an S3 event
/// notification for the object key it names, or the Celery task it describes (`{"task",
/// "args", "kwargs"}`), sent to `queue` as Celery sends one.
pub fn wrap_as(format: &str, body: &str, queue: &str) -> Result<Fixture, String> {
    if !WRAP_FORMATS.contains(&format) {
        return Err(format!(
            "--format `{format}`: a body can be sent as {} delivers it (or as it is, without --format)",
            WRAP_FORMATS.join(", ")
        ));
    }
    made(format, Some(body), queue)
}

/// A `kind` message carrying `body` (what the handler is to get; a default when `None`).
pub fn fixture(kind: &str, body: Option<&str>) -> Result<Fixture, String> {
    made(kind, body, "celery")
}

/// A `kind` message carrying `body`, sent to `queue` (what a Celery task's routing names).
fn made(kind: &str, body: Option<&str>, queue: &str) -> Result<Fixture, String> {
    let id = || uuid::Uuid::new_v4().to_string();
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Millisecond)
        .unwrap_or_default();
    let time = now.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let json_body = |default: Value| -> Result<Value, String> {
        match body {
            None => Ok(default),
            Some(text) => serde_json::from_str(text)
                .map_err(|e| format!("--body: the {kind} fixture's body is JSON: {e}")),
        }
    };
    let plain = |format| Fixture {
        format,
        body: String::new(),
        attributes: Vec::new(),
        note: None,
        celery_task: None,
    };
    let fixture = match kind {
        "sqs" => Fixture {
            body: body
                .unwrap_or(r#"{"order-id":"o-1001","total":"42.50"}"#)
                .to_string(),
            attributes: vec![Attribute::string("content-type", "application/json")],
            ..plain("qhost")
        },
        "sns" => Fixture {
            body: sns(&id(), &time, body.unwrap_or(r#"{"order-id":"o-1001"}"#)).to_string(),
            ..plain("sns")
        },
        "eventbridge" => {
            let detail = json_body(json!({"order-id": "o-1001", "total": "42.50"}))?;
            Fixture {
                body: eventbridge(&id(), &time, detail).to_string(),
                ..plain("eventbridge")
            }
        }
        "s3" => Fixture {
            body: s3(&time, body.unwrap_or("uploads/report.csv")).to_string(),
            note: Some("--body is the object's key"),
            ..plain("s3")
        },
        "celery" => {
            let task = json_body(json!({
                "task": "proj.tasks.send_reminder",
                "args": [],
                "kwargs": {"email": "alice@example.com", "month": "2026-12"},
            }))?;
            let kombu = crate::message::rules::Envelope::Kombu;
            let body =
                crate::celery::send::task_message(task.to_string().as_bytes(), &id(), queue, kombu)
                    .map_err(|e| format!("--body: {e}"))?
                    .body;
            Fixture {
                body: String::from_utf8_lossy(&body).into_owned(),
                note: Some(
                    "the test runner sends celery-task as Celery does (kombu's SQS envelope, base64); --body is the task: {\"task\", \"args\", \"kwargs\"}",
                ),
                celery_task: Some(task),
                ..plain("celery")
            }
        }
        "extended-client" => Fixture {
            body: json!([
                "software.amazon.payloadoffloading.PayloadS3Pointer",
                {"s3BucketName": "large-payloads", "s3Key": id()}
            ])
            .to_string(),
            attributes: vec![Attribute::number("ExtendedPayloadSize", 300_000)],
            note: Some(
                "the host fetches the payload before the handler runs (from an allowed bucket); \
                 a test case gives the payload itself, as body or body-file",
            ),
            ..plain("qhost")
        },
        other => {
            return Err(format!(
                "`{other}` is not a fixture kind: {}",
                FIXTURE_KINDS.join(", ")
            ));
        }
    };
    Ok(fixture)
}

/// An SNS notification as SNS delivers it to a subscribed queue (raw delivery off).
fn sns(id: &str, time: &str, message: &str) -> Value {
    let topic = "arn:aws:sns:us-east-1:123456789012:orders";
    json!({
        "Type": "Notification",
        "MessageId": id,
        "TopicArn": topic,
        "Subject": null,
        "Message": message,
        "Timestamp": time,
        "SignatureVersion": "1",
        "Signature": STANDARD.encode(id.repeat(4)),
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem",
        "UnsubscribeURL": format!("https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn={topic}:{id}"),
        "MessageAttributes": {
            "tenant": {"Type": "String", "Value": "acme"}
        }
    })
}

/// An EventBridge event as a rule delivers it to a queue target.
fn eventbridge(id: &str, time: &str, detail: Value) -> Value {
    json!({
        "version": "0",
        "id": id,
        "detail-type": "OrderPlaced",
        "source": "com.example.orders",
        "account": "123456789012",
        "time": format!("{}Z", &time[..19]),
        "region": "us-east-1",
        "resources": [],
        "detail": detail,
    })
}

/// An S3 event notification for one object created with `key`.
fn s3(time: &str, key: &str) -> Value {
    json!({
        "Records": [{
            "eventVersion": "2.1",
            "eventSource": "aws:s3",
            "awsRegion": "us-east-1",
            "eventTime": time,
            "eventName": "ObjectCreated:Put",
            "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
            "requestParameters": {"sourceIPAddress": "198.51.100.7"},
            "responseElements": {
                "x-amz-request-id": "C3D13FE58DE4C810",
                "x-amz-id-2": "FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"
            },
            "s3": {
                "s3SchemaVersion": "1.0",
                "configurationId": "uploads",
                "bucket": {
                    "name": "example-uploads",
                    "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                    "arn": "arn:aws:s3:::example-uploads"
                },
                "object": {
                    "key": key,
                    "size": 1024,
                    "eTag": "d41d8cd98f00b204e9800998ecf8427e",
                    "sequencer": "0055AED6DCD90281E5"
                }
            }
        }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, MessageFormat};

    /// Each fixture reads as its format says, through the format seam the host reads with.
    #[test]
    fn every_fixture_is_read_by_its_format() {
        let config = Config::default();
        for kind in FIXTURE_KINDS {
            let fixture = fixture(kind, None).unwrap();
            let format = match fixture.format {
                "sns" => MessageFormat::Sns,
                "eventbridge" => MessageFormat::EventBridge,
                "s3" => MessageFormat::S3,
                "celery" => MessageFormat::Celery {
                    accept: vec![crate::celery::ContentType::Json],
                },
                _ => MessageFormat::Qhost {
                    route_attribute: None,
                },
            };
            let mut msg = crate::format::tests::received(&fixture.body);
            msg.attributes = fixture.attributes.clone();
            let read = crate::format::inspect::inspect(&config, &msg, None, Some(&format));
            let read = read.unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert_eq!(read.runs.len(), 1, "{kind}");
        }
        let celery = fixture("celery", Some(r#"{"task": "t.x", "args": [1]}"#)).unwrap();
        assert!(!celery.body.contains('{'), "kombu's envelope is base64");
        assert!(
            fixture("sns", None)
                .unwrap()
                .body
                .contains("\"Type\":\"Notification\"")
        );
        assert_eq!(
            celery.celery_task,
            Some(serde_json::json!({"task": "t.x", "args": [1]}))
        );
        assert_eq!(
            fixture("kafka", None).unwrap_err(),
            "`kafka` is not a fixture kind: sqs, sns, eventbridge, s3, celery, extended-client"
        );
    }

    /// A wrapped body is read back as the body it wraps, and a Celery task names its queue.
    #[test]
    fn a_wrapped_body_reads_back_as_itself() {
        let sns = wrap_as("sns", "hello", "orders").unwrap();
        let notification: Value = serde_json::from_str(&sns.body).unwrap();
        assert_eq!(notification["Message"], "hello");
        let task = r#"{"task": "proj.add", "args": [2, 3], "kwargs": {}}"#;
        let celery = wrap_as("celery", task, "work").unwrap();
        let envelope = STANDARD.decode(&celery.body).unwrap();
        let envelope: Value = serde_json::from_slice(&envelope).unwrap();
        assert_eq!(
            envelope["properties"]["delivery_info"]["routing_key"],
            "work"
        );
        assert_eq!(envelope["headers"]["task"], "proj.add");
        let not = wrap_as("extended-client", "x", "q").unwrap_err();
        assert!(not.contains("sns, eventbridge, s3, celery"), "{not}");
        assert!(wrap_as("eventbridge", "not json", "q").is_err());
    }
}
