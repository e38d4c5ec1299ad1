//! A message of several runs (an S3 notification's records): each run is a delivery of its
//! own — routed, keyed, leased, run and decided alone — and a *part* of the message, whose
//! fate it reports here instead of acting on the message. Once every part has ended, the
//! message takes one fate for all of them:
//!
//! | the parts                       | the message                                              |
//! |---------------------------------|----------------------------------------------------------|
//! | all done (acked, duplicates, expired) | deleted                                            |
//! | one or more dead-lettered       | one dead letter naming each part's reason, then deleted  |
//! | otherwise, one or more put back | put back after the longest of their delays               |
//! | otherwise (a lease lost)        | left to its visibility timeout                           |
//!
//! The runs that finished are completed keys, so a redelivered or redriven message runs only
//! the parts that had not: the others are duplicates. The parts run one after another, in the
//! message's order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::Instrument as _;

use super::batch;
use super::context::QueueCtx;
use super::delivery::{Delivery, Fate, Lettered, PluginRef};
use super::route::{Routed, Unroutable};
use crate::message::Received;
use crate::payload::Body;
use crate::stats::Event;

/// How one part ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PartFate {
    /// Done: acked, a duplicate, or expired.
    Done,
    /// Put back, to come again after this long.
    Back(Duration),
    /// Dead-lettered with this reason.
    Dead(String),
    /// Its lease passed to another worker.
    Lapsed,
}

/// The parts of one message, and how each ended.
#[derive(Debug)]
pub(crate) struct Parts {
    fates: Mutex<Vec<Option<PartFate>>>,
}

impl Parts {
    /// `n` parts, none ended.
    pub(crate) fn new(n: usize) -> Arc<Parts> {
        Arc::new(Parts {
            fates: Mutex::new(vec![None; n]),
        })
    }
}

/// One part of a message: where its delivery reports its fate.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    parts: Arc<Parts>,
    index: usize,
}

impl Parts {
    /// Part `index`.
    pub(crate) fn part(self: &Arc<Self>, index: usize) -> Part {
        Part {
            parts: Arc::clone(self),
            index,
        }
    }

    fn fates(&self) -> Vec<Option<PartFate>> {
        self.fates.lock().map(|f| f.clone()).unwrap_or_default()
    }
}

impl Part {
    /// Reports how this part ended. The first report stands: a dead letter's delete after it
    /// does not make the part done.
    pub(crate) fn end(&self, fate: PartFate) -> Fate {
        let back = !matches!(fate, PartFate::Done | PartFate::Dead(_));
        if let Ok(mut fates) = self.parts.fates.lock() {
            fates[self.index].get_or_insert(fate);
        }
        if back { Fate::Back } else { Fate::Gone }
    }
}

/// Runs a message's parts in order, then ends the message by how they ended.
pub(crate) async fn run(
    queue: Arc<QueueCtx>,
    msg: Received,
    body: Body,
    runs: Vec<Result<Routed, Box<Unroutable>>>,
) -> Fate {
    let mut parts = None;
    let mut verified = false;
    for run in runs {
        let delivery = match &run {
            Ok(routed) => &routed.delivery,
            Err(unroutable) => &unroutable.delivery,
        };
        verified |= delivery.is_payload_verified();
        parts = delivery.part().map(|p| Arc::clone(&p.parts)).or(parts);
        let span = tracing::info_span!("part");
        match run {
            Ok(routed) => batch::lease_one(routed).instrument(span).await,
            Err(unroutable) => unroutable.end().instrument(span).await,
        };
    }
    let fates = parts.map(|p| p.fates()).unwrap_or_default();
    let plugin = PluginRef::Named(queue.config.plugin.clone());
    let mut whole = Delivery::new(queue, msg, body, plugin);
    if verified {
        whole.payload_verified();
    }
    settle(whole, &fates).await
}

/// Ends the message by its parts' fates (see the module docs). Each part was counted as it
/// ended; the message's own fate is not counted again.
async fn settle(whole: Delivery, fates: &[Option<PartFate>]) -> Fate {
    let dead: Vec<String> = (fates.iter().enumerate())
        .filter_map(|(i, f)| match f {
            Some(PartFate::Dead(reason)) => Some(format!("part {}: {reason}", i + 1)),
            _ => None,
        })
        .collect();
    if !dead.is_empty() {
        let attempts = whole.msg().receive_count;
        return match whole.send_dead_letter(&dead.join("; "), attempts).await {
            Lettered::Sent => whole.delete(),
            Lettered::Kept(delay) => whole.put_back(delay, Event::Deferred).await,
        };
    }
    let back = (fates.iter())
        .filter_map(|f| match f {
            Some(PartFate::Back(delay)) => Some(*delay),
            _ => None,
        })
        .max();
    if let Some(delay) = back {
        return whole.hide(delay).await;
    }
    if fates.iter().all(|f| *f == Some(PartFate::Done)) {
        return whole.done();
    }
    // A lease lost (or a part that never ended): the message comes back when its
    // visibility lapses, and finds what finished completed.
    Fate::Back
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_fate_a_part_reports_stands() {
        let parts = Parts::new(2);
        let (a, b) = (parts.part(0), parts.part(1));
        assert_eq!(a.end(PartFate::Dead("no".into())), Fate::Gone);
        assert_eq!(a.end(PartFate::Done), Fate::Gone);
        assert_eq!(b.end(PartFate::Back(Duration::from_secs(2))), Fate::Back);
        assert_eq!(
            parts.fates(),
            [
                Some(PartFate::Dead("no".into())),
                Some(PartFate::Back(Duration::from_secs(2)))
            ]
        );
    }
}
