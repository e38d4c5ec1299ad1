//! SNS notifications (`format = "sns"`): what an SNS topic delivers to an SQS subscription
//! without raw message delivery. (With raw delivery there is no envelope: the body is the
//! published message itself, and qhost's own format reads it.)
//!
//! The envelope is a JSON object whose `Type` is `Notification`, with `MessageId`, `TopicArn`,
//! `Message`, `Timestamp`, an optional `Subject`, `MessageAttributes` as `{Type, Value}`, and on
//! a FIFO topic `SequenceNumber` and `MessageGroupId`. The handler gets `Message` as its body,
//! and as its attributes the envelope's fields (`sns-message-id`, `sns-topic-arn`,
//! `sns-subject`, `sns-timestamp`, `sns-sequence-number`, `sns-message-group-id`), then the
//! published message attributes (`String.Array` as its JSON text, `Binary` decoded), then the
//! SQS message's own. The key's input is SNS's `MessageId`, which SNS keeps when it retries a
//! delivery; the route is the topic's ARN, then its name.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;

use crate::push_text;
use crate::{Format, KeyBasis, Route, Run, Unreadable, View};
use qhost_message::{Attribute, AttributeValue, Received};

/// The SNS format.
#[derive(Debug)]
pub(crate) struct Sns;

impl Format for Sns {
    fn read(
        &self,
        _: &Received,
        body: &[u8],
        attributes: &[Attribute],
    ) -> Result<Vec<Run>, Unreadable> {
        let note = Notification::parse(body)?;
        let route = Route::Named {
            names: vec![note.topic_arn.clone(), note.topic_name().to_string()],
            noun: "topic",
            table: "routes",
        };
        let key = KeyBasis::Id(note.message_id.clone());
        let mut view_attributes = note.attributes()?;
        view_attributes.extend(attributes.iter().cloned());
        let view = View {
            body: note.message.into_bytes(),
            attributes: view_attributes,
        };
        Ok(vec![Run::plain(route, key, Some(view))])
    }
}

/// An SNS notification envelope.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Notification {
    #[serde(rename = "Type")]
    kind: String,
    message_id: String,
    topic_arn: String,
    /// The published message.
    pub(crate) message: String,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    message_attributes: serde_json::Map<String, Value>,
    #[serde(default)]
    sequence_number: Option<String>,
    #[serde(default)]
    message_group_id: Option<String>,
}

impl Notification {
    /// The notification `body` holds, or why it holds none.
    pub(crate) fn parse(body: &[u8]) -> Result<Notification, String> {
        let note: Notification =
            serde_json::from_slice(body).map_err(|e| format!("not an SNS notification: {e}"))?;
        if note.kind != "Notification" {
            return Err(format!(
                "not an SNS notification: its Type is `{}`, not `Notification`",
                note.kind
            ));
        }
        if note.message_id.is_empty() || note.topic_arn.is_empty() {
            return Err("not an SNS notification: an empty MessageId or TopicArn".into());
        }
        Ok(note)
    }

    /// Whether `body` looks like an SNS notification (a JSON object of `Type` `Notification`),
    /// for a format that reads its message bare or inside one.
    pub(crate) fn is_one(value: &Value) -> bool {
        value.get("Type").and_then(Value::as_str) == Some("Notification")
            && value.get("TopicArn").is_some()
    }

    /// The topic's name: the ARN's last part.
    fn topic_name(&self) -> &str {
        self.topic_arn.rsplit(':').next().unwrap_or(&self.topic_arn)
    }

    /// The envelope's fields and the published message attributes, as the handler gets them.
    fn attributes(&self) -> Result<Vec<Attribute>, String> {
        let mut out = Vec::with_capacity(6 + self.message_attributes.len());
        out.push(Attribute::string("sns-message-id", &self.message_id));
        out.push(Attribute::string("sns-topic-arn", &self.topic_arn));
        push_text(&mut out, "sns-subject", self.subject.as_deref());
        push_text(&mut out, "sns-timestamp", self.timestamp.as_deref());
        push_text(
            &mut out,
            "sns-sequence-number",
            self.sequence_number.as_deref(),
        );
        push_text(
            &mut out,
            "sns-message-group-id",
            self.message_group_id.as_deref(),
        );
        for (name, typed) in &self.message_attributes {
            out.push(attribute(name, typed)?);
        }
        Ok(out)
    }
}

/// One published message attribute, `{"Type": …, "Value": …}`.
fn attribute(name: &str, typed: &Value) -> Result<Attribute, String> {
    let field = |f: &str| typed.get(f).and_then(Value::as_str);
    let bad = |why: &str| format!("not an SNS notification: message attribute `{name}` {why}");
    let (Some(kind), Some(value)) = (field("Type"), field("Value")) else {
        return Err(bad("has no string Type and Value"));
    };
    let value = match kind.split('.').next().unwrap_or(kind) {
        "String" => AttributeValue::String(value.to_string()),
        "Number" => AttributeValue::Number(value.to_string()),
        "Binary" => AttributeValue::Binary(
            (base64::engine::general_purpose::STANDARD.decode(value))
                .map_err(|_| bad("is Binary but its Value is not base64"))?,
        ),
        other => return Err(bad(&format!("has a Type SNS does not send (`{other}`)"))),
    };
    Ok(Attribute {
        name: name.to_string(),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{attribute_text, received};

    /// A notification as SNS delivers it to SQS (docs.aws.amazon.com, "Amazon SNS message and
    /// JSON formats"), with one attribute of each type.
    pub(crate) fn notification(message: &str) -> String {
        serde_json::json!({
            "Type": "Notification",
            "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
            "TopicArn": "arn:aws:sns:us-west-2:123456789012:orders",
            "Subject": "a subject",
            "Message": message,
            "Timestamp": "2026-12-01T09:00:00.000Z",
            "SignatureVersion": "1",
            "Signature": "EXAMPLE",
            "SigningCertURL": "https://sns.us-west-2.amazonaws.com/cert.pem",
            "UnsubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe",
            "MessageAttributes": {
                "tenant": {"Type": "String", "Value": "acme"},
                "amount": {"Type": "Number", "Value": "12.5"},
                "blob": {"Type": "Binary", "Value": "AAEC"},
                "tags": {"Type": "String.Array", "Value": "[\"a\",\"b\"]"}
            }
        })
        .to_string()
    }

    #[test]
    fn the_handler_gets_the_message_and_its_attributes_keyed_by_sns_s_message_id() {
        let body = notification("{\"order\": 7}");
        let runs = Sns.read(&received(&body), body.as_bytes(), &[]).unwrap();
        assert_eq!(runs.len(), 1);
        let run = &runs[0];
        assert_eq!(
            run.key,
            KeyBasis::Id("22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324".into())
        );
        let names = vec![
            "arn:aws:sns:us-west-2:123456789012:orders".to_string(),
            "orders".to_string(),
        ];
        assert_eq!(
            run.route,
            Route::Named {
                names,
                noun: "topic",
                table: "routes"
            }
        );
        let view = run.view.as_ref().unwrap();
        assert_eq!(view.body, b"{\"order\": 7}");
        let text = |name| attribute_text(&view.attributes, name);
        assert_eq!(
            text("sns-topic-arn").as_deref(),
            Some("arn:aws:sns:us-west-2:123456789012:orders")
        );
        assert_eq!(text("sns-subject").as_deref(), Some("a subject"));
        assert_eq!(text("tenant").as_deref(), Some("acme"));
        assert_eq!(text("tags").as_deref(), Some("[\"a\",\"b\"]"));
        let amount = view.attributes.iter().find(|a| a.name == "amount").unwrap();
        assert_eq!(amount.value, AttributeValue::Number("12.5".into()));
        let blob = view.attributes.iter().find(|a| a.name == "blob").unwrap();
        assert_eq!(blob.value, AttributeValue::Binary(vec![0, 1, 2]));
    }

    #[test]
    fn what_is_not_a_notification_is_refused_with_why() {
        let cases = [
            (
                "hello".to_string(),
                "not an SNS notification: expected value",
            ),
            (
                notification("x").replace("\"Notification\"", "\"SubscriptionConfirmation\""),
                "its Type is `SubscriptionConfirmation`",
            ),
            (
                notification("x").replace("\"AAEC\"", "\"*not base64*\""),
                "message attribute `blob` is Binary but its Value is not base64",
            ),
            (
                notification("x").replace("\"Number\"", "\"Decimal\""),
                "has a Type SNS does not send (`Decimal`)",
            ),
            ("{\"Type\": \"Notification\"}".to_string(), "missing field"),
        ];
        for (body, says) in cases {
            let refused = Sns
                .read(&received(&body), body.as_bytes(), &[])
                .unwrap_err()
                .to_string();
            assert!(refused.contains(says), "{body}: {refused}");
        }
    }
}
