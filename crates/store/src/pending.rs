//! What a completed record keeps until the host that completed it confirms it carried out: the
//! outbox to send, and the run's result value to write where a caller waits on it (a Celery
//! task's result record). Both are effects of the run that must happen once it is complete and
//! never for a run that was not, so both are committed with the completion, as one stored text,
//! and forgotten together by `outbox_sent`. A delivery that finds them still pending carries
//! them out again: the outbox under the same keys, the result record by a write that never
//! replaces a `SUCCESS`.
//!
//! On a Redis Cluster the run's state writes wait here too, with the lease's fencing token,
//! until they are applied to their buckets (see the `kv` module's docs).
//!
//! The text is the outbox's JSON list when there is no result value or state (what records
//! written before result values existed hold, so they still read),
//! `{"outbox": [...], "result": "...", "state": {...}}` when there is one, and empty when
//! nothing is pending.

use serde::{Deserialize, Serialize};

use crate::commit::StateCommit;
use qhost_message::Outgoing;

/// State writes waiting to be applied, with the fencing token of the run that made them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingState {
    /// The lease's fencing token: with the record's key, what marks them applied.
    pub token: u64,
    /// The writes.
    #[serde(flatten)]
    pub commit: StateCommit,
}

/// The stored forms.
#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Outbox(Vec<Outgoing>),
    WithResult {
        outbox: Vec<Outgoing>,
        result: Option<String>,
        #[serde(default)]
        state: Option<PendingState>,
    },
}

#[derive(Serialize)]
struct WithResult<'a> {
    outbox: &'a [Outgoing],
    result: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'a PendingState>,
}

/// The text that stores `outbox` and `result`; empty when there is neither.
pub fn encode(outbox: &[Outgoing], result: Option<&str>) -> String {
    encode_with_state(outbox, result, None)
}

/// The text that stores `outbox`, `result` and `state`; empty when there is none of them.
pub fn encode_with_state(
    outbox: &[Outgoing],
    result: Option<&str>,
    state: Option<&PendingState>,
) -> String {
    // Outgoing is plain data (strings, bytes, numbers): serialising it cannot fail.
    if result.is_none() && state.is_none() {
        if outbox.is_empty() {
            return String::new();
        }
        return serde_json::to_string(outbox).unwrap_or_default();
    }
    let stored = WithResult {
        outbox,
        result,
        state,
    };
    serde_json::to_string(&stored).unwrap_or_default()
}

/// The outbox and result value stored as `text`.
pub fn decode(text: &str) -> Result<(Vec<Outgoing>, Option<String>), serde_json::Error> {
    decode_with_state(text).map(|(outbox, result, _)| (outbox, result))
}

/// What a record keeps pending: its outbox, result value and state writes.
pub type PendingParts = (Vec<Outgoing>, Option<String>, Option<PendingState>);

/// The outbox, result value and state writes stored as `text`.
pub fn decode_with_state(text: &str) -> Result<PendingParts, serde_json::Error> {
    if text.is_empty() {
        return Ok((Vec::new(), None, None));
    }
    Ok(match serde_json::from_str(text)? {
        Stored::Outbox(outbox) => (outbox, None, None),
        Stored::WithResult {
            outbox,
            result,
            state,
        } => (outbox, result, state),
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

    #[test]
    fn state_waits_beside_the_outbox() {
        let outbox = vec![Outgoing::new("next", "hello")];
        let state = PendingState {
            token: 7,
            commit: StateCommit {
                buckets: vec![crate::commit::BucketCommit {
                    bucket: "qhost:kv:{p/b}".into(),
                    ttl_ms: 0,
                    reads: vec![],
                    writes: vec![("k".into(), crate::commit::Op::Add { delta: 1 })],
                }],
            },
        };
        let text = encode_with_state(&outbox, None, Some(&state));
        assert_eq!(
            decode_with_state(&text).unwrap(),
            (outbox.clone(), None, Some(state))
        );
        assert_eq!(decode(&text).unwrap(), (outbox, None));
    }
}
