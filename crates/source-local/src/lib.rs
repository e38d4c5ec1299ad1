//! The embedded queue: SQS semantics in SQLite, for development, demos, tests and benchmarks.
//!
//! What it keeps of SQS: its rules for a sent message ([`qhost_message::rules`]: attribute
//! count, names and values, the 1 MiB limit counted as SQS counts it), a receipt per delivery, a visibility timeout that hides a received
//! message until it is deleted or the timeout lapses, a receive count, per-message delays,
//! FIFO groups (only the head of a group is ever visible, so a group is handled in order, one
//! message at a time) and a redrive policy that moves a message to its dead-letter queue once
//! its receive count passes a maximum. As on SQS, a send to a queue that does not exist is
//! refused ([`SourceError::UnknownQueue`]) once the queue is told which exist
//! ([`LocalQueue::with_queues`]): a typo in a queue name fails here as it would there, instead
//! of filling a queue no one reads. Without that list, queues spring into being on first use
//! (the form tests and benchmarks use).
//!
//! It can also do on purpose what SQS does by accident: deliver copies of one message under one
//! message id ([`LocalQueue::send_copies`]), so handlers and the host's duplicate suppression
//! can be tried locally.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, Transaction, params};
use tokio::sync::Notify;

use qhost_message::{Attribute, Outgoing, Received, now_ms, rules};
use qhost_source::{Capabilities, Holds, Purged, QueueAdmin, QueueDepth, QueueSource, SourceError};
use qhost_sqlite::Db;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    id TEXT NOT NULL,
    body BLOB NOT NULL,
    attributes TEXT NOT NULL,
    group_id TEXT,
    sent_at_ms INTEGER NOT NULL,
    visible_at_ms INTEGER NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    receipt TEXT
);
CREATE INDEX IF NOT EXISTS messages_order ON messages (queue, seq);
CREATE INDEX IF NOT EXISTS messages_group ON messages (queue, group_id, seq);
CREATE INDEX IF NOT EXISTS messages_id ON messages (id);
CREATE UNIQUE INDEX IF NOT EXISTS messages_receipt ON messages (receipt);
";

/// How often a waiting receive looks again for messages sent by another process.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Moves a message to `dead_letter` once it has been received more than `max_receives` times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redrive {
    /// The dead-letter queue.
    pub dead_letter: String,
    /// Receives allowed before the move.
    pub max_receives: u32,
}

/// The embedded queue.
#[derive(Debug)]
pub struct LocalQueue {
    db: Db,
    redrive: HashMap<String, Redrive>,
    /// The queues that exist, where a send to any other is refused (`None`: every name).
    queues: Option<BTreeSet<String>>,
    /// Wakes waiting receivers when this process sends.
    sent: Arc<Notify>,
}

impl LocalQueue {
    /// Opens the queue database at `path`, or an in-memory one for `None`.
    pub fn open(path: Option<&Path>, redrive: HashMap<String, Redrive>) -> anyhow::Result<Self> {
        let db = Db::open(path)?;
        db.call_now(|c| Ok(c.execute_batch(SCHEMA)?))?;
        Ok(LocalQueue {
            db,
            redrive,
            queues: None,
            sent: Arc::new(Notify::new()),
        })
    }

    /// Only `queues` exist: a send to any other is refused as SQS refuses a send to a queue
    /// never created. Receiving, peeking and purging any name stay allowed (they change
    /// nothing that is not there).
    pub fn with_queues(mut self, queues: impl IntoIterator<Item = String>) -> Self {
        self.queues = Some(queues.into_iter().collect());
        self
    }

    /// Deletes every message of `queue`, visible or not (`qhost purge`); returns how many.
    pub async fn purge(&self, queue: &str) -> anyhow::Result<u64> {
        let queue = queue.to_string();
        let deleted = self
            .db
            .call(move |c| Ok(c.execute("DELETE FROM messages WHERE queue = ?1", [queue])?))
            .await?;
        Ok(deleted as u64)
    }

    /// Makes every message of `queue` visible now, as their delays running out would (for
    /// tests on tokio's paused clock, which this queue's wall-clock delays do not follow).
    #[cfg(any(test, feature = "test-support"))]
    pub async fn reveal(&self, queue: &str) {
        let queue = queue.to_string();
        let revealed = self.db.call(move |c| {
            Ok(c.execute(
                "UPDATE messages SET visible_at_ms = 0 WHERE queue = ?1",
                [queue],
            )?)
        });
        revealed.await.expect("revealed");
    }

    /// Up to `limit` messages of `queue` in order, without receiving them (for inspection).
    pub async fn peek(&self, queue: &str, limit: usize) -> anyhow::Result<Vec<Received>> {
        let queue = queue.to_string();
        self.db
            .call(move |c| {
                let mut stmt = c.prepare(
                    "SELECT id, COALESCE(receipt, ''), queue, body, attributes, receive_count,
                            sent_at_ms, group_id
                     FROM messages WHERE queue = ?1 ORDER BY seq LIMIT ?2",
                )?;
                let rows = stmt.query_map(params![queue, limit as i64], row_to_received)?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
    }

    /// Sends each message `copies` times under one message id, as an at-least-once queue may
    /// deliver it; returns the ids. A message SQS would refuse is refused, and none is sent.
    pub async fn send_copies(
        &self,
        messages: &[Outgoing],
        copies: usize,
    ) -> Result<Vec<String>, SourceError> {
        for m in messages {
            if let Some(queues) = &self.queues
                && !queues.contains(&m.queue)
            {
                return Err(SourceError::UnknownQueue(m.queue.clone()));
            }
            rules::check(m).map_err(|r| SourceError::Refused(r.0))?;
        }
        let messages = messages.to_vec();
        let ids = self
            .db
            .call(move |c| {
                let tx = c.transaction()?;
                let now = now_ms() as i64;
                let mut ids = Vec::with_capacity(messages.len());
                for m in &messages {
                    let id = uuid::Uuid::new_v4().to_string();
                    for _ in 0..copies {
                        insert(&tx, m, &id, now)?;
                    }
                    ids.push(id);
                }
                tx.commit()?;
                Ok(ids)
            })
            .await?;
        self.sent.notify_waiters();
        Ok(ids)
    }

    async fn try_receive(
        &self,
        queue: &str,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<Received>, SourceError> {
        let queue = queue.to_string();
        let redrive = self.redrive.get(&queue).cloned();
        let received = self
            .db
            .call(move |c| {
                let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let got = receive_in(&tx, &queue, max, visibility, redrive.as_ref())?;
                tx.commit()?;
                Ok(got)
            })
            .await?;
        Ok(received)
    }
}

/// Receives inside one write transaction, so two processes never get the same delivery.
fn receive_in(
    tx: &Transaction<'_>,
    queue: &str,
    max: usize,
    visibility: Duration,
    redrive: Option<&Redrive>,
) -> anyhow::Result<Vec<Received>> {
    let now = now_ms() as i64;
    let candidates: Vec<(i64, u32)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT m.seq, m.receive_count FROM messages m
             WHERE m.queue = ?1 AND m.visible_at_ms <= ?2
               AND (m.group_id IS NULL OR m.queue NOT LIKE '%.fifo' OR NOT EXISTS (
                    SELECT 1 FROM messages h
                    WHERE h.queue = m.queue AND h.group_id = m.group_id AND h.seq < m.seq))
             ORDER BY m.seq LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![queue, now, max as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        rows.collect::<Result<_, _>>()?
    };
    let mut received = Vec::with_capacity(candidates.len());
    for (seq, count) in candidates {
        if let Some(r) = redrive.filter(|r| count >= r.max_receives) {
            tx.execute(
                "UPDATE messages SET queue = ?1, receive_count = 0, receipt = NULL,
                        visible_at_ms = ?2 WHERE seq = ?3",
                params![r.dead_letter, now, seq],
            )?;
            continue;
        }
        let receipt = uuid::Uuid::new_v4().to_string();
        tx.execute(
            "UPDATE messages SET receive_count = receive_count + 1, receipt = ?1,
                    visible_at_ms = ?2 WHERE seq = ?3",
            params![receipt, now + visibility.as_millis() as i64, seq],
        )?;
        let msg = tx.query_row(
            "SELECT id, receipt, queue, body, attributes, receive_count, sent_at_ms, group_id
             FROM messages WHERE seq = ?1",
            [seq],
            row_to_received,
        )?;
        received.push(msg);
    }
    Ok(received)
}

/// A row as a received message. Attributes that do not decode (the database was written by
/// something else) make the message malformed rather than failing the receive of its batch.
fn row_to_received(r: &rusqlite::Row<'_>) -> rusqlite::Result<Received> {
    let attributes: String = r.get(4)?;
    let (attributes, malformed) = match serde_json::from_str::<Vec<Attribute>>(&attributes) {
        Ok(attributes) => (attributes, None),
        Err(e) => (
            Vec::new(),
            Some(format!("its attributes cannot be read: {e}")),
        ),
    };
    Ok(Received {
        id: r.get(0)?,
        handle: r.get(1)?,
        queue: r.get(2)?,
        body: r.get(3)?,
        attributes,
        delivery_count: r.get(5)?,
        sent_at_ms: r.get::<_, i64>(6)? as u64,
        group_id: r.get(7)?,
        malformed,
    })
}

fn insert(c: &Connection, msg: &Outgoing, id: &str, now: i64) -> anyhow::Result<()> {
    let visible_at = now + i64::from(msg.delay_seconds) * 1000;
    c.prepare_cached(
        "INSERT INTO messages (queue, id, body, attributes, group_id, sent_at_ms, visible_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        msg.queue,
        id,
        msg.body,
        serde_json::to_string(&msg.attributes)?,
        msg.group_id,
        now,
        visible_at
    ])?;
    Ok(())
}

#[async_trait]
impl QueueSource for LocalQueue {
    /// A visibility timeout hides a delivery until it lapses; a put-back and a hold are both a
    /// change of it; the receive count is kept per message.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            delay: true,
            holds: Holds::Expire,
            delivery_count: true,
            ordering_groups: true,
        }
    }

    async fn receive(
        &self,
        queue: &str,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, SourceError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.sent.notified();
            let got = self.try_receive(queue, max, visibility).await?;
            let now = tokio::time::Instant::now();
            if !got.is_empty() || now >= deadline {
                return Ok(got);
            }
            let nap = POLL_INTERVAL.min(deadline - now);
            let _ = tokio::time::timeout(nap, notified).await;
        }
    }

    async fn settle(
        &self,
        queue: &str,
        receipts: &[String],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        let queue = queue.to_string();
        let receipts = receipts.to_vec();
        let deleted = self
            .db
            .call(move |c| {
                let tx = c.transaction()?;
                let mut deleted = Vec::with_capacity(receipts.len());
                for receipt in &receipts {
                    let n = tx
                        .prepare_cached("DELETE FROM messages WHERE queue = ?1 AND receipt = ?2")?
                        .execute(params![queue, receipt])?;
                    deleted.push(n == 1);
                }
                tx.commit()?;
                Ok(deleted)
            })
            .await?;
        Ok(deleted
            .into_iter()
            .map(|ok| {
                if ok {
                    Ok(())
                } else {
                    Err(SourceError::HandleExpired)
                }
            })
            .collect())
    }

    async fn put_back(
        &self,
        queue: &str,
        receipt: &str,
        delay: Duration,
    ) -> Result<(), SourceError> {
        let (queue, receipt) = (queue.to_string(), receipt.to_string());
        let visible_at = now_ms() as i64 + delay.as_millis() as i64;
        let n = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached(
                    "UPDATE messages SET visible_at_ms = ?1 WHERE queue = ?2 AND receipt = ?3",
                )?
                .execute(params![visible_at, queue, receipt])?)
            })
            .await?;
        if delay.is_zero() {
            self.sent.notify_waiters();
        }
        if n == 1 {
            Ok(())
        } else {
            Err(SourceError::HandleExpired)
        }
    }

    async fn hold(&self, queue: &str, receipt: &str, hold: Duration) -> Result<(), SourceError> {
        self.put_back(queue, receipt, hold).await
    }

    async fn send(&self, messages: &[Outgoing]) -> Result<Vec<String>, SourceError> {
        self.send_copies(messages, 1).await
    }

    async fn depth(&self, queue: &str) -> Result<QueueDepth, SourceError> {
        let queue = queue.to_string();
        let (visible, total) = self
            .db
            .call(move |c| {
                let now = now_ms() as i64;
                Ok(c.query_row(
                    "SELECT COALESCE(SUM(visible_at_ms <= ?2), 0), COUNT(*)
                     FROM messages WHERE queue = ?1",
                    params![queue, now],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
                )?)
            })
            .await?;
        Ok(QueueDepth {
            visible: visible as u64,
            invisible: (total - visible) as u64,
        })
    }

    /// One query counts both, in one transaction.
    fn depth_is_exact(&self) -> bool {
        true
    }
}

/// The operator's verbs, all of which the embedded queue can do.
#[async_trait]
impl QueueAdmin for LocalQueue {
    async fn purge(&self, queue: &str) -> Result<Purged, SourceError> {
        Ok(Purged::Deleted(LocalQueue::purge(self, queue).await?))
    }

    async fn peek(&self, queue: &str, limit: usize) -> Result<Vec<Received>, SourceError> {
        Ok(LocalQueue::peek(self, queue, limit).await?)
    }

    async fn send_copies(
        &self,
        messages: &[Outgoing],
        copies: usize,
    ) -> Result<Vec<String>, SourceError> {
        LocalQueue::send_copies(self, messages, copies).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The source contract's suite on the embedded queue (its queues need no creating).
    #[tokio::test(flavor = "multi_thread")]
    async fn the_embedded_queue_conforms() {
        let queue = Arc::new(LocalQueue::open(None, HashMap::new()).unwrap());
        let new_queue: qhost_source::conformance::NewQueue = Arc::new(|name, fifo| {
            let tag = uuid::Uuid::new_v4().simple().to_string();
            let name = format!("{name}-{}{}", &tag[..8], if fifo { ".fifo" } else { "" });
            Box::pin(async move { name })
        });
        qhost_source::conformance::assert_conforms(queue, new_queue, "embedded queue").await;
    }

    fn queue() -> LocalQueue {
        let redrive = HashMap::from([(
            "q".to_string(),
            Redrive {
                dead_letter: "q-dlq".into(),
                max_receives: 2,
            },
        )]);
        LocalQueue::open(None, redrive).expect("in-memory queue")
    }

    const VIS: Duration = Duration::from_secs(30);
    const NOW: Duration = Duration::ZERO;

    #[tokio::test]
    async fn a_received_message_is_hidden_until_deleted_or_released() {
        let q = queue();
        q.send(&[Outgoing::new("q", "a")]).await.unwrap();
        let got = q.receive("q", 10, VIS, NOW).await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].delivery_count, 1);
        assert!(q.receive("q", 10, VIS, NOW).await.unwrap().is_empty());
        q.put_back("q", &got[0].handle, NOW).await.unwrap();
        let again = q.receive("q", 10, VIS, NOW).await.unwrap();
        assert_eq!(again[0].id, got[0].id);
        assert_eq!(again[0].delivery_count, 2);
        // The first receipt is stale now; the second deletes.
        let acks = q
            .settle("q", &[got[0].handle.clone(), again[0].handle.clone()])
            .await
            .unwrap();
        assert!(matches!(acks[0], Err(SourceError::HandleExpired)));
        assert!(acks[1].is_ok());
        assert_eq!(q.depth("q").await.unwrap().total(), 0);
    }

    #[tokio::test]
    async fn redrive_moves_a_message_past_max_receives() {
        let q = queue();
        q.send(&[Outgoing::new("q", "poison")]).await.unwrap();
        for _ in 0..2 {
            let got = q.receive("q", 1, VIS, NOW).await.unwrap();
            q.put_back("q", &got[0].handle, NOW).await.unwrap();
        }
        assert!(q.receive("q", 1, VIS, NOW).await.unwrap().is_empty());
        let dead = q.receive("q-dlq", 1, VIS, NOW).await.unwrap();
        assert_eq!(dead[0].body, b"poison");
        assert_eq!(dead[0].delivery_count, 1);
    }

    /// Messages of groups `g1`, `g2`, `g1` sent to `queue`.
    fn grouped(queue: &str) -> Vec<Outgoing> {
        let mut msgs = Vec::new();
        for (group, body) in [("g1", "a1"), ("g2", "b1"), ("g1", "a2")] {
            let mut m = Outgoing::new(queue, body);
            m.group_id = Some(group.into());
            m.dedup_id = Some(body.into());
            msgs.push(m);
        }
        msgs
    }

    #[tokio::test]
    async fn a_fifo_group_is_served_in_order_one_at_a_time() {
        let q = queue();
        q.send(&grouped("q.fifo")).await.unwrap();
        let first = q.receive("q.fifo", 10, VIS, NOW).await.unwrap();
        let bodies: Vec<_> = first.iter().map(|m| m.body.clone()).collect();
        assert_eq!(bodies, vec![b"a1".to_vec(), b"b1".to_vec()]);
        q.settle("q.fifo", &[first[0].handle.clone()])
            .await
            .unwrap();
        let next = q.receive("q.fifo", 10, VIS, NOW).await.unwrap();
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].body, b"a2");
    }

    #[tokio::test]
    async fn a_standard_queues_groups_name_tenants_and_hold_nothing_back() {
        // SQS fair queues: a group on a standard queue is carried, never an order.
        let q = queue();
        q.send(&grouped("q")).await.unwrap();
        let all = q.receive("q", 10, VIS, NOW).await.unwrap();
        let groups: Vec<_> = all.iter().map(|m| m.group_id.as_deref()).collect();
        assert_eq!(groups, [Some("g1"), Some("g2"), Some("g1")]);
    }

    #[tokio::test]
    async fn copies_share_a_message_id_and_are_delivered_separately() {
        let q = queue();
        let ids = q
            .send_copies(&[Outgoing::new("q", "twice")], 2)
            .await
            .unwrap();
        let got = q.receive("q", 10, VIS, NOW).await.unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|m| m.id == ids[0]));
        assert_ne!(got[0].handle, got[1].handle);
    }

    #[tokio::test]
    async fn asked_for_copies_of_nothing_it_answers_that_it_can_and_sends_nothing() {
        let q = queue();
        let ids = QueueAdmin::send_copies(&q, &[], 3).await.unwrap();
        assert!(ids.is_empty());
        assert_eq!(q.depth("q").await.unwrap().total(), 0);
        let purged = QueueAdmin::purge(&q, "q").await.unwrap();
        assert_eq!(purged, Purged::Deleted(0));
    }

    #[tokio::test]
    async fn what_sqs_would_refuse_is_refused_and_nothing_is_sent() {
        let q = queue();
        let attrs = (0..11)
            .map(|i| Attribute::number(format!("n{i}"), i))
            .collect();
        let eleven = Outgoing {
            attributes: attrs,
            ..Outgoing::new("q", "x")
        };
        let big = Outgoing::new("q", vec![b'a'; qhost_message::wire::MAX_MESSAGE_BYTES + 1]);
        for bad in [eleven, big, Outgoing::new("no/slash", "x")] {
            let err = q
                .send(&[Outgoing::new("q", "fine"), bad])
                .await
                .unwrap_err();
            assert!(err.is_permanent(), "{err}");
        }
        assert_eq!(
            q.depth("q").await.unwrap().total(),
            0,
            "not even the good one"
        );
    }

    #[tokio::test]
    async fn told_which_queues_exist_it_refuses_a_send_to_any_other_and_sends_none() {
        let q = queue().with_queues(["q".to_string()]);
        let typo = [Outgoing::new("q", "fine"), Outgoing::new("qq", "lost")];
        let err = q.send(&typo).await.unwrap_err();
        assert!(
            matches!(&err, SourceError::UnknownQueue(name) if name == "qq"),
            "{err}"
        );
        assert!(err.is_permanent());
        let copies = QueueAdmin::send_copies(&q, &typo[1..], 2).await;
        assert!(matches!(copies, Err(SourceError::UnknownQueue(_))));
        assert_eq!(
            q.depth("q").await.unwrap().total(),
            0,
            "not even the good one"
        );
        q.send(&typo[..1]).await.expect("a declared queue takes it");
        assert_eq!(q.peek("qq", 10).await.unwrap().len(), 0);
    }

    #[tokio::test]
    async fn a_row_whose_attributes_cannot_be_read_comes_back_malformed_alone() {
        let q = queue();
        q.send(&[Outgoing::new("q", "good"), Outgoing::new("q", "bad")])
            .await
            .unwrap();
        q.db.call_now(|c| {
            c.execute(
                "UPDATE messages SET attributes = 'not json' WHERE body = x'626164'",
                [],
            )?;
            Ok(())
        })
        .unwrap();
        let got = q.receive("q", 10, VIS, NOW).await.unwrap();
        assert_eq!(got.len(), 2, "the batch is received");
        assert_eq!(got[0].malformed, None);
        let why = got[1].malformed.as_deref().unwrap_or_default();
        assert!(why.starts_with("its attributes cannot be read"), "{why}");
    }

    #[tokio::test]
    async fn delayed_messages_wait_and_depth_counts_them() {
        let q = queue();
        let mut m = Outgoing::new("q", "later");
        m.delay_seconds = 60;
        q.send(&[m]).await.unwrap();
        assert!(q.receive("q", 10, VIS, NOW).await.unwrap().is_empty());
        let depth = q.depth("q").await.unwrap();
        assert_eq!((depth.visible, depth.invisible), (0, 1));
    }
}
