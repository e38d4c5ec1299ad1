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
    println!(
        "{:<28} {:>8} {:<8} {:<22} {:<7} {:>9} {:>9} {:>9}",
        "host", "state", "version", "backends", "ready", "up", "received", "acked"
    );
    for h in roster.statuses(None) {
        let state = match h.state {
            Liveness::Live => "live".to_string(),
            Liveness::Stopped => "stopped".to_string(),
            Liveness::Gone => format!("gone {}s", h.heartbeat_age_ms / 1000),
        };
        println!(
            "{:<28} {state:>8} {:<8} {:<22} {:<7} {:>8}s {:>9} {:>9}",
            h.id,
            h.version,
            h.backends,
            if h.ready { "yes" } else { "no" },
            h.up_secs,
            h.totals.received,
            h.totals.acked,
        );
    }
}
