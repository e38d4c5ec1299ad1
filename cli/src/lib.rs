//! The `qhost` command: parses flags, sets up logging, calls one library operation per command
//! and prints what it returns. Everything it does is the `qhost` library's, so embedders and
//! tests reach the same code; the binaries (`qhost`, and the tests' `qhost-under-test`) are
//! three-line mains calling [`main`].
//!
//! # Layout
//!
//! | module     | role                                                              |
//! |------------|-------------------------------------------------------------------|
//! | `args`     | the command line as clap reads it                                 |
//! | `commands` | one file per family of commands: run, send/peek/purge, invoke, dlq, plugins and check |

mod args;
mod commands;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;

use args::{Cli, Command, DlqCommand, Global, PluginsCommand};
use commands::*;
use qhost::config::{self, Config};

/// How long the process waits, once done, for threads still busy (a guest blocked in a host
/// call).
const EXIT_WAIT: Duration = Duration::from_secs(1);

pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match qhost::logging::LogFormat::from_env() {
        Ok(format) => qhost::logging::init(format),
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(dispatch(cli));
    // A native handler or a store call still blocking a thread does not hold the process (what
    // it held was released, or comes back after its visibility timeout).
    runtime.shutdown_timeout(EXIT_WAIT);
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The configuration file to read: the one named, or `./qhost.toml` when there is one.
fn config_file(global: &Global) -> Option<PathBuf> {
    let named = global.config.clone();
    named.or_else(|| Some(PathBuf::from(DEFAULT_CONFIG)).filter(|p| p.is_file()))
}

/// The configuration file read when none is named, if it exists.
const DEFAULT_CONFIG: &str = "qhost.toml";

fn load_config(global: &Global) -> anyhow::Result<Config> {
    let file = config_file(global);
    let mut raw = match &file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading config file {}", path.display()))?;
            let mut raw = config::parse_raw(&text)
                .with_context(|| format!("in config file {}", path.display()))?;
            let dir = std::path::absolute(path)?.parent().map(PathBuf::from);
            raw.relative_to(&dir.unwrap_or_default());
            if global.config.is_none() {
                tracing::info!(file = %path.display(), "using the configuration file in this directory");
            }
            raw
        }
        None => config::file::RawConfig::default(),
    };
    if let Some(dir) = &global.plugins_dir {
        raw.plugins_dir = Some(dir.clone());
    }
    if let Some(dir) = &global.data_dir {
        raw.data_dir = Some(dir.clone());
    }
    let context = file
        .as_ref()
        .map(|p| format!("in config file {}", p.display()));
    Config::from_raw(raw).with_context(|| context.unwrap_or_else(|| "in the configuration".into()))
}

async fn dispatch(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    if let Command::New {
        language,
        name,
        dir,
    } = &cli.command
    {
        let dir = dir.clone().unwrap_or_else(|| PathBuf::from(name));
        for file in qhost::scaffold::create(*language, name, &dir)? {
            println!("created {}", file.display());
        }
        println!(
            "next: the build and try-out commands are in {}",
            dir.join("README.md").display()
        );
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let config = load_config(&cli.global)?;
    match cli.command {
        Command::Run {
            until_idle,
            fail_on_dead_letter,
            allow_unloaded_plugins,
            admin_listen,
        } => {
            let mut config = config;
            if let Some(text) = admin_listen {
                config.admin_listen = config::admin_listen(&text)?;
            }
            config.allow_unloaded_plugins |= allow_unloaded_plugins;
            let dead = run(config, until_idle).await?;
            if fail_on_dead_letter && dead > 0 {
                eprintln!("error: {dead} message(s) were dead-lettered (--fail-on-dead-letter)");
                return Ok(std::process::ExitCode::from(DEAD_LETTERED));
            }
            Ok(())
        }
        Command::Send(args) => send(config, args).await,
        Command::Peek { queue, limit } => peek(config, &queue, limit).await,
        Command::Purge { queue, yes } => purge(config, &queue, yes).await,
        Command::Invoke(args) => return invoke(config, args).await,
        Command::Dlq {
            command: DlqCommand::Peek { queue, limit },
        } => dlq_peek(config, &queue, limit).await,
        Command::Dlq {
            command: DlqCommand::Redrive { queue, limit, to },
        } => dlq_redrive(config, &queue, limit, to.as_deref()).await,
        Command::New { .. } => unreachable!("handled before the configuration is read"),
        Command::Check => check_deploy(&config, config_file(&cli.global).as_deref()).await,
        Command::Plugins {
            command: PluginsCommand::Check { file },
        } => check(&config, &file),
        Command::Plugins {
            command: PluginsCommand::List,
        } => list(&config).await,
    }
    .map(|()| std::process::ExitCode::SUCCESS)
}
