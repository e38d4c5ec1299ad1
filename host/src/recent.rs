//! The dead letters this host sent lately, and the messages it put back to be retried, kept in
//! memory (the last [`PER_QUEUE`] of each queue) for the console and its API: an operator sees what died, why and when without a call
//! to the dead-letter queue per page view. Each host keeps its own; `qhost dlq peek` reads the
//! queue itself. A body is kept as a short preview, and an offloaded one is not fetched: the
//! preview is the pointer.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use serde::Serialize;

use crate::message::{AttributeValue, Received, now_ms};
use crate::payload::pointer::is_pointer;

/// Dead letters kept per queue.
pub(crate) const PER_QUEUE: usize = 20;
/// Bytes of a body kept as its preview.
const PREVIEW_BYTES: usize = 2048;

/// One dead letter, as the console shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct DeadLetter {
    /// The message's id on its queue.
    pub(crate) message_id: String,
    /// The id of its copy in the dead-letter queue (what a redrive of it names).
    pub(crate) dead_letter_id: Option<String>,
    /// The queue it came from.
    pub(crate) queue: String,
    /// The plugin it was routed to.
    pub(crate) plugin: String,
    /// Why it was dead-lettered.
    pub(crate) reason: String,
    /// Handler runs on its key, this one included.
    pub(crate) attempts: u32,
    /// When it was dead-lettered, in milliseconds since the Unix epoch.
    pub(crate) at_ms: u64,
    /// The body's size in bytes, as it arrived.
    pub(crate) size: usize,
    /// Whether the body is a payload pointer (the payload itself is not fetched).
    pub(crate) offloaded: bool,
    /// Its attributes, name and value as text (a binary value as its length).
    pub(crate) attributes: Vec<(String, String)>,
    /// The start of the body, as text (invalid UTF-8 replaced).
    pub(crate) preview: String,
    /// Whether the preview is all of the body.
    pub(crate) whole: bool,
}

impl DeadLetter {
    /// The note for `msg`, dead-lettered now by `plugin` with `reason` after `attempts` (its
    /// copy's id in the dead-letter queue, when the queue gave one, is [`DeadLetter::copied_as`]).
    pub(crate) fn of(msg: &Received, plugin: &str, reason: &str, attempts: u32) -> Self {
        let cut = msg.body.len().min(PREVIEW_BYTES);
        let attributes = (msg.attributes.iter())
            .map(|a| {
                let value = match &a.value {
                    AttributeValue::String(s) | AttributeValue::Number(s) => s.clone(),
                    AttributeValue::Binary(b) => format!("({} bytes)", b.len()),
                };
                (a.name.clone(), value)
            })
            .collect();
        DeadLetter {
            message_id: msg.id.clone(),
            dead_letter_id: None,
            queue: msg.queue.clone(),
            plugin: plugin.to_string(),
            reason: reason.to_string(),
            attempts,
            at_ms: now_ms(),
            size: msg.body.len(),
            offloaded: is_pointer(&msg.attributes),
            attributes,
            preview: String::from_utf8_lossy(&msg.body[..cut]).into_owned(),
            whole: cut == msg.body.len(),
        }
    }

    /// The note with the id of its copy in the dead-letter queue, which a redrive names.
    pub(crate) fn copied_as(self, dead_letter_id: Option<String>) -> Self {
        DeadLetter {
            dead_letter_id,
            ..self
        }
    }
}

/// A message this host put back to be retried: shown until it is due again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Retrying {
    /// The message's id on its queue.
    pub(crate) message_id: String,
    /// The plugin it ran on.
    pub(crate) plugin: String,
    /// The failed attempt (handler runs on its key).
    pub(crate) attempt: u32,
    /// Why it is retried.
    pub(crate) reason: String,
    /// When it is visible again, in milliseconds since the Unix epoch.
    pub(crate) back_at_ms: u64,
}

/// The last dead letters and retries of each queue.
#[derive(Debug, Default)]
pub(crate) struct RecentDeadLetters {
    by_queue: Mutex<BTreeMap<String, VecDeque<DeadLetter>>>,
    retries: Mutex<BTreeMap<String, VecDeque<Retrying>>>,
}

impl RecentDeadLetters {
    /// Keeps `retry` of `queue` until it is due (its earlier retry, if kept, is replaced).
    pub(crate) fn note_retry(&self, queue: &str, retry: Retrying) {
        let mut retries = self.retries.lock().unwrap_or_else(|e| e.into_inner());
        let kept = retries.entry(queue.to_string()).or_default();
        let now = now_ms();
        kept.retain(|r| r.message_id != retry.message_id && r.back_at_ms > now);
        if kept.len() == PER_QUEUE {
            kept.pop_back();
        }
        kept.push_front(retry);
    }

    /// `queue`'s retries not yet due, soonest first.
    pub(crate) fn retrying(&self, queue: &str) -> Vec<Retrying> {
        let retries = self.retries.lock().unwrap_or_else(|e| e.into_inner());
        let now = now_ms();
        let mut due: Vec<Retrying> = (retries.get(queue).into_iter().flatten())
            .filter(|r| r.back_at_ms > now)
            .cloned()
            .collect();
        due.sort_by_key(|r| r.back_at_ms);
        due
    }

    /// Keeps `letter`, forgetting its queue's oldest beyond [`PER_QUEUE`].
    pub(crate) fn note(&self, letter: DeadLetter) {
        let mut by_queue = self.by_queue.lock().unwrap_or_else(|e| e.into_inner());
        let kept = by_queue.entry(letter.queue.clone()).or_default();
        if kept.len() == PER_QUEUE {
            kept.pop_back();
        }
        kept.push_front(letter);
    }

    /// Forgets `queue`'s dead letters whose copies `dead_letter_ids` were redriven.
    pub(crate) fn forget(&self, queue: &str, dead_letter_ids: &[String]) {
        let mut by_queue = self.by_queue.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kept) = by_queue.get_mut(queue) {
            kept.retain(|d| {
                !d.dead_letter_id
                    .as_ref()
                    .is_some_and(|id| dead_letter_ids.contains(id))
            });
        }
    }

    /// `queue`'s, newest first.
    pub(crate) fn of(&self, queue: &str) -> Vec<DeadLetter> {
        let by_queue = self.by_queue.lock().unwrap_or_else(|e| e.into_inner());
        by_queue
            .get(queue)
            .map(|kept| kept.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Attribute;

    fn received(id: &str, body: &[u8]) -> Received {
        Received {
            id: id.into(),
            handle: "r".into(),
            queue: "jobs".into(),
            body: body.to_vec(),
            attributes: vec![
                Attribute::string("kind", "reminder"),
                Attribute {
                    name: "blob".into(),
                    value: AttributeValue::Binary(vec![0; 3]),
                },
            ],
            delivery_count: 1,
            sent_at_ms: 0,
            group_id: None,
            malformed: None,
        }
    }

    #[test]
    fn a_retry_is_shown_until_it_is_due_once_per_message() {
        let recent = RecentDeadLetters::default();
        let retry = |id: &str, in_ms: i64| Retrying {
            message_id: id.into(),
            plugin: "p".into(),
            attempt: 1,
            reason: "asked".into(),
            back_at_ms: (now_ms() as i64 + in_ms) as u64,
        };
        recent.note_retry("jobs", retry("a", 60_000));
        recent.note_retry("jobs", retry("b", 1_000));
        recent.note_retry("jobs", retry("a", 30_000));
        recent.note_retry("jobs", retry("c", -1));
        let ids: Vec<String> = (recent.retrying("jobs").into_iter())
            .map(|r| r.message_id)
            .collect();
        assert_eq!(
            ids,
            ["b", "a"],
            "soonest first, one per message, none past due"
        );
        assert!(recent.retrying("other").is_empty());
    }

    #[test]
    fn each_queue_keeps_its_newest_with_a_preview_of_the_body() {
        let recent = RecentDeadLetters::default();
        for i in 0..PER_QUEUE + 3 {
            let letter = DeadLetter::of(&received(&format!("m{i}"), b"<b>hi</b>"), "p", "no", 2);
            recent.note(letter);
        }
        let kept = recent.of("jobs");
        assert_eq!(kept.len(), PER_QUEUE);
        assert_eq!(
            kept[0].message_id,
            format!("m{}", PER_QUEUE + 2),
            "newest first"
        );
        assert_eq!(
            kept[0].preview, "<b>hi</b>",
            "kept as text; the page escapes it"
        );
        assert!(kept[0].whole && !kept[0].offloaded);
        assert_eq!(
            kept[0].attributes,
            [
                ("kind".into(), "reminder".into()),
                ("blob".into(), "(3 bytes)".into())
            ]
        );
        assert!(recent.of("other").is_empty());
        let redriven =
            DeadLetter::of(&received("r", b"x"), "p", "no", 1).copied_as(Some("d1".into()));
        recent.note(redriven);
        recent.forget("jobs", &["d1".to_string()]);
        assert_eq!(
            recent.of("jobs").len(),
            PER_QUEUE - 1,
            "the redriven one is forgotten"
        );
        assert!(recent.of("jobs").iter().all(|d| d.message_id != "r"));
        let big = DeadLetter::of(&received("big", &[b'x'; 5000]), "p", "no", 1);
        assert_eq!(
            (big.size, big.preview.len(), big.whole),
            (5000, PREVIEW_BYTES, false)
        );
    }
}
