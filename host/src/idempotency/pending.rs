//! What a completed record keeps until the host that completed it confirms it carried out: the
//! outbox to send, and the run's result value to write where a caller waits on it (a Celery
//! task's result record). Both are effects of the run that must happen once it is complete and
//! never for a run that was not, so both are committed with the completion, as one stored text,
//! and forgotten together by `outbox_sent`. A delivery that finds them still pending carries
//! them out again: the outbox under the same keys, the result record by a write that never
//! replaces a `SUCCESS`.
//!
//! The text is the outbox's JSON list when there is no result value (what records written
//! before result values existed hold, so they still read), `{"outbox": [...], "result": "..."}`
//! when there is one, and empty when nothing is pending.

use serde::{Deserialize, Serialize};

use crate::message::Outgoing;

/// The stored forms.
#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Outbox(Vec<Outgoing>),
    WithResult {
        outbox: Vec<Outgoing>,
        result: Option<String>,
    },
}

#[derive(Serialize)]
struct WithResult<'a> {
    outbox: &'a [Outgoing],
    result: &'a str,
}

/// The text that stores `outbox` and `result`; empty when there is neither.
pub(crate) fn encode(outbox: &[Outgoing], result: Option<&str>) -> String {
    // Outgoing is plain data (strings, bytes, numbers): serialising it cannot fail.
    match result {
        Some(result) => serde_json::to_string(&WithResult { outbox, result }).unwrap_or_default(),
        None if outbox.is_empty() => String::new(),
        None => serde_json::to_string(outbox).unwrap_or_default(),
    }
}

/// The outbox and result value stored as `text`.
pub(crate) fn decode(text: &str) -> Result<(Vec<Outgoing>, Option<String>), serde_json::Error> {
    if text.is_empty() {
        return Ok((Vec::new(), None));
    }
    Ok(match serde_json::from_str(text)? {
        Stored::Outbox(outbox) => (outbox, None),
        Stored::WithResult { outbox, result } => (outbox, result),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outbox_and_a_result_value_come_back_as_they_were_stored() {
        let outbox = vec![Outgoing::new("next", "hello")];
        assert_eq!(encode(&[], None), "");
        assert_eq!(decode("").unwrap(), (vec![], None));
        let plain = encode(&outbox, None);
        assert!(
            plain.starts_with('['),
            "an outbox alone is stored as before: {plain}"
        );
        assert_eq!(decode(&plain).unwrap(), (outbox.clone(), None));
        let both = encode(&outbox, Some(r#"{"sent": 2}"#));
        let value = Some(r#"{"sent": 2}"#.to_string());
        assert_eq!(decode(&both).unwrap(), (outbox, value.clone()));
        assert_eq!(
            decode(&encode(&[], value.as_deref())).unwrap(),
            (vec![], value)
        );
        assert!(decode("{\"outbox\": 3}").is_err());
    }
}
