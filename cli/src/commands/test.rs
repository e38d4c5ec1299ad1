//! `qhost test`: a handler's test files run, a line per case and a summary, JUnit XML for CI,
//! reruns on change; `qhost test --record` and `qhost fixture`, which write cases.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use crate::args::{FixtureArgs, TestArgs};
use qhost::Config;
use qhost::handler_tests::TestRun;

pub(crate) async fn test(config: Config, args: TestArgs) -> anyhow::Result<ExitCode> {
    if let (Some(messages), Some(plugin)) = (&args.record, &args.plugin) {
        return record(&config, messages, plugin).await;
    }
    loop {
        let files = qhost::handler_tests::test_files(&config, &args.paths)?;
        let (kept, listed) = (config.clone(), files.clone());
        let run =
            tokio::task::spawn_blocking(move || qhost::handler_tests::run_files(&kept, &listed))
                .await
                .context("the test runner stopped")??;
        print(&run);
        if let Some(junit) = &args.junit {
            std::fs::write(junit, run.junit())
                .with_context(|| format!("writing {}", junit.display()))?;
        }
        if !args.watch {
            return Ok(if run.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        let watched = qhost::handler_tests::watched_by_tests(&config, &run, &files);
        // Armed before it is announced: a change made once this line is out is seen.
        let watch = qhost::handler_tests::TestWatch::start(&watched)?;
        println!(
            "\nwatching {} path(s) for changes (Ctrl-C stops)",
            watched.len()
        );
        let changed = tokio::task::spawn_blocking(move || watch.next())
            .await
            .context("the watcher stopped")??;
        let names: Vec<String> = changed.iter().map(|p| shown(p)).collect();
        println!("\n== changed: {}; running again\n", names.join(", "));
    }
}

/// A line per case, grouped by file, what differed under each failure, and the summary.
fn print(run: &TestRun) {
    for file in &run.files {
        println!("{} (plugin {})", shown(&file.path), shown(&file.plugin));
        for case in &file.cases {
            let took = millis(case.took);
            if case.passed() {
                println!("  pass  {} ({took})", case.name);
                continue;
            }
            println!("  FAIL  {} ({took})", case.name);
            for difference in &case.differences {
                println!("        {difference}");
            }
        }
        if let Some(why) = &file.broken {
            println!("  ERROR {why}");
        }
    }
    for error in &run.errors {
        println!("ERROR {error}");
    }
    let broken = run.broken();
    let errors = match broken {
        0 => String::new(),
        1 => ", 1 error".to_string(),
        n => format!(", {n} errors"),
    };
    println!();
    println!("{} passed, {} failed{errors}", run.passed(), run.failed());
}

fn millis(took: Duration) -> String {
    format!("{} ms", took.as_millis())
}

fn shown(path: &Path) -> String {
    let here = std::env::current_dir().unwrap_or_default();
    path.strip_prefix(&here)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// `qhost test --record`: the test file, on standard output.
async fn record(config: &Config, messages: &Path, plugin: &Path) -> anyhow::Result<ExitCode> {
    let text = String::from_utf8(super::read_input(messages)?)
        .with_context(|| format!("{} is not UTF-8 text (JSON Lines)", messages.display()))?;
    let named = plugin_ref(plugin);
    let (config, plugin) = (config.clone(), plugin.to_path_buf());
    let recorded = tokio::task::spawn_blocking(move || {
        qhost::handler_tests::record_cases(&config, &plugin, &named, &text)
    })
    .await
    .context("the recorder stopped")??;
    for e in &recorded.unreadable {
        eprintln!("{}: {e} (left out)", messages.display());
    }
    print!("{}", recorded.toml);
    eprintln!("recorded {} case(s)", recorded.cases);
    Ok(ExitCode::SUCCESS)
}

/// How a recorded test file names `plugin`: as given, so the file runs from where it was made.
fn plugin_ref(plugin: &Path) -> String {
    let shown = plugin.display().to_string();
    if shown.contains('/') || shown.ends_with(".wasm") {
        return shown;
    }
    PathBuf::from(".").join(plugin).display().to_string()
}

/// `qhost fixture KIND`: a case holding the message, ready to paste.
pub(crate) fn fixture(args: &FixtureArgs) -> anyhow::Result<()> {
    let fixture = qhost::fixture(&args.kind, args.body.as_deref()).map_err(anyhow::Error::msg)?;
    let mut case = toml::Table::new();
    case.insert("name".into(), format!("a {} message", args.kind).into());
    match &fixture.celery_task {
        Some(task) => {
            let task = toml::Value::try_from(task).context("writing the task as TOML")?;
            case.insert("celery-task".into(), task)
        }
        None => case.insert("body".into(), fixture.body.clone().into()),
    };
    if !fixture.attributes.is_empty() {
        let mut attributes = toml::Table::new();
        for a in &fixture.attributes {
            let value = match &a.value {
                qhost::AttributeValue::Number(n) => {
                    let mut typed = toml::Table::new();
                    typed.insert("number".into(), n.clone().into());
                    typed.into()
                }
                _ => a.text().unwrap_or_default().to_string().into(),
            };
            attributes.insert(a.name.clone(), value);
        }
        case.insert("attributes".into(), attributes.into());
    }
    let mut expect = toml::Table::new();
    expect.insert("outcome".into(), "ack".into());
    case.insert("expect".into(), expect.into());
    let mut file = toml::Table::new();
    file.insert("case".into(), toml::Value::Array(vec![case.into()]));
    println!(
        "# {} as its producer sends it; a queue reads it with format = \"{}\" (in a test file: [queue] format = \"{}\").",
        args.kind, fixture.format, fixture.format
    );
    if let Some(note) = fixture.note {
        println!("# {note}");
    }
    print!("{}", toml::to_string(&file).context("writing the case")?);
    Ok(())
}
