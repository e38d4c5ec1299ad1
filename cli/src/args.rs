//! The command line: every command, its flags and their help, as clap reads them. Options
//! of qhost itself (`--config`, `--plugins-dir`, `--data-dir`) are global: before the command
//! or after it, and listed in every command's help.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};

use qhost::{Attribute, AttributeValue};

/// `qhost --version`: the release, the WIT package it serves and the wasmtime it embeds (which
/// decide what plugins it runs, and whether its compiled-code cache carries over).
pub(crate) static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} (serves {}, wasmtime {})",
        env!("CARGO_PKG_VERSION"),
        qhost::plugins::WIT_PACKAGE,
        qhost::plugins::WASMTIME_VERSION
    )
});

#[derive(Parser)]
#[command(
    name = "qhost",
    version = VERSION.as_str(),
    about = "Runs queue message handlers compiled to WebAssembly components",
    after_help = "Logs go to stderr. `run` logs at info, every other command only warnings and \
                  errors: -v, -vv, --quiet or QHOST_LOG (e.g. QHOST_LOG=debug) say otherwise; \
                  QHOST_LOG_FORMAT=json writes them as JSON."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options of every command, given before it or after it (`qhost -c qhost.toml run`, `qhost
/// run --config qhost.toml`).
#[derive(Args)]
pub(crate) struct Global {
    /// Configuration file (TOML); its relative paths are relative to its directory. Default:
    /// ./qhost.toml when there is one, otherwise the built-in defaults (the embedded queue and
    /// store, plugins/ and .qhost/ here).
    #[arg(long, short, env = "QHOST_CONFIG", global = true)]
    pub(crate) config: Option<PathBuf>,
    /// Overrides `plugins-dir`.
    #[arg(long, env = "QHOST_PLUGINS_DIR", global = true)]
    pub(crate) plugins_dir: Option<PathBuf>,
    /// Overrides `data-dir` (where the local backends keep their database).
    #[arg(long, env = "QHOST_DATA_DIR", global = true)]
    pub(crate) data_dir: Option<PathBuf>,
    /// Log more: -v info, -vv debug, -vvv trace (over QHOST_LOG).
    #[arg(long, short, action = clap::ArgAction::Count, global = true, conflicts_with = "quiet")]
    pub(crate) verbose: u8,
    /// Log errors only (over QHOST_LOG). (`-q` is a command's --queue.)
    #[arg(long, global = true)]
    pub(crate) quiet: bool,
}

impl Global {
    /// How much to log: the flags, else `QHOST_LOG`, else the command's default (`voice`).
    pub(crate) fn verbosity(&self, voice: qhost::Voice) -> qhost::Verbosity {
        match (self.quiet, self.verbose) {
            (true, _) => qhost::Verbosity::Quiet,
            (false, 0) => qhost::Verbosity::Default(voice),
            (false, n) => qhost::Verbosity::Verbose(n),
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Start a handler project that builds as it is: rust, python or js
    ///
    /// It holds the handler, its manifest (the host's defaults shown), a test file and a README with
    /// the commands that build and test it.
    ///
    /// Example: qhost new rust hello
    New(NewArgs),
    /// Run handler tests: cases as data against the built plugin, in a canned world
    ///
    /// The cases of test files (*.test.toml; default: those in the current directory, the plugins
    /// directory and under tests/) run against their plugin files, each in a canned world (state, HTTP answers, clock)
    /// with no queue, network or host environment; a line per case says what differed. Exit code: 0
    /// every case passed, 1 otherwise (a failing case, a test file that cannot be read, a plugin that
    /// does not load, or no case at all).
    ///
    /// Example: qhost test hello.test.toml --junit report.xml
    Test(TestArgs),
    /// Check a deploy without running it: would `qhost run` start?
    ///
    /// The configuration, and for every consumed queue its plugin (and routes) loaded as `run` would,
    /// manifests included. Exits non-zero on any problem: the command a deploy pipeline runs before
    /// shipping.
    ///
    /// Example: qhost check --config prod.toml
    Check,
    /// Send a message to a queue
    ///
    /// Example: qhost send --queue hello --body world --copies 2
    Send(SendArgs),
    /// Consume the configured queues until SIGINT or SIGTERM, then print what was done
    ///
    /// Handlers run once per key; new plugin files are loaded without a restart; the admin listener
    /// serves the console, its API, /metrics, /healthz and /readyz. Exit code: 0, or 6 with
    /// --fail-on-dead-letter when a message was dead-lettered.
    ///
    /// Example: qhost run --until-idle
    Run(RunFlags),
    /// Show messages waiting in a queue, without receiving them (embedded queue)
    ///
    /// Example: qhost peek --queue hello
    Peek {
        /// The queue.
        #[arg(long, short)]
        queue: String,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Print what qhost reads from a message: route, plugin, key, body and attributes
    ///
    /// For each run the message holds: its route, the plugin a queue sends it to, its idempotency key,
    /// and the body and attributes its handler gets. Without FILE, the first message waiting in
    /// --queue (embedded queue).
    ///
    /// Example: qhost inspect event.json --format sns
    Inspect {
        /// A file holding the message body; `-` reads stdin.
        file: Option<PathBuf>,
        /// The message format: qhost, celery, sns, eventbridge or s3 (default: the queue's, or
        /// qhost).
        #[arg(long, short)]
        format: Option<String>,
        /// The configured queue whose format, routes and plugins' keys apply.
        #[arg(long, short)]
        queue: Option<String>,
    },
    /// Run one message through a plugin file, with no queue or store
    ///
    /// Prints what it decided, what it would send and what it cost. Exit code: 0 ack, 3 retry, 4
    /// reject (or no idempotency key), 5 trap, timeout or memory limit. With --batch, a batch
    /// handler runs once on every line of a file, and the exit code is the worst message's.
    ///
    /// Example: qhost invoke plugins/hello.wasm --body world
    Invoke(InvokeArgs),
    /// Print a realistic message of KIND as its producer sends it, as a test case
    ///
    /// KIND: sqs, sns, eventbridge, s3, celery, extended-client; paste the case into a test file.
    ///
    /// Example: qhost fixture sns --body hello
    Fixture(FixtureArgs),
    /// Compare a new version of a plugin with the one it replaces, on recorded messages
    ///
    /// Recorded messages (JSON Lines, as `dlq peek --jsonl` writes them) run through both, with no
    /// queue, lease, effect or network; prints where they differ: outcome, outbox, HTTP requests
    /// (recorded, not sent), cost. Exit code: 0 all agree, 3 some outcome differs, 4 outcomes agree
    /// but an outbox or HTTP request differs, 5 only some lines could not be read.
    ///
    /// Example: qhost replay --plugin build/hello.wasm --serving hello --messages dead.jsonl
    Replay(ReplayArgs),
    /// Read and redrive dead letters
    ///
    /// Example: qhost dlq peek --queue hello
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Delete every message of a queue, after asking (or with --yes)
    ///
    /// Example: qhost purge --queue hello-dlq --yes
    Purge {
        /// The queue.
        #[arg(long, short)]
        queue: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// List plugins, check a file, promote or roll back a canary
    ///
    /// Example: qhost plugins list
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// Show the hosts sharing this store; pause or resume a queue on all of them
    ///
    /// Each host's state (live, stopped, gone), version, backends, readiness and counts, and the
    /// queues paused fleet-wide. A pause reaches every host within a second.
    ///
    /// Example: qhost fleet pause hello
    Fleet {
        #[command(subcommand)]
        command: Option<FleetCommand>,
    },
    /// List, pause, resume, backfill or fire the configured schedules, fleet-wide
    ///
    /// Example: qhost schedule list
    Schedule {
        #[command(subcommand)]
        command: ScheduleCommand,
    },
    /// Read a plugin's committed state (its wasi:keyvalue buckets)
    ///
    /// Example: qhost kv list hello seen
    Kv {
        #[command(subcommand)]
        command: KvCommand,
    },
    /// Read Celery task messages as qhost does
    ///
    /// Example: qhost celery inspect task.json --queue celery
    Celery {
        #[command(subcommand)]
        command: CeleryCommand,
    },
}

/// `qhost fleet …`.
#[derive(Subcommand)]
pub(crate) enum FleetCommand {
    /// Stop every host sharing this store from receiving QUEUE (within a second; messages
    /// being handled finish) until it is resumed.
    Pause {
        /// A consumed queue.
        queue: String,
    },
    /// Let every host receive QUEUE again.
    Resume {
        /// A consumed queue.
        queue: String,
    },
}

/// `qhost schedule …`.
#[derive(Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Each schedule: its next ticks, the last tick fired and by which host, and how many
    /// ticks were fired, missed and skipped.
    List,
    /// Stop NAME firing on every host (within a second) until it is resumed.
    Pause {
        /// The schedule.
        name: String,
    },
    /// Start NAME firing again, from now: ticks that fell while it was paused are counted as
    /// skipped (`backfill` fires them).
    Resume {
        /// The schedule.
        name: String,
    },
    /// Fire NAME's ticks from --from to --to (both included) that were never fired, each once,
    /// oldest first.
    Backfill {
        /// The schedule.
        name: String,
        /// The first tick's time, RFC 3339 (2026-12-01T09:00:00Z).
        #[arg(long)]
        from: String,
        /// The last tick's time, RFC 3339.
        #[arg(long)]
        to: String,
    },
    /// Fire one extra tick of NAME now, with a key of its own.
    Fire {
        /// The schedule.
        name: String,
    },
}

/// `qhost kv …`.
#[derive(Subcommand)]
pub(crate) enum KvCommand {
    /// Print the committed value of KEY (exit code 1 when there is none).
    Get {
        /// The plugin.
        plugin: String,
        /// Its bucket.
        bucket: String,
        /// The key.
        key: String,
    },
    /// List the bucket's committed keys, in order (at most 10,000).
    List {
        /// The plugin.
        plugin: String,
        /// Its bucket.
        bucket: String,
    },
}

/// `qhost celery …`.
#[derive(Subcommand)]
pub(crate) enum CeleryCommand {
    /// Decode a Celery message (an SQS body as a Celery producer sent it) and print its task,
    /// arguments and schedule, the key qhost leases it under, and with --queue the plugin that
    /// queue routes it to. Without FILE, the first message waiting in --queue (embedded queue).
    Inspect {
        /// A file holding the message body; `-` reads stdin.
        file: Option<PathBuf>,
        /// The configured Celery queue whose routes and serializers apply.
        #[arg(long, short)]
        queue: Option<String>,
    },
}

/// `qhost run`'s flags.
#[derive(Args)]
pub(crate) struct RunFlags {
    /// Exit once every consumed queue is empty and nothing is in flight, printing a summary.
    #[arg(long)]
    pub(crate) until_idle: bool,
    /// Exit with code 6 if any message was dead-lettered during the run (for CI).
    #[arg(long)]
    pub(crate) fail_on_dead_letter: bool,
    /// Start even if a queue's plugin does not load: that queue then waits, unconsumed,
    /// until it does. Without it such a start is refused. Sets `allow-unloaded-plugins`.
    #[arg(long)]
    pub(crate) allow_unloaded_plugins: bool,
    /// Where to serve the console (/), its JSON API, /metrics, /healthz and /readyz (IP:PORT;
    /// port 0 picks a free port; "" serves nothing). Overrides `[admin] listen`; default
    /// 127.0.0.1:9464.
    #[arg(long, env = "QHOST_ADMIN_LISTEN", value_name = "IP:PORT")]
    pub(crate) admin_listen: Option<String>,
}

/// `qhost new`'s arguments.
#[derive(Args)]
pub(crate) struct NewArgs {
    /// The language: rust, python (py) or js.
    pub(crate) language: qhost::Language,
    /// The plugin's name (letters, digits, `-`, `_`).
    pub(crate) name: String,
    /// Where to create it (default: ./NAME).
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
    /// A batch handler: many messages per call (`handle-batch`).
    #[arg(long)]
    pub(crate) batch: bool,
}

impl NewArgs {
    /// The handler's shape.
    pub(crate) fn shape(&self) -> qhost::HandlerShape {
        if self.batch {
            qhost::HandlerShape::Batch
        } else {
            qhost::HandlerShape::Handler
        }
    }
}

/// A message given on the command line.
#[derive(Args)]
pub(crate) struct MessageArgs {
    /// Message body.
    #[arg(
        long,
        conflicts_with = "body_file",
        required_unless_present_any = ["body_file", "celery_task"]
    )]
    pub(crate) body: Option<String>,
    /// Read the body from this file (`-`: standard input).
    #[arg(long)]
    pub(crate) body_file: Option<PathBuf>,
    /// A string attribute NAME=VALUE, or a number attribute NAME:number=VALUE. Repeatable.
    #[arg(long = "attr", value_name = "NAME=VALUE")]
    pub(crate) attrs: Vec<String>,
}

impl MessageArgs {
    /// The body (read from `--body-file` if given so) and the parsed attributes.
    pub(crate) fn read(&self) -> anyhow::Result<(Vec<u8>, Vec<Attribute>)> {
        let body = match (&self.body, &self.body_file) {
            (Some(b), _) => b.clone().into_bytes(),
            (None, Some(path)) if path.as_os_str() == "-" => {
                let mut body = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut body)
                    .context("reading the body from standard input")?;
                body
            }
            (None, Some(path)) => {
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
            }
            (None, None) => bail!("give --body or --body-file"),
        };
        let attributes = (self.attrs.iter())
            .map(|a| parse_attr(a))
            .collect::<anyhow::Result<_>>()?;
        Ok((body, attributes))
    }
}

/// The message (or, with `--batch`, the messages) `invoke` runs.
#[derive(Args)]
pub(crate) struct InvokeMessageArgs {
    /// Message body.
    #[arg(
        long,
        conflicts_with_all = ["body_file", "batch"],
        required_unless_present_any = ["body_file", "batch"]
    )]
    pub(crate) body: Option<String>,
    /// Read the body from this file (`-`: standard input).
    #[arg(long, conflicts_with = "batch")]
    pub(crate) body_file: Option<PathBuf>,
    /// Run a batch handler once on many messages: one body per line of this file (JSON Lines,
    /// `-`: standard input; blank lines skipped), each with the `--attr` attributes.
    #[arg(long, value_name = "FILE.jsonl")]
    pub(crate) batch: Option<PathBuf>,
    /// A string attribute NAME=VALUE, or a number attribute NAME:number=VALUE. Repeatable.
    #[arg(long = "attr", value_name = "NAME=VALUE")]
    pub(crate) attrs: Vec<String>,
}

impl InvokeMessageArgs {
    /// The batch file, when one was given, and the one message's args otherwise.
    pub(crate) fn split(self) -> (Option<PathBuf>, MessageArgs) {
        let one = MessageArgs {
            body: self.body.or_else(|| self.batch.is_some().then(String::new)),
            body_file: self.body_file,
            attrs: self.attrs,
        };
        (self.batch, one)
    }
}

#[derive(Args)]
pub(crate) struct SendArgs {
    /// The queue.
    #[arg(long, short)]
    pub(crate) queue: String,
    #[command(flatten)]
    pub(crate) message: MessageArgs,
    /// Delay before the message is visible, in seconds.
    #[arg(long, default_value_t = 0)]
    pub(crate) delay: u32,
    /// FIFO message group.
    #[arg(long)]
    pub(crate) group: Option<String>,
    /// Deliver this many copies under one message id, as SQS's at-least-once delivery
    /// sometimes does (local queue only): a way to watch duplicate suppression work.
    #[arg(long, default_value_t = 1)]
    pub(crate) copies: usize,
    /// Refuse (exit 1, nothing sent) a queue no configured queue consumes, instead of sending
    /// and warning: for scripts, where a typo must not pass.
    #[arg(long)]
    pub(crate) strict: bool,
    /// Send the body as its producer delivers it: `sns` (a notification whose Message is the
    /// body), `eventbridge` (an event whose detail is the body, JSON), `s3` (an event
    /// notification for the object key the body names), `celery` (the task the body
    /// describes: {"task", "args", "kwargs"}). Without it, the body is sent as it is.
    #[arg(long, value_name = "FORMAT")]
    pub(crate) format: Option<String>,
    /// Send Celery task NAME as Celery's `apply_async` does (with --args and --kwargs, no
    /// --body). Example: qhost send --queue celery --celery-task proj.tasks.add --args '[2, 3]'
    #[arg(long, value_name = "NAME", conflicts_with_all = ["body", "body_file", "format"])]
    pub(crate) celery_task: Option<String>,
    /// The task's positional arguments, a JSON list (with --celery-task).
    #[arg(long, value_name = "JSON", requires = "celery_task")]
    pub(crate) args: Option<String>,
    /// The task's keyword arguments, a JSON object (with --celery-task).
    #[arg(long, value_name = "JSON", requires = "celery_task")]
    pub(crate) kwargs: Option<String>,
}

impl SendArgs {
    /// The body and attributes to send: as given, wrapped as `--format`'s producer delivers
    /// it, or the Celery task `--celery-task` names.
    pub(crate) fn read(&self) -> anyhow::Result<(Vec<u8>, Vec<Attribute>)> {
        let (body, mut attributes) = match &self.celery_task {
            Some(task) => (celery_task(task, &self.args, &self.kwargs)?, Vec::new()),
            None => self.message.read()?,
        };
        let format = match self.celery_task {
            Some(_) => Some("celery"),
            None => self.format.as_deref(),
        };
        let Some(format) = format else {
            return Ok((body, attributes));
        };
        let body = String::from_utf8(body).context("--format: the body is text")?;
        let wrapped = qhost::wrap_as(format, &body, &self.queue).map_err(anyhow::Error::msg)?;
        attributes.extend(wrapped.attributes);
        Ok((wrapped.body.into_bytes(), attributes))
    }
}

/// The task `{"task", "args", "kwargs"}` as JSON text, from the flags that name it.
fn celery_task(
    task: &str,
    args: &Option<String>,
    kwargs: &Option<String>,
) -> anyhow::Result<Vec<u8>> {
    let json = |flag: &str, text: &Option<String>| -> anyhow::Result<serde_json::Value> {
        match text {
            None => Ok(serde_json::Value::Null),
            Some(text) => serde_json::from_str(text).with_context(|| {
                format!("{flag} is JSON (a list for --args, an object for --kwargs)")
            }),
        }
    };
    let what = serde_json::json!({
        "task": task,
        "args": json("--args", args)?,
        "kwargs": json("--kwargs", kwargs)?,
    });
    Ok(what.to_string().into_bytes())
}

#[derive(Args)]
pub(crate) struct InvokeArgs {
    /// The plugin (its manifest, NAME.toml, is read from beside it).
    pub(crate) file: PathBuf,
    #[command(flatten)]
    pub(crate) message: InvokeMessageArgs,
    /// Set a `[config]` entry KEY=VALUE over the manifest's. Repeatable. (`--config` names
    /// qhost's own configuration file.)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) settings: Vec<String>,
    /// Let the plugin call the HTTP origins its manifest grants. Without it, nothing is sent
    /// anywhere: its requests are refused inside the guest (HTTP-request-denied).
    #[arg(long)]
    pub(crate) allow_http: bool,
}

/// `qhost replay`'s arguments.
#[derive(Args)]
pub(crate) struct ReplayArgs {
    /// The new version's .wasm (its manifest is read from beside it).
    #[arg(long)]
    pub(crate) plugin: PathBuf,
    /// The version to compare against: a .wasm file.
    #[arg(long, conflicts_with = "serving", required_unless_present = "serving")]
    pub(crate) against: Option<PathBuf>,
    /// The version to compare against: the plugin NAME in the plugins directory (what a host
    /// on this configuration serves).
    #[arg(long, value_name = "NAME")]
    pub(crate) serving: Option<String>,
    /// The recorded messages, one JSON object per line (`-`: standard input).
    #[arg(long)]
    pub(crate) messages: PathBuf,
}

/// `qhost test`'s arguments.
#[derive(Args)]
pub(crate) struct TestArgs {
    /// Test files, or folders searched for *.test.toml.
    pub(crate) paths: Vec<PathBuf>,
    /// Also write the results as JUnit XML to FILE, for CI.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,
    /// Run again whenever a test file, a plugin file or its manifest changes (until Ctrl-C).
    #[arg(long)]
    pub(crate) watch: bool,
    /// Instead of running tests, print a test file whose cases expect what --plugin does today
    /// with each recorded message in FILE (JSON Lines, as `dlq peek --jsonl` and a queue's
    /// `capture` write them; `-`: standard input).
    #[arg(long, value_name = "FILE", requires = "plugin", conflicts_with_all = ["watch", "junit"])]
    pub(crate) record: Option<PathBuf>,
    /// With --record: the plugin file the cases run on.
    #[arg(long, value_name = "FILE.wasm")]
    pub(crate) plugin: Option<PathBuf>,
}

/// `qhost fixture`'s arguments.
#[derive(Args)]
pub(crate) struct FixtureArgs {
    /// sqs, sns, eventbridge, s3, celery or extended-client.
    pub(crate) kind: String,
    /// What the handler is to get: the text (sqs, sns), the detail (eventbridge, JSON), the
    /// object key (s3), the task (celery, JSON: {"task", "args", "kwargs"}).
    #[arg(long)]
    pub(crate) body: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum DlqCommand {
    /// Show dead letters with why they were dead-lettered, leaving them in place.
    Peek {
        /// The dead-letter queue, or a consumed queue (its dead-letter queue is read).
        #[arg(long, short)]
        queue: String,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print each as one line of JSON with its original attributes, the recorded-message
        /// format `qhost replay --messages` reads.
        #[arg(long)]
        jsonl: bool,
    },
    /// Send dead letters back to the queue each came from (or `--to`), so they run again;
    /// each is deleted only once its copy is sent.
    Redrive {
        /// The dead-letter queue, or a consumed queue (its dead-letter queue is read).
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
pub(crate) enum PluginsCommand {
    /// Check that a .wasm implements the qhost:handler world, and list what it imports.
    Check {
        /// The .wasm file.
        file: PathBuf,
    },
    /// List the plugins in the plugins directory with their versions and limits.
    List,
    /// Promote NAME's running canary: it takes all traffic on every host of the fleet within
    /// a second (the decision is written to the idempotency store they share).
    Promote {
        /// The plugin.
        name: String,
    },
    /// Roll NAME's running canary back: the serving version keeps all traffic on every host,
    /// and the canary's file is not tried again until it changes.
    Rollback {
        /// The plugin.
        name: String,
    },
}

pub(crate) fn parse_attr(text: &str) -> anyhow::Result<Attribute> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn qhost_s_own_options_go_before_or_after_the_command_and_every_help_lists_them() {
        Cli::command().debug_assert();
        let parse = |args: &[&str]| Cli::try_parse_from(args).map_err(|e| e.to_string());
        let before = parse(&["qhost", "--config", "a.toml", "run", "--until-idle"]).unwrap();
        let after = parse(&["qhost", "run", "--config", "a.toml", "--until-idle"]).unwrap();
        assert_eq!(before.global.config, Some(PathBuf::from("a.toml")));
        assert_eq!(after.global.config, before.global.config);
        let plugins = parse(&["qhost", "test", "x.test.toml", "--plugins-dir", "p"]).unwrap();
        assert_eq!(plugins.global.plugins_dir, Some(PathBuf::from("p")));
        let mut cli = Cli::command();
        cli.build(); // global options reach the subcommands when the command is built
        let run = cli.find_subcommand_mut("run").expect("run");
        let help = run.render_help().to_string();
        for option in ["--config", "--plugins-dir", "--data-dir"] {
            assert!(help.contains(option), "{option}: {help}");
        }
        let top = Cli::command().render_help().to_string();
        assert!(top.contains("QHOST_LOG"), "{top}");
    }

    /// The top-level help lists the commands in the order a newcomer meets them, one line
    /// each; each command's own help ends with an example.
    #[test]
    fn commands_come_in_workflow_order_each_with_an_example() {
        let cli = Cli::command();
        let names: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
        assert_eq!(names[..5], ["new", "test", "check", "send", "run"]);
        for mut command in cli.get_subcommands().cloned() {
            let name = command.get_name().to_string();
            let about = command
                .get_about()
                .map(|a| a.to_string())
                .unwrap_or_default();
            assert!(
                !about.contains('\n') && about.len() <= 90,
                "{name}: one line: {about}"
            );
            let long = command.render_long_help().to_string();
            assert!(
                long.contains(&format!("Example: qhost {name}")),
                "{name}: {long}"
            );
        }
    }
}
