//! The request and answer bodies of the calls on SQS's hot path, in the AWS JSON 1.0 protocol
//! SQS speaks: the members qhost sends and reads, named as SQS names them. Members qhost does
//! not read (`MD5OfBody`, a send's sequence number) are skipped by serde; absent ones default.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// `ReceiveMessage`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ReceiveMessage<'a> {
    pub(crate) queue_url: &'a str,
    pub(crate) max_number_of_messages: u32,
    pub(crate) visibility_timeout: u64,
    pub(crate) wait_time_seconds: u64,
    pub(crate) message_attribute_names: [&'static str; 1],
    pub(crate) message_system_attribute_names: [&'static str; 3],
}

/// `ReceiveMessage`'s answer.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct Received {
    pub(crate) messages: Vec<Message>,
}

/// A message as SQS hands it out.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct Message {
    pub(crate) message_id: Option<String>,
    pub(crate) receipt_handle: Option<String>,
    pub(crate) body: Option<String>,
    /// System attributes (`ApproximateReceiveCount`, `SentTimestamp`, `MessageGroupId`).
    pub(crate) attributes: HashMap<String, String>,
    pub(crate) message_attributes: HashMap<String, AttributeValue>,
}

/// A message attribute's value. Binary values travel base64-encoded in JSON.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct AttributeValue {
    pub(crate) data_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) string_value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) binary_value: Option<String>,
}

/// A batch call's request: `DeleteMessageBatch`, `ChangeMessageVisibilityBatch` or
/// `SendMessageBatch`, by its entries' type.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Batch<'a, E> {
    pub(crate) queue_url: &'a str,
    pub(crate) entries: Vec<E>,
}

/// An entry of `DeleteMessageBatch`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct DeleteEntry<'a> {
    pub(crate) id: String,
    pub(crate) receipt_handle: &'a str,
}

/// An entry of `ChangeMessageVisibilityBatch`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct VisibilityEntry<'a> {
    pub(crate) id: String,
    pub(crate) receipt_handle: &'a str,
    pub(crate) visibility_timeout: u64,
}

/// `ChangeMessageVisibility` (one message).
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ChangeVisibility<'a> {
    pub(crate) queue_url: &'a str,
    pub(crate) receipt_handle: &'a str,
    pub(crate) visibility_timeout: u64,
}

/// An entry of `SendMessageBatch`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct SendEntry {
    pub(crate) id: String,
    pub(crate) message_body: String,
    pub(crate) delay_seconds: u32,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub(crate) message_attributes: HashMap<String, AttributeValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message_group_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message_deduplication_id: Option<String>,
}

/// A batch call's answer: each entry succeeded or failed on its own.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct BatchAnswer {
    pub(crate) successful: Vec<Succeeded>,
    pub(crate) failed: Vec<EntryFailure>,
}

/// An entry that succeeded (a send's carries the message's new id).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct Succeeded {
    pub(crate) id: String,
    pub(crate) message_id: Option<String>,
}

/// An entry that failed, and why.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct EntryFailure {
    pub(crate) id: String,
    pub(crate) sender_fault: bool,
    pub(crate) code: String,
    pub(crate) message: Option<String>,
}

/// An answer whose members qhost does not read (`ChangeMessageVisibility`'s is empty).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Empty {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_answer_reads_as_sqs_writes_it() {
        let answer = r#"{"Messages":[{"MessageId":"m1","ReceiptHandle":"r1",
            "MD5OfBody":"x","Body":"hi","Attributes":{"ApproximateReceiveCount":"2",
            "SentTimestamp":"1700000000000"},"MD5OfMessageAttributes":"y",
            "MessageAttributes":{"k":{"StringValue":"v","DataType":"String"},
            "b":{"BinaryValue":"AAE=","DataType":"Binary"}}}]}"#;
        let got: Received = serde_json::from_str(answer).unwrap();
        let m = &got.messages[0];
        assert_eq!(m.message_id.as_deref(), Some("m1"));
        assert_eq!(m.attributes["ApproximateReceiveCount"], "2");
        assert_eq!(m.message_attributes["k"].string_value.as_deref(), Some("v"));
        assert_eq!(
            m.message_attributes["b"].binary_value.as_deref(),
            Some("AAE=")
        );
        let none: Received = serde_json::from_str("{}").unwrap();
        assert!(
            none.messages.is_empty(),
            "an empty receive has no `Messages`"
        );
    }

    #[test]
    fn a_send_entry_leaves_out_what_it_does_not_set() {
        let entry = SendEntry {
            id: "0".into(),
            message_body: "b".into(),
            delay_seconds: 0,
            message_attributes: HashMap::new(),
            message_group_id: None,
            message_deduplication_id: None,
        };
        assert_eq!(
            serde_json::to_string(&entry).unwrap(),
            r#"{"Id":"0","MessageBody":"b","DelaySeconds":0}"#
        );
    }
}
