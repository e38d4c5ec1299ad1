//! Conveniences on the message a handler receives.

use crate::{Attribute, AttributeValue, Message, Outcome};

impl Message {
    /// The attribute with this name, if the message has one.
    pub fn attribute(&self, name: &str) -> Option<&AttributeValue> {
        self.attributes
            .iter()
            .find(|a| a.name == name)
            .map(|a| &a.value)
    }

    /// The text of a string or number attribute with this name.
    pub fn text_attribute(&self, name: &str) -> Option<&str> {
        match self.attribute(name)? {
            AttributeValue::String(s) | AttributeValue::Number(s) => Some(s),
            AttributeValue::Binary(_) => None,
        }
    }

    /// The body as UTF-8 text.
    pub fn body_str(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.body)
    }
}

impl Attribute {
    /// A string attribute.
    pub fn string(name: impl Into<String>, value: impl Into<String>) -> Self {
        Attribute {
            name: name.into(),
            value: AttributeValue::String(value.into()),
        }
    }

    /// A number attribute; SQS carries numbers as decimal text.
    pub fn number(name: impl Into<String>, value: impl ToString) -> Self {
        Attribute {
            name: name.into(),
            value: AttributeValue::Number(value.to_string()),
        }
    }
}

impl Outcome {
    /// Reject with a reason built from anything displayable (an error, say).
    pub fn reject(reason: impl std::fmt::Display) -> Self {
        Outcome::Reject(reason.to_string())
    }
}
