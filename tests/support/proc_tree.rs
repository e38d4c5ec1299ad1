//! CPU time and peak memory of another process and its descendants, read from `/proc`, for
//! benchmarks that compare separate processes (a Celery worker's prefork pool is a parent and
//! its children): what `getrusage` gives a process about itself.

use std::time::Duration;

/// Clock ticks per second, as `/proc/PID/stat` counts CPU time.
fn ticks_per_second() -> f64 {
    // SAFETY: `sysconf` only reads a system setting.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// `pid` and every live process below it.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let parent = all[i];
        let tasks = std::fs::read_dir(format!("/proc/{parent}/task"))
            .into_iter()
            .flatten();
        for task in tasks.flatten() {
            let path = task.path().join("children");
            let children = std::fs::read_to_string(path).unwrap_or_default();
            all.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
        i += 1;
    }
    all.sort_unstable();
    all.dedup();
    all
}

/// CPU time (user plus system) used so far by `pid`, its threads, and the children it has
/// waited for: fields 14-17 of `/proc/PID/stat`.
fn cpu_of(pid: u32) -> Duration {
    stat_cpu(&format!("/proc/{pid}/stat"), true)
}

/// The CPU time a `stat` file (`/proc/PID/stat`, `/proc/self/task/TID/stat`) counts: user and
/// system time (fields 14-15), and with `children` the waited-for children's (16-17).
pub fn stat_cpu(path: &str, children: bool) -> Duration {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    // The command name (field 2) may hold spaces; the fields after it follow its `)`.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime, stime, cutime, cstime are fields 14-17.
    let last = if children { 15 } else { 13 };
    let ticks: u64 = (11..last)
        .filter_map(|i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_secs_f64(ticks as f64 / ticks_per_second())
}

/// The user and system time a thread's `stat` file (`/proc/self/task/TID/stat`) counts,
/// apart (fields 14 and 15).
pub fn stat_cpu_apart(path: &str) -> crate::cpu::CpuTime {
    let none = crate::cpu::CpuTime {
        user: Duration::ZERO,
        system: Duration::ZERO,
    };
    let Ok(stat) = std::fs::read_to_string(path) else {
        return none;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return none;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        let ticks = fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
        Duration::from_secs_f64(ticks as f64 / ticks_per_second())
    };
    crate::cpu::CpuTime {
        user: field(11),
        system: field(12),
    }
}

/// CPU time used so far by `pid` and every process below it.
pub fn cpu(pid: u32) -> Duration {
    tree(pid).into_iter().map(cpu_of).sum()
}

/// The sum of each process's peak resident set (`VmHWM`) over `pid` and every process below
/// it, in bytes. Pages a prefork pool's children share with their parent count once per
/// process, as `ps` shows them.
pub fn peak_rss(pid: u32) -> u64 {
    tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .sum()
}

/// The processes whose command name (`/proc/PID/comm`) is `name` and whose command line holds
/// `holding` (a port, to tell one server of several apart; empty for any).
pub fn named(name: &str, holding: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let pids = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
    pids.filter(|pid| {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        comm.trim_end() == name && String::from_utf8_lossy(&cmdline).contains(holding)
    })
    .collect()
}

/// The machine's CPU time so far, busy and in all, over every core (`/proc/stat`'s `cpu`
/// line: busy is all but idle and iowait).
pub fn machine() -> (Duration, Duration) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = (stat.lines().next().unwrap_or_default())
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    let all: u64 = ticks.iter().sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    let secs = |t: u64| Duration::from_secs_f64(t as f64 / ticks_per_second());
    (secs(all - idle), secs(all))
}
