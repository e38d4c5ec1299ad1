//! One run of a message that holds several (an S3 notification's records): where its delivery
//! reports how it ended instead of acting on the message (see `parts`, which ends the message
//! once every part has). A leaf: the delivery that reports and the code that settles both
//! import it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    pub(crate) parts: Arc<Parts>,
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

    /// How each part ended (`None`: not yet).
    pub(crate) fn fates(&self) -> Vec<Option<PartFate>> {
        self.fates.lock().map(|f| f.clone()).unwrap_or_default()
    }
}

impl Part {
    /// Reports how this part ended. The first report stands: a dead letter's delete after it
    /// does not make the part done.
    /// Whether the part is still to come back (put back, or its lease lost).
    pub(crate) fn end(&self, fate: PartFate) -> bool {
        let back = !matches!(fate, PartFate::Done | PartFate::Dead(_));
        if let Ok(mut fates) = self.parts.fates.lock() {
            fates[self.index].get_or_insert(fate);
        }
        back
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_fate_a_part_reports_stands() {
        let parts = Parts::new(2);
        let (a, b) = (parts.part(0), parts.part(1));
        assert!(!a.end(PartFate::Dead("no".into())));
        assert!(!a.end(PartFate::Done));
        assert!(b.end(PartFate::Back(Duration::from_secs(2))));
        assert_eq!(
            parts.fates(),
            [
                Some(PartFate::Dead("no".into())),
                Some(PartFate::Back(Duration::from_secs(2)))
            ]
        );
    }
}
