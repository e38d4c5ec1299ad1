//! S3 event notifications (`format = "s3"`): what a bucket's event notification sends to an
//! SQS queue, bare or inside an SNS notification (a bucket that notifies a topic the queue
//! subscribes to).
//!
//! A notification holds `Records`, each an event on one object: `eventName`, `eventTime`,
//! `awsRegion`, and `s3.bucket.name`, `s3.object.{key, size, eTag, sequencer, versionId}`, the
//! key URL-encoded as in a form. Each record is a run of its own, so a redelivered message
//! runs only the records that had not finished: its key's input is `BUCKET/KEY/SEQUENCER` (S3's
//! sequencer orders the events of one key; where a producer leaves it out, the record's `eTag`
//! stands in, as `BUCKET/KEY/etag:ETAG`). The handler gets the record as JSON, and the object's
//! coordinates as `s3-*` attributes (the key decoded); reading the object is the handler's, with
//! an HTTP grant. The route is the event name, then its kind (`ObjectCreated:*`), then the
//! bucket. S3's `s3:TestEvent`, sent when notifications are set up, holds no record: it is
//! acked without a run.

use serde_json::Value;

use crate::push_text;
use crate::sns::Notification;
use crate::{Format, KeyBasis, Route, Run, Unreadable, View};
use qhost_message::{Attribute, Received};

/// The S3 event format.
#[derive(Debug)]
pub(crate) struct S3;

impl Format for S3 {
    fn read(
        &self,
        _: &Received,
        body: &[u8],
        attributes: &[Attribute],
    ) -> Result<Vec<Run>, Unreadable> {
        let refused = |why: String| format!("not an S3 event notification: {why}");
        let mut value: Value = serde_json::from_slice(body).map_err(|e| refused(e.to_string()))?;
        if Notification::is_one(&value) {
            let note = Notification::parse(body)?;
            value = serde_json::from_str(&note.message)
                .map_err(|e| refused(format!("the SNS notification's Message: {e}")))?;
        }
        if value.get("Event").and_then(Value::as_str) == Some("s3:TestEvent") {
            return Ok(Vec::new());
        }
        let records = (value.get("Records").and_then(Value::as_array))
            .filter(|r| !r.is_empty())
            .ok_or_else(|| refused("no `Records`".into()))?;
        (records.iter().enumerate())
            .map(|(i, record)| {
                run(record, attributes).map_err(|why| refused(format!("record {}: {why}", i + 1)))
            })
            .collect::<Result<_, String>>()
            .map_err(Unreadable::from)
    }
}

/// The run of one record.
fn run(record: &Value, attributes: &[Attribute]) -> Result<Run, String> {
    let text = |path: &str| record.pointer(path).and_then(Value::as_str);
    let required = |path: &'static str| {
        text(path)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| format!("no `{}`", &path[1..].replace('/', ".")))
    };
    let (event, bucket) = (required("/eventName")?, required("/s3/bucket/name")?);
    let key = decoded(required("/s3/object/key")?);
    let version = match (text("/s3/object/sequencer"), text("/s3/object/eTag")) {
        (Some(sequencer), _) if !sequencer.is_empty() => sequencer.to_string(),
        (_, Some(etag)) if !etag.is_empty() => format!("etag:{etag}"),
        _ => return Err("neither `s3.object.sequencer` nor `s3.object.eTag`".into()),
    };
    let mut view_attributes = vec![
        Attribute::string("s3-event-name", event),
        Attribute::string("s3-bucket", bucket),
        Attribute::string("s3-key", &key),
    ];
    if let Some(size) = record.pointer("/s3/object/size").and_then(Value::as_u64) {
        view_attributes.push(Attribute::number("s3-size", size));
    }
    for (name, path) in [
        ("s3-etag", "/s3/object/eTag"),
        ("s3-sequencer", "/s3/object/sequencer"),
        ("s3-version-id", "/s3/object/versionId"),
        ("s3-event-time", "/eventTime"),
        ("s3-region", "/awsRegion"),
    ] {
        push_text(&mut view_attributes, name, text(path));
    }
    view_attributes.extend(attributes.iter().cloned());
    let kind = event.split(':').next().unwrap_or(event);
    let route = Route::Named {
        names: vec![event.to_string(), format!("{kind}:*"), bucket.to_string()],
        noun: "event",
        table: "routes",
    };
    let view = View {
        body: record.to_string().into_bytes(),
        attributes: view_attributes,
    };
    let key = KeyBasis::Id(format!("{bucket}/{key}/{version}"));
    Ok(Run::plain(route, key, Some(view)))
}

/// An object key as S3 writes it in a notification (form-encoded: `+` for a space, `%XX` for a
/// byte), decoded.
fn decoded(key: &str) -> String {
    // The encoded key holds no `&` or `=` (they are `%26` and `%3D`), so it is one name.
    form_urlencoded::parse(key.as_bytes())
        .next()
        .map(|(name, _)| name.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{attribute_text, received};

    /// A record as S3 sends it (docs.aws.amazon.com, "Event message structure").
    fn record(key: &str, sequencer: &str) -> Value {
        serde_json::json!({
            "eventVersion": "2.1",
            "eventSource": "aws:s3",
            "awsRegion": "us-east-1",
            "eventTime": "2026-12-01T09:00:00.000Z",
            "eventName": "ObjectCreated:Put",
            "s3": {
                "s3SchemaVersion": "1.0",
                "configurationId": "uploads",
                "bucket": {"name": "uploads", "arn": "arn:aws:s3:::uploads"},
                "object": {"key": key, "size": 1024, "eTag": "d41d8cd9", "sequencer": sequencer}
            }
        })
    }

    fn keys(runs: &[Run]) -> Vec<String> {
        runs.iter()
            .map(|r| match &r.key {
                KeyBasis::Id(id) => id.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn each_record_is_a_run_keyed_by_bucket_key_and_sequencer() {
        let body = serde_json::json!({"Records": [
            record("photos/a+b%3D1.jpg", "0055AED6DCD90281E5"),
            record("photos/c.jpg", "0055AED6DCD90281E6"),
        ]})
        .to_string();
        let runs = S3.read(&received(&body), body.as_bytes(), &[]).unwrap();
        assert_eq!(
            keys(&runs),
            [
                "uploads/photos/a b=1.jpg/0055AED6DCD90281E5",
                "uploads/photos/c.jpg/0055AED6DCD90281E6"
            ]
        );
        let names = ["ObjectCreated:Put", "ObjectCreated:*", "uploads"].map(String::from);
        assert_eq!(
            runs[0].route,
            Route::Named {
                names: names.to_vec(),
                noun: "event",
                table: "routes"
            }
        );
        let view = runs[0].view.as_ref().unwrap();
        let text = |name| attribute_text(&view.attributes, name);
        assert_eq!(text("s3-key").as_deref(), Some("photos/a b=1.jpg"));
        assert_eq!(text("s3-size").as_deref(), Some("1024"));
        let body: Value = serde_json::from_slice(&view.body).unwrap();
        assert_eq!(
            body["s3"]["object"]["key"], "photos/a+b%3D1.jpg",
            "the record as sent"
        );
    }

    #[test]
    fn a_notification_inside_sns_is_read_the_same_and_a_test_event_holds_no_run() {
        let inner = serde_json::json!({"Records": [record("k", "01")]}).to_string();
        let body = serde_json::json!({
            "Type": "Notification", "MessageId": "m-1",
            "TopicArn": "arn:aws:sns:us-east-1:1:uploads", "Message": inner,
        })
        .to_string();
        let runs = S3.read(&received(&body), body.as_bytes(), &[]).unwrap();
        assert_eq!(keys(&runs), ["uploads/k/01"]);
        let test = r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-12-01T09:00:00.000Z","Bucket":"uploads"}"#;
        assert!(
            S3.read(&received(test), test.as_bytes(), &[])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn without_a_sequencer_the_etag_stands_in_and_without_either_it_is_refused() {
        let mut r = record("k", "");
        let body = serde_json::json!({"Records": [r.clone()]}).to_string();
        let runs = S3.read(&received(&body), body.as_bytes(), &[]).unwrap();
        assert_eq!(keys(&runs), ["uploads/k/etag:d41d8cd9"]);
        r["s3"]["object"].as_object_mut().unwrap().remove("eTag");
        let body = serde_json::json!({"Records": [record("a", "1"), r]}).to_string();
        let refused = S3.read(&received(&body), body.as_bytes(), &[]);
        let refused = refused.unwrap_err().to_string();
        assert!(
            refused.contains("record 2: neither `s3.object.sequencer`"),
            "{refused}"
        );
        for (body, says) in [
            ("{\"Records\": []}", "no `Records`"),
            (
                "{\"Records\": [{\"eventName\": \"x\"}]}",
                "record 1: no `s3.bucket.name`",
            ),
            ("[]", "no `Records`"),
        ] {
            let refused = S3.read(&received(body), body.as_bytes(), &[]);
            let refused = refused.unwrap_err().to_string();
            assert!(refused.contains(says), "{body}: {refused}");
        }
    }
}
