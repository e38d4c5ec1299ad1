//! The idle-instance budget: instances that plugins keep for reuse, counted across all plugins.
//!
//! Each idle instance holds a slot of the engine's instance pool. The pool is sized for the
//! in-flight cap plus some spare, so idle instances must stay within that spare however many
//! plugins reuse theirs; otherwise in-flight messages would find the pool exhausted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Slots left for idle instances, shared by every plugin of one engine.
#[derive(Clone, Debug)]
pub struct IdleBudget(Arc<AtomicUsize>);

/// One idle instance's share of the budget; given back when dropped.
#[derive(Debug)]
pub struct IdleSlot(Arc<AtomicUsize>);

impl IdleBudget {
    /// A budget of `slots` idle instances.
    pub fn new(slots: usize) -> Self {
        IdleBudget(Arc::new(AtomicUsize::new(slots)))
    }

    /// A slot, if any is left.
    pub fn take(&self) -> Option<IdleSlot> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .ok()
            .map(|_| IdleSlot(Arc::clone(&self.0)))
    }
}

impl Drop for IdleSlot {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_run_out_and_come_back() {
        let budget = IdleBudget::new(2);
        let (a, b) = (budget.take(), budget.take());
        assert!(a.is_some() && b.is_some());
        assert!(budget.take().is_none(), "never more than the budget");
        drop(a);
        assert!(budget.take().is_some());
    }
}
