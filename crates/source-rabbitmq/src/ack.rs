//! Acknowledging deliveries. A settled batch goes in one `multiple` ack up to its highest tag
//! when nothing below that tag is still handed out or held back for a delay (the usual case: a
//! consumer that settles in order); otherwise one ack each. Three things keep a `multiple` ack
//! from taking a delivery it must not: a delivery is held before the buffer it came from is
//! let go (`Consumer::take`), a put-back marks its delivery before it stops being held
//! (`RabbitQueue::put_back`), and acks are sent under the consumer's ack lock, skipping what an
//! earlier `multiple` ack took (acking a tag twice closes the channel).

use std::sync::Arc;

use lapin::options::{BasicAckOptions, BasicNackOptions};
use qhost_source::SourceError;

use crate::backend;
use crate::consumer::Consumer;

/// Acks the deliveries `acking` names (by their place in a settle call, consumer and tag), each
/// consumer's under its ack lock: one `multiple` ack up to the highest tag where nothing below
/// it is still held (the usual case: a batch settled in order), else one ack each; a tag an
/// earlier `multiple` ack covered (a settle that ran beside this one) is not acked again. The
/// failures, by place.
pub(crate) async fn ack(acking: &[(usize, Arc<Consumer>, u64)]) -> Vec<(usize, SourceError)> {
    let mut failures = Vec::new();
    let mut rest: Vec<&(usize, Arc<Consumer>, u64)> = acking.iter().collect();
    while let Some((_, consumer, _)) = rest.first().copied() {
        let (mine, others): (Vec<_>, Vec<_>) = rest
            .into_iter()
            .partition(|(_, c, _)| Arc::ptr_eq(c, consumer));
        rest = others;
        let mut through = consumer.acked_through.lock().await;
        let mine: Vec<_> = mine.into_iter().filter(|(_, _, t)| *t > *through).collect();
        let highest = mine.iter().map(|(_, _, t)| *t).max().unwrap_or(0);
        if mine.len() > 1 && consumer.settled_through(highest) {
            let multiple = BasicAckOptions { multiple: true };
            match consumer.channel.basic_ack(highest, multiple).await {
                Ok(()) => *through = highest,
                Err(e) => {
                    let text = e.to_string();
                    let failed = mine
                        .iter()
                        .map(|(i, _, _)| (*i, backend(format!("ack: {text}"))));
                    failures.extend(failed);
                }
            }
            continue;
        }
        for (i, _, tag) in mine {
            if let Err(e) = consumer
                .channel
                .basic_ack(*tag, BasicAckOptions::default())
                .await
            {
                failures.push((*i, backend(format!("ack: {e}"))));
            }
        }
    }
    failures
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
