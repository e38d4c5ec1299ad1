//! `qhost invoke`: one message through one plugin file, with no queue, lease or effect.

use anyhow::Context as _;

use super::shown;
use crate::args::InvokeArgs;
use qhost::{Config, InvokeRequest, Outcome, Ran, StateCommit, StateOp};

pub(crate) async fn invoke(
    config: Config,
    args: InvokeArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let (body, attributes) = args.message.read()?;
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
    let report = (qhost::invoke_file(&config, &args.file, request).await).map_err(|e| {
        match format!("{e:#}") {
            text if text.contains("[secrets]") => {
                anyhow::anyhow!("{text}; or give the value with --set KEY=VALUE")
            }
            _ => e,
        }
    })?;
    println!("plugin:   {} {}", report.plugin, report.version);
    let (outcome, code) = match &report.ran {
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
    if let Ran::Answered { key, .. } | Ran::Failed { key, .. } = &report.ran {
        println!("key:      {key}");
    }
    println!("outcome:  {outcome}");
    if let Ran::Answered { invocation, .. } = &report.ran {
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
