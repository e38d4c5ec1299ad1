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
//! | `commands` | one file per family of commands: run, send/peek/purge, invoke, dlq, plugins and check, celery |

mod args;
mod commands;

/// The process's allocator, in every binary that links this crate (the `qhost` command and the
/// tests' `qhost-under-test`): mimalloc took 6–12% off the CPU per delivery of the SQS path,
/// where malloc, free and memmove were about a fifth of it (docs/benchmarks.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser as _;

use args::{
    CeleryCommand, Cli, Command, DlqCommand, Global, KvCommand, NewArgs, PluginsCommand, RunFlags,
};
use commands::*;
use qhost::{Config, Overrides};

/// How long the process waits, once done, for threads still busy (a guest blocked in a host
/// call).
const EXIT_WAIT: Duration = Duration::from_secs(1);

pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match qhost::LogFormat::from_env() {
        Ok(format) => {
            let voice = match cli.command {
                Command::Run(_) => qhost::Voice::Host,
                Command::Invoke(_) => qhost::Voice::Handler,
                _ => qhost::Voice::Command,
            };
            qhost::init_logging(format, cli.global.verbosity(voice))
        }
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

fn load_config(global: &Global, run: Option<&RunFlags>) -> anyhow::Result<Config> {
    let file = config_file(global);
    if let (Some(path), None) = (&file, &global.config) {
        tracing::info!(file = %path.display(), "using the configuration file in this directory");
    }
    let overrides = Overrides {
        plugins_dir: global.plugins_dir.clone(),
        data_dir: global.data_dir.clone(),
        admin_listen: run.and_then(|r| r.admin_listen.clone()),
        allow_unloaded_plugins: run.is_some_and(|r| r.allow_unloaded_plugins),
    };
    Config::load(file.as_deref(), overrides)
}

async fn dispatch(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    let global = &cli.global;
    let config = || load_config(global, None);
    match cli.command {
        Command::New(args) => new(args),
        Command::Run(flags) => {
            let config = load_config(global, Some(&flags))?;
            // A refused start says when it was on the built-in defaults, which name a queue
            // and a plugin the user never wrote.
            let file = config_file(global);
            let dead = run(config, flags.until_idle)
                .await
                .map_err(|e| match file {
                    Some(_) => e,
                    None => e.context(
                        "on the built-in defaults (queue `reminders` for plugin `email-reminder`; \
                     no qhost.toml here: write one, or name one with --config)",
                    ),
                })?;
            if flags.fail_on_dead_letter && dead > 0 {
                eprintln!("error: {dead} message(s) were dead-lettered (--fail-on-dead-letter)");
                return Ok(std::process::ExitCode::from(DEAD_LETTERED));
            }
            Ok(())
        }
        Command::Send(args) => {
            let defaults = config_file(global).is_none();
            send(config()?, defaults, args).await
        }
        Command::Schedule { command } => schedule(&config()?, command).await,
        Command::Fleet { command } => fleet(&config()?, command).await,
        Command::Peek { queue, limit } => peek(config()?, &queue, limit).await,
        Command::Purge { queue, yes } => purge(config()?, &queue, yes).await,
        Command::Invoke(args) => return invoke(config()?, args).await,
        Command::Replay(args) => return replay(config()?, args).await,
        Command::Test(args) => return test(config()?, args).await,
        Command::Fixture(args) => fixture(&args),
        Command::Dlq {
            command:
                DlqCommand::Peek {
                    queue,
                    limit,
                    jsonl,
                },
        } => dlq_peek(config()?, &queue, limit, jsonl).await,
        Command::Dlq {
            command: DlqCommand::Redrive { queue, limit, to },
        } => dlq_redrive(config()?, &queue, limit, to.as_deref()).await,
        Command::Check => check_deploy(&config()?, config_file(global).as_deref()).await,
        Command::Plugins {
            command: PluginsCommand::Check { file },
        } => check(&config()?, &file),
        Command::Plugins {
            command: PluginsCommand::List,
        } => list(&config()?).await,
        Command::Plugins {
            command: PluginsCommand::Promote { name },
        } => decide(&config()?, &name, true).await,
        Command::Plugins {
            command: PluginsCommand::Rollback { name },
        } => decide(&config()?, &name, false).await,
        Command::Inspect {
            file,
            format,
            queue,
        } => {
            let (file, format, queue) = (file.as_deref(), format.as_deref(), queue.as_deref());
            inspect(config()?, file, format, queue).await
        }
        Command::Celery {
            command: CeleryCommand::Inspect { file, queue },
        } => celery_inspect(config()?, file.as_deref(), queue.as_deref()).await,
        Command::Kv {
            command:
                KvCommand::Get {
                    plugin,
                    bucket,
                    key,
                },
        } => return kv_get(&config()?, &plugin, &bucket, &key).await,
        Command::Kv {
            command: KvCommand::List { plugin, bucket },
        } => kv_list(&config()?, &plugin, &bucket).await,
    }
    .map(|()| std::process::ExitCode::SUCCESS)
}

/// `qhost new`: a handler project that builds as it is.
fn new(args: NewArgs) -> anyhow::Result<()> {
    let shape = args.shape();
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    for file in qhost::create_project(args.language, shape, &args.name, &dir)? {
        println!("created {}", file.display());
    }
    println!(
        "next: the build and try-out commands are in {}",
        dir.join("README.md").display()
    );
    Ok(())
}
