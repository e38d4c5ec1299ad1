//! `qhost fleet [pause|resume QUEUE]`: the hosts sharing this configuration's store, and the
//! queues paused on all of them, through the library's verbs on the fleet's records.

use qhost::Config;
use qhost::fleet::{Liveness, Roster};

use crate::args::FleetCommand;

/// Runs one `qhost fleet` command.
pub(crate) async fn fleet(config: &Config, command: Option<FleetCommand>) -> anyhow::Result<()> {
    match command {
        None => {
            let (roster, pauses) = qhost::fleet::status(config).await?;
            print_roster(&roster);
            for (queue, p) in &pauses.queues {
                println!("queue {queue}: paused fleet-wide by {}", p.by);
            }
        }
        Some(FleetCommand::Pause { queue }) => {
            let changed = qhost::fleet::pause(config, &queue).await?;
            let was = if changed {
                "paused"
            } else {
                "was already paused"
            };
            println!(
                "{queue}: {was}; every host sharing this store stops receiving it within a second (messages being handled finish)"
            );
        }
        Some(FleetCommand::Resume { queue }) => {
            let changed = qhost::fleet::resume(config, &queue).await?;
            let was = if changed {
                "resumed; every host receives it again within a second"
            } else {
                "was not paused"
            };
            println!("{queue}: {was}");
        }
    }
    Ok(())
}

fn print_roster(roster: &Roster) {
    if roster.hosts.is_empty() {
        println!("no host has written to this store's fleet record in the last hour");
        return;
    }
    let now = now_ms();
    println!(
        "{:<28} {:>8} {:<8} {:<22} {:<7} {:>9} {:>9} {:>9}",
        "host", "state", "version", "backends", "ready", "up", "received", "acked"
    );
    for (id, h) in &roster.hosts {
        let state = match h.liveness(now) {
            Liveness::Live => "live".to_string(),
            Liveness::Stopped => "stopped".to_string(),
            Liveness::Gone => format!("gone {}s", now.saturating_sub(h.seen_ms) / 1000),
        };
        let totals = h.queues.values().fold(qhost::Fates::default(), |mut t, f| {
            t.add(f);
            t
        });
        println!(
            "{id:<28} {state:>8} {:<8} {:<22} {:<7} {:>8}s {:>9} {:>9}",
            h.version,
            h.backends,
            if h.ready { "yes" } else { "no" },
            h.seen_ms.saturating_sub(h.started_ms) / 1000,
            totals.received,
            totals.acked,
        );
    }
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| d.as_millis() as u64)
}
