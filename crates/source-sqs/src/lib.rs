//! The SQS queue: the same code against Amazon SQS and against a local SQS-compatible server
//! (`endpoint-url`, or `AWS_ENDPOINT_URL`). The calls on the hot path (receive, delete, change
//! visibility, send) go through qhost's own JSON client (`json`), the rest (resolving a queue's
//! URL, its depth, a purge) through aws-sdk-sqs; both from one SDK configuration.
//!
//! - Receives ask for every message attribute and for the system attributes the host needs
//!   (receive count, send time, FIFO group), with long polling.
//! - Deletes and sends go in batches (`DeleteMessageBatch`, `SendMessageBatch`); each entry's
//!   failure is reported on its own, and an invalid receipt is [`SourceError::HandleExpired`].
//! - Queue URLs are resolved by name once and cached; a missing queue is
//!   [`SourceError::UnknownQueue`].
//! - A message is checked against SQS's rules ([`qhost_message::rules`]) before it is sent;
//!   what SQS still refuses for good is [`SourceError::Refused`] with SQS's code and message,
//!   and anything else (throttling, 5xx, the network) is [`SourceError::Backend`].
//! - FIFO targets (`.fifo`) get a deduplication id (the message's own, or a fresh one).

mod batch;
mod convert;
mod json;
mod refusal;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::QueueAttributeName;

use self::json::shapes::{self, BatchAnswer};
use self::json::{CallError, JsonClient};
use qhost_aws::{ATTEMPTS, AwsDeadlines, AwsSettings, Failure};
use qhost_message::{Outgoing, Received};
use qhost_message::{rules, wire};
use qhost_source::{Capabilities, Holds, Purged, QueueAdmin, QueueDepth, QueueSource, SourceError};

/// The longest visibility SQS allows (12 hours).
const MAX_VISIBILITY_SECS: u64 = 43_200;

/// API requests made, by kind, for measuring what a workload costs.
#[derive(Debug, Default)]
pub struct Requests {
    /// `ReceiveMessage`.
    pub receive: AtomicU64,
    /// `DeleteMessageBatch`.
    pub delete: AtomicU64,
    /// `ChangeMessageVisibility` and `ChangeMessageVisibilityBatch`.
    pub change_visibility: AtomicU64,
    /// `SendMessageBatch`.
    pub send: AtomicU64,
    /// `GetQueueUrl` and `GetQueueAttributes`.
    pub other: AtomicU64,
}

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// An SQS client with a cache of queue URLs.
#[derive(Debug)]
pub struct SqsQueue {
    client: Client,
    json: JsonClient,
    /// One attempt of a call on the JSON client (a receive takes its wait plus the margin).
    attempt: Duration,
    deadlines: AwsDeadlines,
    urls: RwLock<HashMap<String, String>>,
    requests: Arc<Requests>,
}

/// Whole seconds for SQS, rounding up so a short delay is not lost, within SQS's range.
fn secs(d: Duration, max: u64) -> u64 {
    let whole = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    whole.min(max)
}

/// A failed call on the JSON client, on `what`, in one line.
fn failed(what: &str, e: CallError) -> SourceError {
    if e.timed_out() {
        SourceError::TimedOut(what.to_string())
    } else {
        SourceError::Backend(anyhow::anyhow!("{what}: {e}"))
    }
}

/// As [`failed`], but refused for good when SQS's code says the request can never succeed.
fn refused_or_failed(what: &str, e: CallError) -> SourceError {
    match e {
        CallError::Service { code, message, .. } if refusal::is_permanent(&code) => {
            SourceError::Refused(format!(
                "{what}: SQS says {code}: {}",
                message.unwrap_or_default()
            ))
        }
        e => failed(what, e),
    }
}

/// A failed call on `what`, in one line (the code and message, or what went wrong on the way).
fn backend<E, R>(what: &str, e: SdkError<E, R>) -> SourceError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let failure = Failure::of(&e);
    if failure.timed_out {
        SourceError::TimedOut(what.to_string())
    } else {
        SourceError::Backend(anyhow::anyhow!("{what}: {}", failure.text))
    }
}

/// An SQS error on `what`: refused for good when its code says the request can never succeed.
fn classify<E, R>(what: &str, e: SdkError<E, R>) -> SourceError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match e.code().filter(|code| refusal::is_permanent(code)) {
        Some(code) => SourceError::Refused(format!(
            "{what}: SQS says {code}: {}",
            e.message().unwrap_or_default()
        )),
        None => backend(what, e),
    }
}

fn is_fifo(queue: &str) -> bool {
    queue.ends_with(".fifo")
}

impl SqsQueue {
    /// A client from the AWS configuration chain, with these overrides.
    pub async fn connect(settings: &AwsSettings) -> Self {
        Self::with_deadlines(&settings.load().await, settings.deadlines)
    }

    /// A client from a ready SDK configuration, with the default deadlines where it sets none.
    pub fn from_sdk_config(config: &aws_config::SdkConfig) -> Self {
        Self::with_deadlines(config, AwsDeadlines::SQS)
    }

    /// A client from a ready SDK configuration; its calls take `deadlines` unless the
    /// configuration sets its own attempt timeout (receives always take the receive deadline).
    pub fn with_deadlines(config: &aws_config::SdkConfig, deadlines: AwsDeadlines) -> Self {
        let mut builder = aws_sdk_sqs::config::Builder::from(config);
        let timeouts = config.timeout_config();
        let attempt = timeouts.and_then(|t| t.operation_attempt_timeout());
        if attempt.is_none() {
            builder = builder.timeout_config(deadlines.timeouts(deadlines.call));
        }
        let connect = (timeouts.and_then(|t| t.connect_timeout())).unwrap_or(deadlines.connect);
        SqsQueue {
            client: Client::from_conf(builder.build()),
            json: JsonClient::new(config, connect),
            attempt: attempt.unwrap_or(deadlines.call),
            deadlines,
            urls: RwLock::new(HashMap::new()),
            requests: Arc::default(),
        }
    }

    /// The same client for a lane of its own (see the host's `host::lanes`): its hot calls on a
    /// connection pool of the lane's, its queue URLs and request counts shared.
    fn lane(&self) -> Self {
        SqsQueue {
            client: self.client.clone(),
            json: self.json.for_lane(),
            attempt: self.attempt,
            deadlines: self.deadlines,
            urls: RwLock::new(self.urls.read().unwrap_or_else(|e| e.into_inner()).clone()),
            requests: Arc::clone(&self.requests),
        }
    }

    /// Requests made so far, by kind.
    pub fn requests(&self) -> &Requests {
        &self.requests
    }

    /// Deletes every message of `queue` (`PurgeQueue`: SQS takes up to a minute, and allows
    /// one purge a minute per queue).
    pub async fn purge(&self, queue: &str) -> Result<(), SourceError> {
        let url = self.url(queue).await?;
        count(&self.requests.other);
        (self.client.purge_queue().queue_url(url).send().await)
            .map(drop)
            .map_err(|e| classify(&format!("purging `{queue}`"), e))
    }

    /// Preloads a queue's URL (skipping `GetQueueUrl`), as given in configuration.
    pub fn set_url(&self, queue: &str, url: &str) {
        if let Ok(mut urls) = self.urls.write() {
            urls.insert(queue.to_string(), url.to_string());
        }
    }

    /// The queue's URL, resolved by name on first use.
    pub async fn url(&self, queue: &str) -> Result<String, SourceError> {
        if let Some(url) = self.urls.read().ok().and_then(|u| u.get(queue).cloned()) {
            return Ok(url);
        }
        count(&self.requests.other);
        let out = self
            .client
            .get_queue_url()
            .queue_name(queue)
            .send()
            .await
            .map_err(|e| {
                let missing = e
                    .as_service_error()
                    .is_some_and(|s| s.is_queue_does_not_exist())
                    || e.code().is_some_and(|c| c.ends_with("NonExistentQueue"));
                if missing {
                    SourceError::UnknownQueue(queue.to_string())
                } else {
                    backend(&format!("resolving queue `{queue}`"), e)
                }
            })?;
        let url = out
            .queue_url()
            .context("GetQueueUrl returned no URL")?
            .to_string();
        if let Ok(mut urls) = self.urls.write() {
            urls.insert(queue.to_string(), url.clone());
        }
        Ok(url)
    }

    fn entry(i: usize, m: &Outgoing) -> Result<(shapes::SendEntry, usize), SourceError> {
        rules::check(m).map_err(|r| SourceError::Refused(r.0))?;
        let (body, encoded) = convert::encode_body(&m.body);
        let mut attributes = m.attributes.clone();
        if encoded {
            attributes.push(qhost_message::Attribute::string(
                wire::BODY_ENCODING,
                "base64",
            ));
        }
        let size = wire::message_size(body.len(), &attributes);
        let fifo = is_fifo(&m.queue);
        let entry = shapes::SendEntry {
            id: i.to_string(),
            message_body: body,
            // FIFO queues take no per-message delay.
            delay_seconds: if fifo { 0 } else { m.delay_seconds },
            message_attributes: (attributes.iter())
                .map(|a| (a.name.clone(), convert::attribute_to_sqs(&a.value)))
                .collect(),
            // On a standard queue too: SQS's fair queues take a group per tenant there.
            message_group_id: m.group_id.clone(),
            message_deduplication_id: fifo.then(|| {
                (m.dedup_id.clone()).unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
            }),
        };
        Ok((entry, size))
    }

    /// Sends messages bound for one queue, in batches; returns their ids in order.
    async fn send_to(
        &self,
        queue: &str,
        messages: &[&Outgoing],
    ) -> Result<Vec<String>, SourceError> {
        let url = self.url(queue).await?;
        let mut entries = Vec::with_capacity(messages.len());
        let mut sizes = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let (entry, size) = Self::entry(i, m)?;
            entries.push(Some(entry));
            sizes.push(size);
        }
        let plan = batch::plan(&sizes)
            .map_err(|e| SourceError::Refused(format!("sending to `{queue}`: {e}")))?;
        let mut ids = vec![String::new(); messages.len()];
        let what = || format!("sending to `{queue}`");
        for indices in plan {
            let request = shapes::Batch {
                queue_url: &url,
                entries: indices.iter().filter_map(|&i| entries[i].take()).collect(),
            };
            count(&self.requests.send);
            let out: BatchAnswer = (self.json)
                .call("SendMessageBatch", &request, self.attempt, ATTEMPTS)
                .await
                .map_err(|e| refused_or_failed(&what(), e))?;
            if let Some(f) = out.failed.first() {
                let why = format!(
                    "{}: SQS says {}: {}",
                    what(),
                    f.code,
                    f.message.as_deref().unwrap_or_default()
                );
                return Err(if f.sender_fault && refusal::is_permanent(&f.code) {
                    SourceError::Refused(why)
                } else {
                    SourceError::Backend(anyhow::anyhow!(why))
                });
            }
            for ok in out.successful {
                let slot = ok.id.parse::<usize>().ok().and_then(|i| ids.get_mut(i));
                if let (Some(slot), Some(id)) = (slot, ok.message_id) {
                    *slot = id;
                }
            }
        }
        Ok(ids)
    }
}

#[async_trait]
impl QueueSource for SqsQueue {
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
        let url = self.url(queue).await?;
        count(&self.requests.receive);
        let request = shapes::ReceiveMessage {
            queue_url: &url,
            max_number_of_messages: max.clamp(1, 10) as u32,
            visibility_timeout: secs(visibility, MAX_VISIBILITY_SECS),
            wait_time_seconds: secs(wait, 20),
            message_attribute_names: ["All"],
            message_system_attribute_names: [
                convert::RECEIVE_COUNT,
                convert::SENT_TIMESTAMP,
                convert::GROUP_ID,
            ],
        };
        // One attempt: a lost answer is not worth a second wait inside the call; the poller
        // asks again.
        let deadline = wait + self.deadlines.receive_margin;
        let out: shapes::Received = (self.json)
            .call("ReceiveMessage", &request, deadline, 1)
            .await
            .map_err(|e| failed(&format!("receiving from `{queue}`"), e))?;
        Ok(out
            .messages
            .into_iter()
            .filter_map(|m| {
                if m.receipt_handle.is_none() {
                    tracing::error!(queue, message_id = ?m.message_id, "SQS sent a message without a receipt handle; skipping it");
                    return None;
                }
                convert::received(queue, m)
            })
            .collect())
    }

    async fn settle(
        &self,
        queue: &str,
        receipts: &[String],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        let url = self.url(queue).await?;
        let request = shapes::Batch {
            queue_url: &url,
            entries: (receipts.iter().enumerate())
                .map(|(i, r)| shapes::DeleteEntry {
                    id: i.to_string(),
                    receipt_handle: r,
                })
                .collect(),
        };
        count(&self.requests.delete);
        let out: BatchAnswer = (self.json)
            .call("DeleteMessageBatch", &request, self.attempt, ATTEMPTS)
            .await
            .map_err(|e| failed(&format!("deleting from `{queue}`"), e))?;
        Ok(batch::entry_results(receipts.len(), &out.failed))
    }

    async fn put_back(
        &self,
        queue: &str,
        receipt: &str,
        delay: Duration,
    ) -> Result<(), SourceError> {
        let url = self.url(queue).await?;
        count(&self.requests.change_visibility);
        let request = shapes::ChangeVisibility {
            queue_url: &url,
            receipt_handle: receipt,
            visibility_timeout: secs(delay, MAX_VISIBILITY_SECS),
        };
        (self.json)
            .call::<_, shapes::Empty>("ChangeMessageVisibility", &request, self.attempt, ATTEMPTS)
            .await
            .map(drop)
            .map_err(|e| {
                if e.code().is_some_and(refusal::receipt_expired) {
                    SourceError::HandleExpired
                } else {
                    failed(&format!("changing visibility in `{queue}`"), e)
                }
            })
    }

    async fn put_back_batch(
        &self,
        queue: &str,
        entries: &[(String, Duration)],
    ) -> Result<Vec<Result<(), SourceError>>, SourceError> {
        if let [(receipt, delay)] = entries {
            return Ok(vec![self.put_back(queue, receipt, *delay).await]);
        }
        let url = self.url(queue).await?;
        let request = shapes::Batch {
            queue_url: &url,
            entries: (entries.iter().enumerate())
                .map(|(i, (receipt, delay))| shapes::VisibilityEntry {
                    id: i.to_string(),
                    receipt_handle: receipt,
                    visibility_timeout: secs(*delay, MAX_VISIBILITY_SECS),
                })
                .collect(),
        };
        count(&self.requests.change_visibility);
        let out: BatchAnswer = (self.json)
            .call(
                "ChangeMessageVisibilityBatch",
                &request,
                self.attempt,
                ATTEMPTS,
            )
            .await
            .map_err(|e| failed(&format!("changing visibility in `{queue}`"), e))?;
        Ok(batch::entry_results(entries.len(), &out.failed))
    }

    async fn hold(&self, queue: &str, receipt: &str, hold: Duration) -> Result<(), SourceError> {
        self.put_back(queue, receipt, hold).await
    }

    async fn send(&self, messages: &[Outgoing]) -> Result<Vec<String>, SourceError> {
        let mut ids = vec![String::new(); messages.len()];
        let mut queues: Vec<&str> = messages.iter().map(|m| m.queue.as_str()).collect();
        queues.sort_unstable();
        queues.dedup();
        for queue in queues {
            let (indices, group): (Vec<usize>, Vec<&Outgoing>) = messages
                .iter()
                .enumerate()
                .filter(|(_, m)| m.queue == queue)
                .unzip();
            for (i, id) in indices.into_iter().zip(self.send_to(queue, &group).await?) {
                ids[i] = id;
            }
        }
        Ok(ids)
    }

    async fn depth(&self, queue: &str) -> Result<QueueDepth, SourceError> {
        let url = self.url(queue).await?;
        count(&self.requests.other);
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(|e| backend(&format!("reading the depth of `{queue}`"), e))?;
        let get = |name: QueueAttributeName| -> u64 {
            out.attributes()
                .and_then(|a| a.get(&name))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Ok(QueueDepth {
            visible: get(QueueAttributeName::ApproximateNumberOfMessages),
            invisible: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                + get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        })
    }

    fn for_lane(&self) -> Option<Arc<dyn QueueSource>> {
        Some(Arc::new(self.lane()))
    }
}

/// The operator's verbs SQS has: a purge. It has no peek that leaves a message's receive
/// count alone, and delivers copies only by accident, so those two are refused as such.
#[async_trait]
impl QueueAdmin for SqsQueue {
    async fn purge(&self, queue: &str) -> Result<Purged, SourceError> {
        SqsQueue::purge(self, queue)
            .await
            .map(|()| Purged::Requested)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client of an endpoint nothing listens on: the verbs SQS lacks must refuse before any
    /// call is made.
    fn unreachable() -> SqsQueue {
        let sdk = aws_config::SdkConfig::builder()
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:9")
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        SqsQueue::from_sdk_config(&sdk)
    }

    #[tokio::test]
    async fn peek_and_copies_are_refused_as_sqs_lacks_them_without_a_call() {
        let sqs = unreachable();
        let peeked = QueueAdmin::peek(&sqs, "jobs", 10).await.unwrap_err();
        assert!(matches!(peeked, SourceError::Unsupported(_)), "{peeked:?}");
        assert!(peeked.is_permanent());
        assert!(
            peeked.to_string().contains("source.kind = \"local\""),
            "{peeked}"
        );
        let copies = [Outgoing::new("jobs", "twice")];
        for messages in [&copies[..], &[]] {
            let copied = sqs.send_copies(messages, 2).await.unwrap_err();
            assert!(matches!(copied, SourceError::Unsupported(_)), "{copied:?}");
            assert!(
                copied.to_string().contains("embedded queue only"),
                "{copied}"
            );
        }
        let made = sqs.requests();
        let calls = [
            &made.receive,
            &made.delete,
            &made.change_visibility,
            &made.send,
        ];
        let calls = calls.into_iter().chain([&made.other]);
        assert!(calls.into_iter().all(|c| c.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn durations_round_up_to_whole_seconds_within_range() {
        assert_eq!(secs(Duration::ZERO, 10), 0);
        assert_eq!(secs(Duration::from_millis(1), 10), 1);
        assert_eq!(secs(Duration::from_millis(2500), 10), 3);
        assert_eq!(secs(Duration::from_secs(99), 10), 10);
    }
}
