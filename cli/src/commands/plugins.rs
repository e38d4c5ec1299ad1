//! `qhost plugins check|list` and `qhost check`: a plugin file, the plugins a host serves,
//! and a whole deploy checked as `qhost run` would load it.

use anyhow::bail;

use qhost::Config;
use qhost::plugins::HostPlugins;

pub(crate) fn check(config: &Config, file: &std::path::Path) -> anyhow::Result<()> {
    let report = qhost::plugins::check_plugin_file(&qhost::runtime_for(config)?, file)?;
    println!("file:     {}", file.display());
    println!("version:  {}", report.version);
    println!("size:     {} bytes", report.size);
    println!("imports:  {}", report.imports.join(", "));
    println!("exports:  {}", report.exports.join(", "));
    match report.problem {
        None => {
            println!("world:    implements {}", qhost::plugins::WIT_PACKAGE);
            println!("loads:    yes, with {}", manifest_shown(file));
            Ok(())
        }
        Some(problem) => bail!("{} would not load: {problem}", file.display()),
    }
}

/// `qhost check`: every consumed queue's plugins load as `run` would load them.
pub(crate) async fn check_deploy(
    config: &Config,
    file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let shown = file.map_or("the built-in defaults".into(), |f| f.display().to_string());
    println!("config:   {shown}: {} queue(s)", config.queues.len());
    let registry = qhost::load_plugins(config).await?;
    let mut problems = 0;
    let (mut unread, mut refused) = (0, 0);
    for q in &config.queues {
        for name in q.plugins() {
            let path = config.plugins_dir.join(format!("{name}.wasm"));
            match registry.get(name) {
                Some(p) => {
                    println!(
                        "queue {}: plugin {name} loads ({}, version {})",
                        q.name,
                        path.display(),
                        p.version
                    );
                    let targets = outbox_targets(config, &p.outbox_queues()).await;
                    for t in &targets {
                        println!("  outbox {}: {}", t.queue, t.says);
                    }
                    refused += targets.iter().filter(|t| t.refused).count();
                    unread += targets.iter().filter(|t| !t.refused && !t.read).count();
                }
                None => {
                    problems += 1;
                    let why = if path.is_file() {
                        registry.why_not_serving(name)
                    } else {
                        format!("there is no {}{}", path.display(), present(config, name))
                    };
                    println!("queue {}: plugin {name} does not load: {why}", q.name);
                }
            }
        }
    }
    if let Err(e) = qhost::check_deadlines(config, &registry) {
        problems += 1;
        println!("deadline: {e}");
    }
    problems += check_queues(config).await;
    match qhost::check_store(config).await {
        Ok(Some(line)) => println!("store:    {line}"),
        Ok(None) => {}
        Err(e) => {
            problems += 1;
            println!("store:    {e:#}");
        }
    }
    let mut schedule_problems = 0;
    for s in qhost::schedule::check(config) {
        schedule_problems += usize::from(s.problem);
        println!("schedule {}: {}", s.name, s.line);
    }
    if problems > 0 {
        bail!("{problems} problem(s): `qhost run` would refuse to start");
    }
    if schedule_problems > 0 {
        bail!("{schedule_problems} schedule(s) send ticks their queue would dead-letter");
    }
    if refused > 0 {
        bail!("{refused} outbox queue(s) the source refuses: every send to them would fail");
    }
    match unread {
        0 => println!("ok: `qhost run` would start"),
        n => println!(
            "ok: `qhost run` would start; {n} outbox queue(s) no [[queue]] here consumes (above): \
             check the names, unless another service reads them"
        ),
    }
    Ok(())
}

/// Each consumed queue and its dead-letter queue as the source sees them; the number that
/// `qhost run` would refuse.
async fn check_queues(config: &Config) -> usize {
    if matches!(config.source, qhost::SourceKind::Local) {
        return 0; // the embedded queue makes the configured queues itself
    }
    let queues = match qhost::Queues::open(config, &[]).await {
        Ok(queues) => queues,
        Err(e) => {
            println!("source: cannot be reached: {e:#}");
            return 1;
        }
    };
    let mut problems = 0;
    for q in &config.queues {
        match queues.inspect(&q.name, &q.dead_letter).await {
            Ok(line) => println!("queue {}: {line}", q.name),
            Err(e) => {
                problems += 1;
                println!("queue {}: {e:#}", q.name);
            }
        }
    }
    problems
}

/// What the plugins directory holds instead of `name`: the nearest name first if one is near.
fn present(config: &Config, name: &str) -> String {
    let mut there: Vec<String> = std::fs::read_dir(&config.plugins_dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".wasm").map(String::from))
        .collect();
    if there.is_empty() {
        return " (the plugins directory holds no .wasm file)".into();
    }
    there.sort();
    let near = qhost::nearest(there.iter().map(String::as_str), name)
        .map(|n| format!("did you mean `{n}`? "))
        .unwrap_or_default();
    format!(" ({near}it holds: {})", there.join(", "))
}

/// One queue a plugin may send to, as `qhost check` reports it.
struct Target {
    queue: String,
    /// Whether a `[[queue]]` of this configuration consumes it.
    read: bool,
    /// Whether the source refuses it (it does not exist there): every send would fail.
    refused: bool,
    says: String,
}

/// What becomes of sends to each of `queues` (a plugin's outbox grant) under `config`: read
/// by a configured queue, sent where nothing here reads it, or refused by the source.
async fn outbox_targets(config: &Config, queues: &[&str]) -> Vec<Target> {
    let mut targets = Vec::new();
    for &queue in queues {
        let consumer = config.queues.iter().find(|q| q.name == queue);
        let (read, refused, says) = if queue == "*" {
            (true, false, "any queue (`*`)".to_string())
        } else if let Some(q) = consumer {
            (true, false, format!("consumed here (queue {})", q.name))
        } else if let Some(why) = super::queue::undeclared(config, false, queue) {
            (false, true, format!("the source refuses it: {why}"))
        } else {
            match qhost::Queues::open(config, &[queue]).await {
                Err(e) => (false, true, format!("the source refuses it: {e:#}")),
                Ok(_) => (
                    false,
                    false,
                    "no [[queue]] here consumes it: what the plugin sends there waits unread"
                        .to_string(),
                ),
            }
        };
        let queue = queue.to_string();
        targets.push(Target {
            queue,
            read,
            refused,
            says,
        });
    }
    targets
}

/// The manifest a plugin file loads with, as `plugins check` names it.
pub(crate) fn manifest_shown(file: &std::path::Path) -> String {
    let manifest = file.with_extension("toml");
    if manifest.is_file() {
        manifest.display().to_string()
    } else {
        format!("the default manifest (no {})", manifest.display())
    }
}

pub(crate) async fn list(config: &Config) -> anyhow::Result<()> {
    let live = config.data_dir.as_deref().and_then(HostPlugins::read_live);
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
            HostPlugins::of(&*qhost::load_plugins(config).await?)
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
        if let Some(r) = &p.rollout {
            println!("{:<20} rollout: {}", "", rollout(r));
        }
    }
    Ok(())
}

/// A rollout in one line: versions, share, counts, state and why.
fn rollout(r: &qhost::RolloutRecord) -> String {
    let runs = |t: &qhost::Tally| format!("{} runs, {} failed", t.runs(), t.failed());
    let why = if r.reason.is_empty() {
        String::new()
    } else {
        format!(": {}", r.reason)
    };
    format!(
        "canary {} on {}% of keys beside {}; canary {}, serving {}; {}{why}",
        r.canary,
        r.percent,
        r.serving,
        runs(&r.canary_runs),
        runs(&r.serving_runs),
        r.state.name()
    )
}

/// `qhost plugins promote|rollback NAME`.
pub(crate) async fn decide(config: &Config, name: &str, promote: bool) -> anyhow::Result<()> {
    let record = qhost::decide_rollout(config, name, promote).await?;
    println!("{name}: {}", rollout(&record));
    println!("every host sharing this store follows within a second");
    Ok(())
}
