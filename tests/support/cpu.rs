//! CPU time of this process, user and kernel apart, for benchmarks that report CPU per message:
//! on a shared machine wall-clock rates drift, while the CPU a message costs stays put.

use std::time::Duration;

/// User and kernel CPU time this process has used so far, all threads together.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTime {
    /// Time in user space.
    pub user: Duration,
    /// Time in the kernel on this process's behalf.
    pub system: Duration,
}

impl CpuTime {
    /// The process's CPU time now (`getrusage(RUSAGE_SELF)`).
    pub fn now() -> Self {
        // SAFETY: `getrusage` writes a `rusage` into the pointer it is given and nothing else;
        // a zeroed `rusage` is a valid value of the type.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut usage);
            usage
        };
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        CpuTime {
            user: time(usage.ru_utime),
            system: time(usage.ru_stime),
        }
    }

    /// CPU time used since `self` was taken.
    pub fn elapsed(self) -> CpuTime {
        let now = CpuTime::now();
        CpuTime {
            user: now.user.saturating_sub(self.user),
            system: now.system.saturating_sub(self.system),
        }
    }

    /// Microseconds of CPU per item, for `n` items.
    pub fn micros_per(self, n: usize) -> f64 {
        (self.user + self.system).as_secs_f64() * 1e6 / n as f64
    }

    /// The kernel's share of the time, 0 to 1.
    pub fn kernel_share(self) -> f64 {
        let total = (self.user + self.system).as_secs_f64();
        if total == 0.0 {
            0.0
        } else {
            self.system.as_secs_f64() / total
        }
    }
}
