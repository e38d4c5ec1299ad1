//! The `qhost` command: parses flags, sets up logging, and calls into the library.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use qhost::config::{self, Config};
use qhost::message::{Attribute, AttributeValue, Outgoing};

/// `qhost --version`: the release, the WIT package it serves and the wasmtime it embeds (which
/// decide what plugins it runs, and whether its compiled-code cache carries over).
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} (serves {}, wasmtime {})",
        env!("CARGO_PKG_VERSION"),
        qhost::runtime::WIT_PACKAGE,
        qhost::runtime::WASMTIME_VERSION
    )
});

#[derive(Parser)]
#[command(
    name = "qhost",
    version = VERSION.as_str(),
    about = "Runs queue message handlers compiled to WebAssembly components"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options of every command, given before it (`qhost -c qhost.toml run`).
#[derive(Args)]
struct Global {
    /// Configuration file (TOML); its relative paths are relative to its directory. Default:
    /// ./qhost.toml when there is one, otherwise the built-in defaults (the embedded queue and
    /// store, plugins/ and .qhost/ here).
    #[arg(long, short, env = "QHOST_CONFIG")]
    config: Option<PathBuf>,
    /// Overrides `plugins-dir`.
    #[arg(long, env = "QHOST_PLUGINS_DIR")]
    plugins_dir: Option<PathBuf>,
    /// Overrides `data-dir` (where the local backends keep their database).
    #[arg(long, env = "QHOST_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Consume the configured queues until interrupted (SIGINT or SIGTERM), then print what was
    /// done.
    Run {
        /// Exit once every consumed queue is empty and nothing is in flight, printing a summary.
        #[arg(long)]
        until_idle: bool,
        /// Exit with code 6 if any message was dead-lettered during the run (for CI).
        #[arg(long)]
        fail_on_dead_letter: bool,
        /// Start even if a queue's plugin does not load: that queue then waits, unconsumed,
        /// until it does. Without it such a start is refused. Sets `allow-unloaded-plugins`.
        #[arg(long)]
        allow_unloaded_plugins: bool,
        /// Where to serve /metrics, /healthz and /readyz (IP:PORT; port 0 picks a free port;
        /// "" serves nothing). Overrides `[admin] listen`; default 127.0.0.1:9464.
        #[arg(long, env = "QHOST_ADMIN_LISTEN", value_name = "IP:PORT")]
        admin_listen: Option<String>,
    },
    /// Send a message to a queue.
    Send(SendArgs),
    /// Show messages waiting in a queue, without receiving them (local backend only).
    Peek {
        /// The queue.
        #[arg(long, short)]
        queue: String,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Run one message through a plugin file, with no queue or store, and print what it
    /// decided, what it would send and what it cost. Exit code: 0 ack, 3 retry, 4 reject (or
    /// no idempotency key), 5 trap, timeout or memory limit.
    Invoke(InvokeArgs),
    /// Delete every message of a queue, after asking (or with --yes).
    Purge {
        /// The queue.
        #[arg(long, short)]
        queue: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Read and redrive dead-letter queues.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Start a handler project that builds as it is: rust, python or js.
    New {
        /// The language: rust, python (py) or js.
        language: qhost::scaffold::Language,
        /// The plugin's name (letters, digits, `-`, `_`).
        name: String,
        /// Where to create it (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Check a deploy without running it: the configuration, and for every consumed queue its
    /// plugin (and routes) loaded as `run` would, manifests included. Exits non-zero on any
    /// problem: the command a deploy pipeline runs before shipping.
    Check,
    /// Inspect plugin files.
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
}

/// A message given on the command line.
#[derive(Args)]
struct MessageArgs {
    /// Message body.
    #[arg(
        long,
        conflicts_with = "body_file",
        required_unless_present = "body_file"
    )]
    body: Option<String>,
    /// Read the body from this file (`-`: standard input).
    #[arg(long)]
    body_file: Option<PathBuf>,
    /// A string attribute NAME=VALUE, or a number attribute NAME:number=VALUE. Repeatable.
    #[arg(long = "attr", value_name = "NAME=VALUE")]
    attrs: Vec<String>,
}

impl MessageArgs {
    /// The body (read from `--body-file` if given so) and the parsed attributes.
    fn read(self) -> anyhow::Result<(Vec<u8>, Vec<Attribute>)> {
        let body = match (self.body, self.body_file) {
            (Some(b), _) => b.into_bytes(),
            (None, Some(path)) if path.as_os_str() == "-" => {
                let mut body = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut body)
                    .context("reading the body from standard input")?;
                body
            }
            (None, Some(path)) => {
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?
            }
            (None, None) => bail!("give --body or --body-file"),
        };
        let attributes = (self.attrs.iter())
            .map(|a| parse_attr(a))
            .collect::<anyhow::Result<_>>()?;
        Ok((body, attributes))
    }
}

#[derive(Args)]
struct SendArgs {
    /// The queue.
    #[arg(long, short)]
    queue: String,
    #[command(flatten)]
    message: MessageArgs,
    /// Delay before the message is visible, in seconds.
    #[arg(long, default_value_t = 0)]
    delay: u32,
    /// FIFO message group.
    #[arg(long)]
    group: Option<String>,
    /// Deliver this many copies under one message id, as SQS's at-least-once delivery
    /// sometimes does (local queue only): a way to watch duplicate suppression work.
    #[arg(long, default_value_t = 1)]
    copies: usize,
}

#[derive(Args)]
struct InvokeArgs {
    /// The plugin (its manifest, NAME.toml, is read from beside it).
    file: PathBuf,
    #[command(flatten)]
    message: MessageArgs,
    /// Set a `[config]` entry KEY=VALUE over the manifest's. Repeatable. (`--config` names
    /// qhost's own configuration file.)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Let the plugin call the HTTP origins its manifest grants. Without it, nothing is sent
    /// anywhere: its requests are refused inside the guest (HTTP-request-denied).
    #[arg(long)]
    allow_http: bool,
}

#[derive(Subcommand)]
enum DlqCommand {
    /// Show dead letters with why they were dead-lettered, leaving them in place.
    Peek {
        /// The dead-letter queue.
        #[arg(long, short)]
        queue: String,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Send dead letters back to the queue each came from (or `--to`), so they run again;
    /// each is deleted only once its copy is sent.
    Redrive {
        /// The dead-letter queue.
        #[arg(long, short)]
        queue: String,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Send them here instead of their source queue.
        #[arg(long)]
        to: Option<String>,
    },
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// Check that a .wasm implements the qhost:handler world, and list what it imports.
    Check {
        /// The .wasm file.
        file: PathBuf,
    },
    /// List the plugins in the plugins directory with their versions and limits.
    List,
}

/// How long the process waits, once done, for threads still busy (a guest blocked in a host
/// call).
const EXIT_WAIT: Duration = Duration::from_secs(1);
/// How long a second signal's release may take before the process exits regardless.
const FORCED_EXIT: Duration = Duration::from_secs(5);

fn main() -> std::process::ExitCode {
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

/// The exit code of `run --fail-on-dead-letter` when a message was dead-lettered.
const DEAD_LETTERED: u8 = 6;

/// Runs the host; returns how many messages it dead-lettered.
async fn run(config: Config, until_idle: bool) -> anyhow::Result<u64> {
    // Listen first: a SIGTERM while plugins compile must still mean "stop cleanly".
    let (shutdown, abandon) = (CancellationToken::new(), CancellationToken::new());
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    tokio::spawn(on_signals(term, shutdown.clone(), abandon.clone()));
    // Bound before the plugins load: a port in use fails at once, and probes get answers
    // (live, not ready) while plugins compile.
    let admin = match config.admin_listen {
        Some(addr) => Some(qhost::admin::AdminServer::start(addr).await?),
        None => None,
    };
    let traces = qhost::traces::Traces::from_env()?;
    if let Some(traces) = &traces {
        tracing::info!(endpoint = traces.endpoint(), "exporting traces over OTLP");
    }
    let mut host = qhost::Host::from_config(config).await?.abandon_on(abandon);
    if let Some(traces) = &traces {
        host = host.traced_by(traces.tracer());
    }
    if let Some(admin) = &admin {
        admin.serve_host(host.admin_view());
    }
    let ran = if until_idle {
        host.run_until_idle(shutdown).await
    } else {
        host.run(shutdown).await
    };
    // The last spans go out even when the run failed: they are what explains it.
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    ran?;
    println!("{}", host.stats());
    Ok(host.stats().total().dead_lettered)
}

/// The first SIGINT or SIGTERM starts an orderly shutdown; a second releases unfinished
/// messages at once and, should even that hang, exits after [`FORCED_EXIT`].
async fn on_signals(
    mut term: tokio::signal::unix::Signal,
    shutdown: CancellationToken,
    abandon: CancellationToken,
) {
    let mut signal = async || {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    signal().await;
    tracing::info!("shutting down: finishing in-flight messages (signal again to stop now)");
    shutdown.cancel();
    signal().await;
    tracing::warn!("second signal: releasing unfinished messages and exiting");
    abandon.cancel();
    tokio::time::sleep(FORCED_EXIT).await;
    tracing::error!(after = ?FORCED_EXIT, "release did not finish; exiting anyway");
    std::process::exit(130);
}

fn parse_attr(text: &str) -> anyhow::Result<Attribute> {
    let Some((name, value)) = text.split_once('=') else {
        bail!("--attr `{text}` must be NAME=VALUE");
    };
    let value = value.to_string();
    Ok(match name.split_once(':') {
        Some((name, "number")) => {
            value
                .parse::<f64>()
                .with_context(|| format!("--attr {name}: `{value}` is not a number"))?;
            Attribute {
                name: name.into(),
                value: AttributeValue::Number(value),
            }
        }
        Some((name, "string")) | Some((name, "")) => Attribute::string(name, value),
        Some((_, kind)) => bail!("--attr `{text}`: unknown type `{kind}` (string or number)"),
        None => Attribute::string(name, value),
    })
}

async fn invoke(config: Config, args: InvokeArgs) -> anyhow::Result<std::process::ExitCode> {
    use qhost::handler::Outcome;
    let (body, attributes) = args.message.read()?;
    let request = qhost::oneshot::Request {
        body,
        attributes,
        config: (args.settings.iter())
            .map(|s| {
                s.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .with_context(|| format!("--set `{s}` must be KEY=VALUE"))
            })
            .collect::<anyhow::Result<_>>()?,
        allow_http: args.allow_http,
    };
    let report =
        (qhost::oneshot::invoke_file(&config, &args.file, request).await).map_err(|e| {
            match format!("{e:#}") {
                text if text.contains("[secrets]") => {
                    anyhow::anyhow!("{text}; or give the value with --set KEY=VALUE")
                }
                _ => e,
            }
        })?;
    println!("plugin:   {} {}", report.plugin, report.version);
    let (outcome, code) = match (&report.key, &report.result) {
        (Err(e), _) => (format!("reject (not run): {e}"), 4),
        (_, None) => ("not run".to_string(), 4),
        (_, Some(Ok(invocation))) => match &invocation.outcome {
            Outcome::Ack => ("ack".to_string(), 0),
            Outcome::Retry(secs) => (format!("retry (after at least {secs} s)"), 3),
            Outcome::Reject(reason) => (format!("reject: {reason}"), 4),
        },
        (_, Some(Err(failure))) => (
            format!("failed: {failure} (retried, then dead-lettered, by a host)"),
            5,
        ),
    };
    if let Ok(key) = &report.key {
        println!("key:      {key}");
    }
    println!("outcome:  {outcome}");
    if let Some(Ok(invocation)) = &report.result {
        let sent = if invocation.outcome == Outcome::Ack {
            "would send"
        } else {
            "would discard"
        };
        println!("outbox:   {} message(s) it {sent}", invocation.outbox.len());
        for m in &invocation.outbox {
            println!("  -> {}  {}", m.queue, shown(&m.body, &m.attributes));
        }
    }
    if !report.http_withheld.is_empty() {
        println!(
            "http:     not allowed ({} granted by its manifest); pass --allow-http to let it call them",
            report.http_withheld.join(", ")
        );
    }
    if let Some(c) = report.costs {
        println!(
            "cost:     {:.3} ms in all: instantiate {:.3} ms, call {:.3} ms, drop {:.3} ms",
            report.took.as_secs_f64() * 1e3,
            c.instantiate.as_secs_f64() * 1e3,
            c.call.as_secs_f64() * 1e3,
            c.drop.as_secs_f64() * 1e3,
        );
    }
    Ok(std::process::ExitCode::from(code))
}

async fn send(config: Config, args: SendArgs) -> anyhow::Result<()> {
    if args.queue.ends_with(".fifo") && args.group.is_none() {
        bail!(
            "`{}` is a FIFO queue: give the message group with --group GROUP",
            args.queue
        );
    }
    let (body, attributes) = args.message.read()?;
    if let Some(a) = attributes.iter().find(|a| a.name.starts_with("qhost-")) {
        bail!(
            "--attr {}: names starting with qhost- are the host's own (keys, pointers, dead-letter \
             verdicts) and cannot be sent; pick another name",
            a.name
        );
    }
    let source = qhost::host::open_source_for(&config, &[&args.queue]).await?;
    let mut msg = Outgoing::new(args.queue.clone(), body);
    msg.attributes = attributes;
    msg.delay_seconds = args.delay;
    msg.group_id = args.group;
    // Large bodies go to the payload store, and a pointer in the message.
    let payloads = qhost::payload::Payloads::open(&config).await?;
    let msg = payloads
        .offload_all(&config.namespace, 0, vec![msg])
        .await?
        .remove(0);
    let ids = if args.copies == 1 {
        source.send(&[msg]).await?
    } else {
        local_queue(&config)?
            .send_copies(&[msg], args.copies)
            .await?
    };
    for id in ids {
        println!("{id}");
    }
    if config.queue(&args.queue).is_none() {
        eprintln!(
            "warning: no configured queue consumes `{}`: `qhost run` with this configuration \
             will not take the message (configured: {})",
            args.queue,
            config
                .queues
                .iter()
                .map(|q| q.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// `qhost purge`: asks on a terminal unless `yes`; refuses without one.
async fn purge(config: Config, queue: &str, yes: bool) -> anyhow::Result<()> {
    use std::io::{BufRead as _, IsTerminal as _};
    if !yes {
        if !std::io::stdin().is_terminal() {
            bail!("purging deletes every message of `{queue}`: confirm with --yes");
        }
        eprint!("delete every message of `{queue}`? type the queue's name to confirm: ");
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if answer.trim() != queue {
            bail!("not purged");
        }
    }
    match &config.source {
        qhost::config::SourceKind::Local => {
            let deleted = local_queue(&config)?.purge(queue).await?;
            println!("purged `{queue}`: {deleted} message(s) deleted");
        }
        qhost::config::SourceKind::Sqs(settings) => {
            settings.check().await?;
            let sqs = qhost::source::sqs::SqsQueue::connect(settings).await;
            sqs.purge(queue).await?;
            println!("purging `{queue}`: SQS deletes its messages within a minute");
        }
    }
    Ok(())
}

/// The local queue, for the commands only it supports.
fn local_queue(config: &Config) -> anyhow::Result<qhost::source::local::LocalQueue> {
    if config.source != qhost::config::SourceKind::Local {
        bail!("this works on the local queue only (source.kind = \"local\")");
    }
    let path = config.database();
    qhost::source::local::LocalQueue::open(path.as_deref(), Default::default())
}

async fn peek(config: Config, queue: &str, limit: usize) -> anyhow::Result<()> {
    let messages = local_queue(&config)?.peek(queue, limit).await?;
    for m in &messages {
        println!("{}  {}", m.id, shown(&m.body, &m.attributes));
    }
    // On stderr, so what scripts count on stdout stays one line a message.
    if messages.is_empty() {
        eprintln!("0 messages in `{queue}`");
    }
    Ok(())
}

async fn dlq_peek(config: Config, queue: &str, limit: usize) -> anyhow::Result<()> {
    let letters = match config.source {
        qhost::config::SourceKind::Local => local_queue(&config)?.peek(queue, limit).await?,
        _ => {
            let source = qhost::host::open_source_for(&config, &[queue]).await?;
            qhost::dlq::peek(source.as_ref(), queue, limit).await?
        }
    };
    for m in &letters {
        let v = qhost::dlq::verdict(m);
        let body = String::from_utf8_lossy(&m.body);
        let preview: String = body.chars().take(200).collect();
        let more = if body.chars().count() > 200 {
            "…"
        } else {
            ""
        };
        println!("{}", m.id);
        println!(
            "  from {} by {}@{} after {} attempt(s)",
            v.source_queue.as_deref().unwrap_or("?"),
            v.plugin,
            v.version,
            v.attempts
        );
        println!("  reason: {}", v.reason);
        println!("  body:   {preview}{more}");
    }
    println!("{} dead letter(s) shown", letters.len());
    Ok(())
}

async fn dlq_redrive(
    config: Config,
    queue: &str,
    limit: usize,
    to: Option<&str>,
) -> anyhow::Result<()> {
    let queues: Vec<&str> = std::iter::once(queue).chain(to).collect();
    let source = qhost::host::open_source_for(&config, &queues).await?;
    let done = qhost::dlq::redrive(source.as_ref(), queue, to, limit).await?;
    for (id, target) in &done.moved {
        println!("{id} -> {target}");
    }
    for (id, why) in &done.left {
        eprintln!("{id} left in {queue}: {why}");
    }
    println!("{} redriven, {} left", done.moved.len(), done.left.len());
    if !done.left.is_empty() {
        bail!("{} dead letter(s) could not be redriven", done.left.len());
    }
    Ok(())
}

/// A message as the commands print it: `BODY  [NAME=VALUE, …]`.
fn shown(body: &[u8], attributes: &[Attribute]) -> String {
    let attrs: Vec<String> = (attributes.iter())
        .map(|a| format!("{}={}", a.name, a.text().unwrap_or("<binary>")))
        .collect();
    format!("{}  [{}]", String::from_utf8_lossy(body), attrs.join(", "))
}

fn check(config: &Config, file: &std::path::Path) -> anyhow::Result<()> {
    let runtime = qhost::host::runtime_for(config)?;
    let report = qhost::plugin::inspect::check_file(&runtime, file)?;
    println!("file:     {}", file.display());
    println!("version:  {}", report.version);
    println!("size:     {} bytes", report.size);
    println!("imports:  {}", report.imports.join(", "));
    println!("exports:  {}", report.exports.join(", "));
    match report.problem {
        None => {
            println!("world:    implements {}", qhost::runtime::WIT_PACKAGE);
            println!("loads:    yes, with {}", manifest_shown(file));
            Ok(())
        }
        Some(problem) => bail!("{} would not load: {problem}", file.display()),
    }
}

/// `qhost check`: every consumed queue's plugins load as `run` would load them.
async fn check_deploy(config: &Config, file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let shown = file.map_or("the built-in defaults".into(), |f| f.display().to_string());
    println!("config:   {shown}: {} queue(s)", config.queues.len());
    let plugins = qhost::host::open_plugins_unchecked(config).await?;
    let registry = plugins.registry();
    let mut problems = 0;
    for q in &config.queues {
        for name in q.plugins() {
            let path = config.plugins_dir.join(format!("{name}.wasm"));
            match registry.get(name) {
                Some(p) => println!(
                    "queue {}: plugin {name} loads ({}, version {})",
                    q.name,
                    path.display(),
                    p.version
                ),
                None => {
                    problems += 1;
                    let why = if path.is_file() {
                        registry.why_not_serving(name)
                    } else {
                        format!("there is no {}", path.display())
                    };
                    println!("queue {}: plugin {name} does not load: {why}", q.name);
                }
            }
        }
    }
    if problems > 0 {
        bail!("{problems} problem(s): `qhost run` would refuse to start");
    }
    println!("ok: `qhost run` would start");
    Ok(())
}

/// The manifest a plugin file loads with, as `plugins check` names it.
fn manifest_shown(file: &std::path::Path) -> String {
    let manifest = file.with_extension("toml");
    if manifest.is_file() {
        manifest.display().to_string()
    } else {
        format!("the default manifest (no {})", manifest.display())
    }
}

async fn list(config: &Config) -> anyhow::Result<()> {
    use qhost::plugin::status::{self, HostPlugins};
    let live = config
        .data_dir
        .as_deref()
        .and_then(|d| status::read_live(&status::path(d)));
    let status = match live {
        Some(status) => {
            println!("as served by the running qhost (pid {}):", status.pid);
            status
        }
        None => {
            println!(
                "no qhost is running on this data directory; loading {}:",
                config.plugins_dir.display()
            );
            let plugins = qhost::host::open_plugins_unchecked(config).await?;
            HostPlugins::of(plugins.registry())
        }
    };
    for p in &status.plugins {
        let version = p.version.as_deref().unwrap_or("(not serving)");
        match &p.limits {
            Some(l) => println!(
                "{:<20} {:<12}  timeout {} ms, memory {} MiB, max attempts {}, concurrency {}{}",
                p.name,
                version,
                l.timeout_ms,
                l.memory_mib,
                l.max_attempts,
                l.concurrency
                    .map_or_else(|| "unlimited".to_string(), |c| c.to_string()),
                l.rate.map(|r| format!(", rate {r}")).unwrap_or_default(),
            ),
            None => println!("{:<20} {version}", p.name),
        }
        if !p.http.is_empty() {
            println!("{:<20} may call: {}", "", p.http.join(", "));
        }
        if let Some(e) = &p.last_error {
            println!("{:<20} last load error: {e}", "");
        }
    }
    Ok(())
}
