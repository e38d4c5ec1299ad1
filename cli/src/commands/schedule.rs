//! `qhost schedule list|pause|resume|backfill|fire`: the fleet's schedules, through the
//! library's verbs on their records.

use qhost::Config;
use qhost::schedule::{ScheduleRecord, ScheduleStatus};

use crate::args::ScheduleCommand;

/// Runs one `qhost schedule` command.
pub(crate) async fn schedule(config: &Config, command: ScheduleCommand) -> anyhow::Result<()> {
    match command {
        ScheduleCommand::List => {
            let all = qhost::schedule::list(config).await?;
            if all.is_empty() {
                println!(
                    "no schedules: add a [[schedule]] to the configuration (docs/schedules.md)"
                );
            }
            if let Some(first) = all.first() {
                println!(
                    "this machine's clock: {} from the store's (schedules fire on the store's clock)",
                    qhost::schedule::seconds_text(first.clock_skew_ms)
                );
            }
            all.iter().for_each(print_status);
        }
        ScheduleCommand::Pause { name } => {
            let rec = qhost::schedule::pause(config, &name).await?;
            let by = rec.paused.map(|p| p.by).unwrap_or_default();
            println!(
                "{name}: paused (by {by}); every host sharing this store follows within a second"
            );
        }
        ScheduleCommand::Resume { name } => {
            let resumed = qhost::schedule::resume(config, &name).await?;
            if resumed.was_paused {
                println!(
                    "{name}: resumed; {} tick(s) fell while it was paused and are counted as skipped (`qhost schedule backfill` fires them)",
                    resumed.skipped
                );
            } else {
                println!("{name}: was not paused");
            }
        }
        ScheduleCommand::Backfill { name, from, to } => {
            let done = qhost::schedule::backfill(config, &name, &from, &to).await?;
            for tick in &done.fired {
                println!("{name}: fired {tick}");
            }
            println!(
                "{name}: {} tick(s) fired, {} already decided (fired, or skipped for an overlap)",
                done.fired.len(),
                done.already
            );
        }
        ScheduleCommand::Fire { name } => {
            let tick = qhost::schedule::fire_now(config, &name).await?;
            println!("{name}: fired an extra tick, {tick} (key schedule:{name}:by-hand:{tick})");
        }
    }
    Ok(())
}

fn print_status(s: &ScheduleStatus) {
    println!(
        "{}: `{}` in {}, sends {}; overlap {}",
        s.name, s.cron, s.timezone, s.sends, s.overlap
    );
    println!("  next:    {}", s.next.join(", "));
    let Some(rec) = &s.record else {
        println!("  no host has run it yet");
        return;
    };
    if let Some(p) = &rec.paused {
        println!("  PAUSED by {} at {}", p.by, ms_time(p.at_ms));
    }
    match &rec.last_fired {
        Some(f) => println!(
            "  last:    {} by {} (sent {}, lag {}; that host's clock {} from the store's)",
            f.label,
            f.host,
            ms_time(f.at_ms),
            qhost::schedule::seconds_text(f.lag_ms()),
            qhost::schedule::seconds_text(f.skew_ms)
        ),
        None => println!("  last:    none fired yet"),
    }
    println!("  counts:  {}", counts(rec));
    if !rec.recent_missed.is_empty() {
        let missed: Vec<String> = (rec.recent_missed.iter()).map(|t| sec_time(*t)).collect();
        println!("  missed:  {}", missed.join(", "));
    }
    if let Some(held) = rec.held {
        println!(
            "  held:    {} (waiting for the previous tick's message)",
            sec_time(held)
        );
    }
}

fn counts(rec: &ScheduleRecord) -> String {
    format!(
        "{} fired, {} missed, {} skipped",
        rec.fired, rec.missed, rec.skipped
    )
}

fn ms_time(ms: u64) -> String {
    qhost::schedule::time_text(ms as i64 / 1000)
}

fn sec_time(secs: i64) -> String {
    qhost::schedule::time_text(secs)
}
