//! `qhost replay`: recorded messages through a new version of a plugin and the one it would
//! replace, compared, with an exit code a deploy pipeline can gate on.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;

use crate::args::ReplayArgs;
use qhost::Config;
use qhost::replays::{Compared, Finding, Replay, Run, Side};

/// Exit codes, by what the replay found (0 when all agree).
const OUTCOMES_DIFFER: u8 = 3;
const EFFECTS_DIFFER: u8 = 4;
const UNREADABLE_LINES: u8 = 5;

pub(crate) async fn replay(config: Config, args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let old = match (args.against, args.serving) {
        (Some(file), _) => file,
        (None, Some(name)) => serving_file(&config, &name)?,
        (None, None) => anyhow::bail!("give --against FILE.wasm or --serving NAME"),
    };
    let text = read_messages(&args.messages)?;
    let replay = qhost::replays::replay_files(&config, &args.plugin, &old, &text).await?;
    for e in &replay.unreadable {
        eprintln!(
            "{}: {e} (left out; the rest were replayed)",
            args.messages.display()
        );
    }
    print(&replay);
    Ok(ExitCode::from(match replay.finding() {
        Finding::OutcomesDiffer => OUTCOMES_DIFFER,
        Finding::EffectsDiffer => EFFECTS_DIFFER,
        Finding::Unreadable => UNREADABLE_LINES,
        Finding::Agree => 0,
    }))
}

/// The file the plugins directory serves as `name`.
fn serving_file(config: &Config, name: &str) -> anyhow::Result<PathBuf> {
    let file = config.plugins_dir.join(format!("{name}.wasm"));
    anyhow::ensure!(
        name.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !name.is_empty(),
        "--serving takes a plugin name (letters, digits, `-`, `_`), not a path: `{name}`"
    );
    anyhow::ensure!(
        file.is_file(),
        "no plugin `{name}` is served from {} (no {})",
        config.plugins_dir.display(),
        file.display()
    );
    Ok(file)
}

fn read_messages(path: &Path) -> anyhow::Result<String> {
    String::from_utf8(super::read_input(path)?)
        .with_context(|| format!("{} is not UTF-8 text (JSON Lines)", path.display()))
}

fn print(replay: &Replay) {
    println!("old: {}", side(&replay.old));
    println!("new: {}", side(&replay.new));
    println!();
    println!(
        "{:>5}  {:<24}  {:<22}  {:<22}  {:<8}  http",
        "line", "message", "old", "new", "outbox"
    );
    for row in &replay.rows {
        print_row(row);
    }
    let count = |f: fn(&Compared) -> bool| replay.rows.iter().filter(|r| f(r)).count();
    println!();
    println!(
        "{} message(s) replayed: outcomes differ on {}, outboxes on {}, HTTP requests on {}; {} line(s) unreadable",
        replay.rows.len(),
        count(Compared::outcome_differs),
        count(Compared::outbox_differs),
        count(Compared::http_differs),
        replay.unreadable.len()
    );
    let n = replay.rows.len().max(1) as f64;
    for (name, s) in [("old", &replay.old), ("new", &replay.new)] {
        let costs = s.costs.map_or(String::new(), |c| {
            format!(
                " (instantiate {:.3} ms, call {:.3} ms)",
                c.instantiate.as_secs_f64() * 1e3 / n,
                c.call.as_secs_f64() * 1e3 / n
            )
        });
        println!(
            "cost {name}: {:.3} ms per message{costs}",
            s.took.as_secs_f64() * 1e3 / n
        );
    }
}

fn side(s: &Side) -> String {
    format!("{} {}  ({})", s.plugin, s.version, s.path.display())
}

fn print_row(row: &Compared) {
    let same = |differs: bool| if differs { "DIFFERS" } else { "same" };
    let mark = if row.outcome_differs() { "*" } else { " " };
    println!(
        "{:>4}{mark}  {:<24}  {:<22}  {:<22}  {:<8}  {}",
        row.line,
        clipped(&row.id, 24),
        clipped(&row.old.ended.to_string(), 22),
        clipped(&row.new.ended.to_string(), 22),
        same(row.outbox_differs()),
        same(row.http_differs())
    );
    if row.outcome_differs() {
        println!("        outcome old: {}", row.old.ended);
        println!("        outcome new: {}", row.new.ended);
    }
    if row.outbox_differs() {
        println!("        outbox old: {}", outbox(&row.old));
        println!("        outbox new: {}", outbox(&row.new));
    }
    if row.http_differs() {
        println!("        http old:   {}", http(&row.old));
        println!("        http new:   {}", http(&row.new));
    }
}

fn outbox(run: &Run) -> String {
    if run.outbox.is_empty() {
        return "nothing".into();
    }
    (run.outbox.iter())
        .map(|m| {
            format!(
                "{} <- {}",
                m.queue,
                clipped(&String::from_utf8_lossy(&m.body), 60)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn http(run: &Run) -> String {
    if run.http.is_empty() {
        return "none".into();
    }
    (run.http.iter())
        .map(|r| {
            format!(
                "{} {} ({} bytes, sha256 {})",
                r.method,
                r.url,
                r.body_len,
                &r.body_sha256[..12.min(r.body_sha256.len())]
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `text` cut to `max` characters, with `…` where cut.
fn clipped(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max - 1).collect();
    cut.push('…');
    cut
}
