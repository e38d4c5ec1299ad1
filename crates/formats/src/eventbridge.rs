//! EventBridge events (`format = "eventbridge"`): what a rule with an SQS target delivers when
//! the target passes the matched event (no input path or transformer: a transformed event is
//! the body itself, which qhost's own format reads).
//!
//! The event is a JSON object with `version`, `id`, `detail-type`, `source`, `account`, `time`,
//! `region`, `resources` and `detail`. The handler gets `detail` (as JSON) as its body, and the
//! rest as `eventbridge-*` attributes (`resources` as its JSON text), then the SQS message's own.
//! The key's input is the event's `id`, which EventBridge keeps when it retries a delivery. The
//! route is the `detail-type`, then the `source`: a queue can route one kind of event apart
//! from the rest of its source.

use serde_json::Value;

use crate::push_text;
use crate::{Format, KeyBasis, Route, Run, Unreadable, View};
use qhost_message::{Attribute, Received};

/// The EventBridge format.
#[derive(Debug)]
pub(crate) struct EventBridge;

/// The event's fields that become attributes, besides `resources`.
const FIELDS: [&str; 7] = [
    "id",
    "source",
    "detail-type",
    "account",
    "time",
    "region",
    "version",
];

impl Format for EventBridge {
    fn read(
        &self,
        _: &Received,
        body: &[u8],
        attributes: &[Attribute],
    ) -> Result<Vec<Run>, Unreadable> {
        let refused = |why: String| format!("not an EventBridge event: {why}");
        let event: Value = serde_json::from_slice(body).map_err(|e| refused(e.to_string()))?;
        let text = |field: &str| event.get(field).and_then(Value::as_str);
        let required = |field: &'static str| {
            text(field)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| refused(format!("no `{field}`")))
        };
        let (id, detail_type, source) = (
            required("id")?,
            required("detail-type")?,
            required("source")?,
        );
        let detail = event
            .get("detail")
            .filter(|d| d.is_object())
            .ok_or_else(|| refused("no `detail` object".into()))?;
        let mut view_attributes = Vec::with_capacity(FIELDS.len() + 1 + attributes.len());
        for field in FIELDS {
            push_text(
                &mut view_attributes,
                &format!("eventbridge-{field}"),
                text(field),
            );
        }
        if let Some(resources) = event.get("resources").filter(|r| r.is_array()) {
            view_attributes.push(Attribute::string(
                "eventbridge-resources",
                resources.to_string(),
            ));
        }
        view_attributes.extend(attributes.iter().cloned());
        let route = Route::Named {
            names: vec![detail_type.to_string(), source.to_string()],
            noun: "detail-type",
            table: "routes",
        };
        let view = View {
            body: detail.to_string().into_bytes(),
            attributes: view_attributes,
        };
        Ok(vec![Run::plain(
            route,
            KeyBasis::Id(id.to_string()),
            Some(view),
        )])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{attribute_text, received};

    /// An event as EventBridge sends it to an SQS target (docs.aws.amazon.com, "Amazon
    /// EventBridge events").
    fn event() -> Value {
        serde_json::json!({
            "version": "0",
            "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
            "detail-type": "Order Placed",
            "source": "com.example.orders",
            "account": "111122223333",
            "time": "2026-12-01T09:00:00Z",
            "region": "us-east-1",
            "resources": ["arn:aws:example:us-east-1:111122223333:order/7"],
            "detail": {"order": 7, "customer": "acme"}
        })
    }

    #[test]
    fn the_handler_gets_the_detail_keyed_by_the_event_id_routed_by_detail_type_then_source() {
        let body = event().to_string();
        let runs = EventBridge
            .read(&received(&body), body.as_bytes(), &[])
            .unwrap();
        let run = &runs[0];
        assert_eq!(
            run.key,
            KeyBasis::Id("6a7e8feb-b491-4cf7-a9f1-bf3703467718".into())
        );
        let names = vec!["Order Placed".to_string(), "com.example.orders".to_string()];
        assert_eq!(
            run.route,
            Route::Named {
                names,
                noun: "detail-type",
                table: "routes"
            }
        );
        let view = run.view.as_ref().unwrap();
        let detail: Value = serde_json::from_slice(&view.body).unwrap();
        assert_eq!(detail, serde_json::json!({"order": 7, "customer": "acme"}));
        let text = |name| attribute_text(&view.attributes, name);
        assert_eq!(
            text("eventbridge-source").as_deref(),
            Some("com.example.orders")
        );
        assert_eq!(text("eventbridge-account").as_deref(), Some("111122223333"));
        assert_eq!(
            text("eventbridge-resources").as_deref(),
            Some("[\"arn:aws:example:us-east-1:111122223333:order/7\"]")
        );
    }

    #[test]
    fn what_is_not_an_event_is_refused_with_why() {
        let mut no_detail = event();
        no_detail.as_object_mut().unwrap().remove("detail");
        let mut no_id = event();
        no_id["id"] = Value::String(String::new());
        let cases = [
            ("[1, 2]".to_string(), "not an EventBridge event: no `id`"),
            ("nope".to_string(), "not an EventBridge event: expected"),
            (no_detail.to_string(), "no `detail` object"),
            (no_id.to_string(), "no `id`"),
        ];
        for (body, says) in cases {
            let refused = EventBridge
                .read(&received(&body), body.as_bytes(), &[])
                .unwrap_err()
                .to_string();
            assert!(refused.contains(says), "{body}: {refused}");
        }
    }
}
