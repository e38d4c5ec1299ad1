//! `qhost invoke`: one message through one plugin file, with no queue, lease or effect.

use anyhow::Context as _;

use super::shown;
use crate::args::InvokeArgs;
use qhost::handlers::Outcome;
use qhost::{Config, InvokeRequest, Ran, StateCommit, StateOp};

pub(crate) async fn invoke(
    config: Config,
    args: InvokeArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let (batch, message) = args.message.split();
    let (body, attributes) = message.read()?;
    let request = InvokeRequest {
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
    if let Some(file) = batch {
        return invoke_batch(&config, &args.file, request, &file).await;
    }
    let report = (qhost::invoke_file(&config, &args.file, request).await).map_err(with_hint)?;
    println!("plugin:   {} {}", report.plugin, report.version);
    let code = print_ran(&report.ran);
    print_withheld(&report.http_withheld);
    if let Some(c) = report.costs {
        print_costs(report.took, &c);
    }
    Ok(std::process::ExitCode::from(code))
}

/// A secret the host does not grant can be given by hand.
fn with_hint(e: anyhow::Error) -> anyhow::Error {
    match format!("{e:#}") {
        text if text.contains("[secrets]") => {
            anyhow::anyhow!("{text}; or give the value with --set KEY=VALUE")
        }
        _ => e,
    }
}

/// `--batch FILE.jsonl`: one call of a batch handler, each message's run printed in order.
async fn invoke_batch(
    config: &Config,
    plugin: &std::path::Path,
    request: InvokeRequest,
    file: &std::path::Path,
) -> anyhow::Result<std::process::ExitCode> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
            .context("reading the batch from standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let bodies: Vec<Vec<u8>> = (text.lines())
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.as_bytes().to_vec())
        .collect();
    anyhow::ensure!(!bodies.is_empty(), "{} holds no messages", file.display());
    let n = bodies.len();
    let report =
        (qhost::invoke_batch_file(config, plugin, request, bodies).await).map_err(with_hint)?;
    println!("plugin:   {} {}", report.plugin, report.version);
    println!("batch:    {n} message(s) in one call");
    let mut worst = 0;
    for (i, ran) in report.ran.iter().enumerate() {
        println!("--- message {i}");
        worst = worst.max(print_ran(ran));
    }
    print_withheld(&report.http_withheld);
    if let Some(c) = report.costs {
        print_costs(report.took, &c);
    }
    Ok(std::process::ExitCode::from(worst))
}

/// Prints one run: its key, outcome, outbox, result and state; its exit code.
fn print_ran(ran: &Ran) -> u8 {
    let (outcome, code) = match ran {
        Ran::NoKey(why) => (format!("reject (not run): {why}"), 4),
        Ran::Answered { invocation, .. } => match &invocation.outcome {
            Outcome::Ack => ("ack".to_string(), 0),
            Outcome::Retry(secs) => (format!("retry (after at least {secs} s)"), 3),
            Outcome::Reject(reason) => (format!("reject: {reason}"), 4),
        },
        Ran::Failed { failure, .. } => (
            format!("failed: {failure} (retried, then dead-lettered, by a host)"),
            5,
        ),
    };
    if let Ran::Answered { key, .. } | Ran::Failed { key, .. } = ran {
        println!("key:      {key}");
    }
    println!("outcome:  {outcome}");
    if let Ran::Answered { invocation, .. } = ran {
        let sent = if invocation.outcome == Outcome::Ack {
            "would send"
        } else {
            "would discard"
        };
        println!("outbox:   {} message(s) it {sent}", invocation.outbox.len());
        for m in &invocation.outbox {
            println!("  -> {}  {}", m.queue, shown(&m.body, &m.attributes));
        }
        if let Some(value) = &invocation.result {
            println!("result:   {value}");
        }
        print_state(&invocation.state, invocation.outcome == Outcome::Ack);
    }
    code
}

/// The HTTP origins a run was not allowed to call.
fn print_withheld(withheld: &[String]) {
    if !withheld.is_empty() {
        println!(
            "http:     not allowed ({} granted by its manifest); pass --allow-http to let it call them",
            withheld.join(", ")
        );
    }
}

/// What the call cost.
fn print_costs(took: std::time::Duration, c: &qhost::plugins::Costs) {
    println!(
        "cost:     {:.3} ms in all: instantiate {:.3} ms, call {:.3} ms, drop {:.3} ms",
        took.as_secs_f64() * 1e3,
        c.instantiate.as_secs_f64() * 1e3,
        c.call.as_secs_f64() * 1e3,
        c.drop.as_secs_f64() * 1e3,
    );
}

/// The state writes a run would commit (from an in-memory store, empty at the start).
fn print_state(state: &StateCommit, acked: bool) {
    let writes = state.writes();
    if writes == 0 {
        return;
    }
    let commit = if acked { "would commit" } else { "would drop" };
    println!("state:    {writes} write(s) it {commit}");
    for bucket in &state.buckets {
        let name = bucket_name(&bucket.bucket);
        for (key, op) in &bucket.writes {
            let what = match op {
                StateOp::Set { value } => format!("= {}", String::from_utf8_lossy(value)),
                StateOp::Delete => "deleted".to_string(),
                StateOp::Add { delta } => format!("+= {delta}"),
            };
            println!("  {name}/{key} {what}");
        }
    }
}

/// `counts` of the stored `NS:kv:{PLUGIN/counts}`.
fn bucket_name(stored: &str) -> &str {
    stored
        .rsplit_once('/')
        .map_or(stored, |(_, b)| b.trim_end_matches('}'))
}
