//! A message of several runs (an S3 notification's records): each run is a delivery of its
//! own — routed, keyed, leased, run and decided alone — and a *part* of the message, whose
//! fate it reports (`part`) instead of acting on the message. Once every part has ended, the
//! message takes one fate for all of them, here:
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
//! message's order (`batch`).

use super::delivery::{Delivery, Fate, Lettered};
use super::part::PartFate;

/// Ends the message by its parts' fates (see the module docs). Each part was counted as it
/// ended; the message's own fate is not counted again.
pub(crate) async fn settle(whole: Delivery, fates: &[Option<PartFate>]) -> Fate {
    let dead: Vec<String> = (fates.iter().enumerate())
        .filter_map(|(i, f)| match f {
            Some(PartFate::Dead(reason)) => Some(format!("part {}: {reason}", i + 1)),
            _ => None,
        })
        .collect();
    if !dead.is_empty() {
        let attempts = whole.msg().delivery_count;
        return match whole.send_dead_letter(&dead.join("; "), attempts).await {
            Lettered::Sent => whole.delete(),
            Lettered::Kept(delay) => whole.hide(delay).await,
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
