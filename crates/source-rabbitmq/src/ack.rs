//! Acknowledging deliveries, as few acks as is safe. A settled delivery's ack waits while a
//! delivery below it is still handed out or held back for a delay, and goes in one `multiple`
//! ack up to the highest settled tag once none below is (a consumer's runs end out of order, so
//! acking each as it ends would send one frame, and wake the client's socket thread, per
//! message). A quarter of the prefetch at most waits so: past that, the waiting ones are acked
//! one by one, so a slow delivery never holds back more of the prefetch. A put-back flushes what
//! it was holding back. An ack that waits loses nothing if the connection drops first: the
//! broker redelivers the message and the store finds it completed.
//!
//! Three things keep a `multiple` ack from taking a delivery it must not: a delivery is held
//! before the buffer it came from is let go (`Consumer::take`), a put-back marks its delivery
//! before it stops being held (`RabbitQueue::put_back`), and acks are sent under the consumer's
//! ack lock, skipping what an earlier `multiple` ack took (acking a tag twice closes the
//! channel).

use std::sync::Arc;

use lapin::options::{BasicAckOptions, BasicNackOptions};
use qhost_source::SourceError;

use crate::backend;
use crate::consumer::Consumer;

/// Acks the deliveries `acking` names (by their place in a settle call, consumer and tag), each
/// consumer's under its ack lock, as [`flush`] finds them ready; a tag an earlier `multiple`
/// ack covered (a settle that ran beside this one) is not acked again. The failures, by place.
pub(crate) async fn ack(acking: &[(usize, Arc<Consumer>, u64)]) -> Vec<(usize, SourceError)> {
    let mut failures = Vec::new();
    let mut rest: Vec<&(usize, Arc<Consumer>, u64)> = acking.iter().collect();
    while let Some((_, consumer, _)) = rest.first().copied() {
        let (mine, others): (Vec<_>, Vec<_>) = rest
            .into_iter()
            .partition(|(_, c, _)| Arc::ptr_eq(c, consumer));
        rest = others;
        let tags: Vec<u64> = mine.iter().map(|(_, _, t)| *t).collect();
        if let Err(e) = settle_tags(consumer, &tags).await {
            let failed = mine.iter().map(|(i, _, _)| (*i, backend(e.clone())));
            failures.extend(failed);
        }
    }
    failures
}

/// Sends the acks that have become safe on `consumer` since a delivery below them stopped
/// being held (a put-back).
pub(crate) async fn flush(consumer: &Consumer) -> Result<(), SourceError> {
    settle_tags(consumer, &[]).await.map_err(backend)
}

/// Adds `settled` to what waits to be acked on `consumer`, and acks what is ready.
async fn settle_tags(consumer: &Consumer, settled: &[u64]) -> Result<(), String> {
    let mut through = consumer.acked_through.lock().await;
    let settled: Vec<u64> = settled.iter().copied().filter(|t| *t > *through).collect();
    let (multiple, singles) = consumer.ready_to_ack(&settled);
    if let Some(tag) = multiple {
        let up_to = BasicAckOptions { multiple: true };
        (consumer.channel.basic_ack(tag, up_to).await).map_err(|e| format!("ack: {e}"))?;
        *through = tag;
    }
    for tag in singles {
        (consumer
            .channel
            .basic_ack(tag, BasicAckOptions::default())
            .await)
            .map_err(|e| format!("ack: {e}"))?;
    }
    Ok(())
}

pub(crate) async fn nack(consumer: &Consumer, tag: u64) -> Result<(), SourceError> {
    let requeue = BasicNackOptions {
        multiple: false,
        requeue: true,
    };
    (consumer.channel)
        .basic_nack(tag, requeue)
        .await
        .map_err(|e| backend(format!("nack: {e}")))
}
