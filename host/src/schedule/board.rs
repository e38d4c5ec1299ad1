//! What this host last read of each schedule, for the console and `/api/schedules`: the admin
//! listener answers from what the host keeps and calls no backend, so the scheduler posts each
//! schedule's status here on every pass (at least once a second).

use std::sync::Mutex;

use super::ops::ScheduleStatus;

/// The schedules' last statuses, in configuration order.
#[derive(Debug, Default)]
pub struct Board {
    statuses: Mutex<Vec<ScheduleStatus>>,
}

impl Board {
    /// Posts `status`, replacing the one of the same name.
    pub(crate) fn post(&self, status: ScheduleStatus) {
        let mut all = self
            .statuses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match all.iter_mut().find(|s| s.name == status.name) {
            Some(old) => *old = status,
            None => all.push(status),
        }
    }

    /// Every schedule's last status.
    pub(crate) fn snapshot(&self) -> Vec<ScheduleStatus> {
        self.statuses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
