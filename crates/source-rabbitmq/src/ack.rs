//! Acknowledging deliveries. The tags of a settled batch that lie below every delivery still
//! out (handed out, or held back for a delay) go in one `multiple` ack up to the highest of
//! them: all of a batch when the consumer settles in order, its older part when runs end out
//! of order. The rest are acked one each. Every frame of a batch, the `multiple` ack's too, is
//! queued before any is awaited, so the client writes the batch in one go: each write wakes the
//! broker, which costs more than the frames.
//! Three things keep a `multiple` ack from taking a delivery it must not: a delivery is held
//! before the buffer it came from is let go (`Consumer::take`), a put-back marks its delivery
//! before it stops being held (`RabbitQueue::put_back`), and acks are sent under the
//! consumer's ack lock, skipping what an earlier `multiple` ack took (acking a tag twice
//! closes the channel).

use std::sync::Arc;

use lapin::options::{BasicAckOptions, BasicNackOptions};
use qhost_source::SourceError;

use crate::backend;
use crate::consumer::Consumer;

/// A delivery to ack: its place in a settle call, its consumer and its tag.
type Acking = (usize, Arc<Consumer>, u64);

/// Acks the deliveries `acking` names, each consumer's under its ack lock (see the module's
/// docs); a tag an earlier `multiple` ack covered (a settle that ran beside this one) is not
/// acked again. The failures, by place.
pub(crate) async fn ack(acking: &[Acking]) -> Vec<(usize, SourceError)> {
    let mut failures = Vec::new();
    let mut rest: Vec<&Acking> = acking.iter().collect();
    while let Some((_, consumer, _)) = rest.first().copied() {
        let (mine, others): (Vec<_>, Vec<_>) = rest
            .into_iter()
            .partition(|(_, c, _)| Arc::ptr_eq(c, consumer));
        rest = others;
        let mut through = consumer.acked_through.lock().await;
        let mut mine: Vec<&Acking> = mine.into_iter().filter(|(_, _, t)| *t > *through).collect();
        mine.sort_unstable_by_key(|(_, _, t)| *t);
        let out = consumer.lowest_out();
        let below = mine.partition_point(|(_, _, t)| out.is_none_or(|o| *t < o));
        let (together, alone) = match below {
            0 | 1 => (&mine[..0], &mine[..]),
            _ => mine.split_at(below),
        };
        let multiple = together.last().map(|(_, _, highest)| async move {
            let options = BasicAckOptions { multiple: true };
            (
                *highest,
                consumer.channel.basic_ack(*highest, options).await,
            )
        });
        let one_each = alone.iter().map(|(i, _, tag)| async move {
            let sent = consumer.channel.basic_ack(*tag, BasicAckOptions::default());
            (*i, sent.await)
        });
        // Every frame is queued before the first write is awaited: one write for the batch.
        let (multiple, one_each) = futures_util::future::join(
            futures_util::future::OptionFuture::from(multiple),
            futures_util::future::join_all(one_each),
        )
        .await;
        match multiple {
            Some((highest, Ok(()))) => *through = highest,
            Some((_, Err(e))) => failures.extend(failed(together, &e)),
            None => {}
        }
        for (i, sent) in one_each {
            if let Err(e) = sent {
                failures.push((i, backend(format!("ack: {e}"))));
            }
        }
    }
    failures
}

/// Each of `acks` failed with `e`.
fn failed<'a>(
    acks: &'a [&Acking],
    e: &'a lapin::Error,
) -> impl Iterator<Item = (usize, SourceError)> + 'a {
    acks.iter()
        .map(move |(i, _, _)| (*i, backend(format!("ack: {e}"))))
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
