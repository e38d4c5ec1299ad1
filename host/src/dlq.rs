//! Dead-letter tools: read what a dead letter says (`qhost dlq peek`), and send dead letters
//! back to the queue they came from (`qhost dlq redrive`).
//!
//! A redrive is receive → send → delete, one batch at a time, and a dead letter is deleted only
//! after its copy is confirmed sent: a failure on the way leaves it in the dead-letter queue
//! (at worst it is redriven twice, and the idempotency store runs it once). The copy carries
//! the original body and attributes, without qhost's verdict, so it runs as the original did;
//! its key was released when it was dead-lettered, so it runs again. This works the same on
//! SQS and on the embedded queue. (SQS's own message-move task is not used: it needs the
//! queues' redrive policy, which qhost's own dead-lettering does not set, and not every
//! SQS-compatible server has it.)

use std::time::Duration;

use crate::message::wire;
use crate::message::{Attribute, Outgoing, Received, find_attribute};
use crate::source::{QueueSource, SourceError};

/// How long a dead letter being redriven is hidden from others.
const REDRIVE_VISIBILITY: Duration = Duration::from_secs(30);

/// What qhost wrote on a dead letter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Why it was dead-lettered.
    pub reason: String,
    /// The plugin and version that gave up on it.
    pub plugin: String,
    /// `-` when no version was loaded.
    pub version: String,
    /// Handler runs on its key (deliveries, when it never ran).
    pub attempts: String,
    /// The queue it came from.
    pub source_queue: Option<String>,
}

/// The verdict on a dead letter (fields qhost did not write read as empty).
pub(crate) fn verdict(msg: &Received) -> Verdict {
    let text = |name: &str| {
        find_attribute(&msg.attributes, name)
            .and_then(|a| a.text())
            .map(str::to_string)
    };
    Verdict {
        reason: text(wire::DEAD_LETTER_REASON).unwrap_or_default(),
        plugin: text(wire::DEAD_LETTER_PLUGIN).unwrap_or_default(),
        version: text(wire::DEAD_LETTER_VERSION).unwrap_or_default(),
        attempts: text(wire::DEAD_LETTER_ATTEMPTS).unwrap_or_default(),
        source_queue: text(wire::DEAD_LETTER_SOURCE_QUEUE),
    }
}

/// The attributes qhost adds to a dead letter, which a redriven copy goes without.
const VERDICT_ATTRIBUTES: [&str; 5] = [
    wire::DEAD_LETTER_REASON,
    wire::DEAD_LETTER_PLUGIN,
    wire::DEAD_LETTER_VERSION,
    wire::DEAD_LETTER_ATTEMPTS,
    wire::DEAD_LETTER_SOURCE_QUEUE,
];

/// The original attributes of a dead letter: its own without the verdict, and those folded into
/// `qhost-original-attributes` unfolded.
pub(crate) fn original_attributes(msg: &Received) -> Result<Vec<Attribute>, String> {
    let mut out = Vec::new();
    for a in &msg.attributes {
        if a.name == wire::DEAD_LETTER_ORIGINAL_ATTRIBUTES {
            let folded: Vec<Attribute> = serde_json::from_str(a.text().unwrap_or_default())
                .map_err(|e| format!("{} is not readable: {e}", a.name))?;
            out.extend(folded);
        } else if !VERDICT_ATTRIBUTES.contains(&a.name.as_str()) {
            out.push(a.clone());
        }
    }
    Ok(out)
}

/// Up to `limit` messages of `queue`, left where they are. SQS has no peek: each is received
/// with a visibility timeout of zero, so it stays available (its receive count goes up by one).
pub(crate) async fn peek(
    source: &dyn QueueSource,
    queue: &str,
    limit: usize,
) -> Result<Vec<Received>, SourceError> {
    let mut seen: Vec<Received> = Vec::new();
    while seen.len() < limit {
        let want = (limit - seen.len()).min(wire::MAX_BATCH_ENTRIES);
        let batch = source
            .receive(queue, want, Duration::ZERO, Duration::ZERO)
            .await?;
        let before = seen.len();
        for msg in batch {
            if seen.len() < limit && !seen.iter().any(|m| m.id == msg.id) {
                seen.push(msg);
            }
        }
        if seen.len() == before {
            break;
        }
    }
    Ok(seen)
}

/// What a redrive did.
#[derive(Debug, Default)]
pub struct Redriven {
    /// Dead letters sent back and deleted, with the queue each went to.
    pub moved: Vec<(String, String)>,
    /// Dead letters left where they are, with why.
    pub left: Vec<(String, String)>,
}

/// Sends up to `limit` dead letters from `dead_letter_queue` back to `to`, or to the queue each
/// came from.
pub(crate) async fn redrive(
    source: &dyn QueueSource,
    dead_letter_queue: &str,
    to: Option<&str>,
    limit: usize,
) -> Result<Redriven, SourceError> {
    let mut done = Redriven::default();
    while done.moved.len() + done.left.len() < limit {
        let want = (limit - done.moved.len() - done.left.len()).min(wire::MAX_BATCH_ENTRIES);
        let batch = source
            .receive(dead_letter_queue, want, REDRIVE_VISIBILITY, Duration::ZERO)
            .await?;
        if batch.is_empty() {
            break;
        }
        for msg in batch {
            match redrive_one(source, dead_letter_queue, to, &msg).await {
                Ok(target) => done.moved.push((msg.id, target)),
                Err(why) => done.left.push((msg.id, why)),
            }
        }
    }
    Ok(done)
}

/// Sends the dead letter `id` of `dead_letter_queue` back to `to` (or where it came from). The
/// queue is read a batch at a time until `id` comes; the others read meanwhile are made
/// visible again at once. A letter not found (already redriven, or not there) is reported left.
pub(crate) async fn redrive_message(
    source: &dyn QueueSource,
    dead_letter_queue: &str,
    to: Option<&str>,
    id: &str,
) -> Result<Redriven, SourceError> {
    let mut done = Redriven::default();
    let mut seen = std::collections::HashSet::new();
    loop {
        let batch = source
            .receive(
                dead_letter_queue,
                wire::MAX_BATCH_ENTRIES,
                REDRIVE_VISIBILITY,
                Duration::ZERO,
            )
            .await?;
        let mut new = false;
        let mut found = None;
        for msg in batch {
            new |= seen.insert(msg.id.clone());
            if msg.id == id {
                found = Some(msg);
            } else {
                source
                    .put_back(dead_letter_queue, &msg.handle, Duration::ZERO)
                    .await?;
            }
        }
        if let Some(msg) = found {
            match redrive_one(source, dead_letter_queue, to, &msg).await {
                Ok(target) => done.moved.push((msg.id, target)),
                Err(why) => done.left.push((msg.id, why)),
            }
            return Ok(done);
        }
        if !new {
            done.left
                .push((id.to_string(), "not in the dead-letter queue".to_string()));
            return Ok(done);
        }
    }
}

/// Sends one dead letter back, then deletes it; on failure it stays hidden until
/// [`REDRIVE_VISIBILITY`] lapses, so one redrive run does not take it twice.
async fn redrive_one(
    source: &dyn QueueSource,
    dead_letter_queue: &str,
    to: Option<&str>,
    msg: &Received,
) -> Result<String, String> {
    let target = to
        .map(str::to_string)
        .or_else(|| verdict(msg).source_queue)
        .ok_or("it names no source queue (qhost-source-queue): give --to")?;
    let copy = Outgoing {
        queue: target.clone(),
        body: msg.body.clone(),
        attributes: original_attributes(msg)?,
        delay_seconds: 0,
        group_id: msg.group_id.clone(),
        dedup_id: msg.group_id.as_ref().map(|_| msg.id.clone()),
    };
    source
        .send(&[copy])
        .await
        .map_err(|e| format!("sending it to `{target}` failed: {e}"))?;
    let deleted = source
        .settle(dead_letter_queue, std::slice::from_ref(&msg.handle))
        .await
        .map_err(|e| e.to_string())
        .and_then(|mut r| r.pop().unwrap_or(Ok(())).map_err(|e| e.to_string()));
    deleted.map_err(|e| {
        format!("sent to `{target}`, but not deleted (it may run twice, once): {e}")
    })?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(attributes: Vec<Attribute>) -> Received {
        Received {
            id: "m".into(),
            handle: "r".into(),
            queue: "jobs-dlq".into(),
            body: b"x".to_vec(),
            attributes,
            delivery_count: 1,
            sent_at_ms: 0,
            group_id: None,
            malformed: None,
        }
    }

    #[test]
    fn the_verdict_is_read_and_the_originals_are_restored() {
        let folded =
            serde_json::to_string(&[Attribute::string("a", "1"), Attribute::number("n", 2)])
                .unwrap();
        let msg = letter(vec![
            Attribute::string(wire::DEAD_LETTER_ORIGINAL_ATTRIBUTES, folded),
            Attribute::string(wire::DEAD_LETTER_REASON, "bad"),
            Attribute::string(wire::DEAD_LETTER_PLUGIN, "p"),
            Attribute::string(wire::DEAD_LETTER_VERSION, "v1"),
            Attribute::number(wire::DEAD_LETTER_ATTEMPTS, 3),
            Attribute::string(wire::DEAD_LETTER_SOURCE_QUEUE, "jobs"),
            Attribute::string(wire::IDEMPOTENCY_KEY, "k"),
        ]);
        let v = verdict(&msg);
        assert_eq!(
            (v.reason.as_str(), v.plugin.as_str(), v.version.as_str()),
            ("bad", "p", "v1")
        );
        assert_eq!(
            (v.attempts.as_str(), v.source_queue.as_deref()),
            ("3", Some("jobs"))
        );
        let names: Vec<String> = original_attributes(&msg)
            .unwrap()
            .into_iter()
            .map(|a| a.name)
            .collect();
        assert_eq!(names, ["a", "n", wire::IDEMPOTENCY_KEY]);
        let broken = letter(vec![Attribute::string(
            wire::DEAD_LETTER_ORIGINAL_ATTRIBUTES,
            "{",
        )]);
        assert!(
            original_attributes(&broken)
                .unwrap_err()
                .contains("not readable")
        );
    }
}
