//! One message through one plugin file: `qhost invoke`, the handler author's inner loop, through
//! the host's pipeline on in-memory parts ([`super::bench`]).
//!
//! The plugin is loaded as the host loads it (its manifest beside it, the same engine limits
//! and compiled-code cache), the key is derived by its manifest, and the call runs under its
//! deadline and memory limit. What it sends goes to the in-memory queue and is reported; the
//! store is empty for each invocation, so the same message can be tried again and again.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::bench::{self, Bench, Ended};
use crate::config::Config;
use crate::handler::{Failure, Invocation, Outcome};
use crate::message::{Attribute, Received};
use crate::plugin::loader::LoadAs;
use crate::plugin::manifest::{ConfigValue, Manifest};
use crate::runtime::Costs;

/// The message to run, and settings to change in the plugin's `[config]`.
#[derive(Clone, Debug, Default)]
pub struct InvokeRequest {
    /// The body.
    pub body: Vec<u8>,
    /// Its attributes.
    pub attributes: Vec<Attribute>,
    /// `[config]` entries set over the manifest's.
    pub config: Vec<(String, String)>,
    /// Whether the plugin may call the HTTP origins its manifest grants. Off by default: a
    /// try-out on a laptop sends nothing anywhere unless asked to.
    pub allow_http: bool,
}

/// What happened.
#[derive(Debug)]
pub struct InvokeReport {
    /// The plugin name (the file stem).
    pub plugin: String,
    /// Its version (content hash).
    pub version: String,
    /// Whether it ran, and its answer.
    pub ran: Ran,
    /// Instantiate, call and drop time of this one call (none when it did not run, or for a
    /// plugin that does not count them).
    pub costs: Option<Costs>,
    /// Wall-clock time of the whole invocation.
    pub took: Duration,
    /// The HTTP origins the manifest grants that this call was not allowed to reach.
    pub http_withheld: Vec<String>,
}

/// Whether the handler ran: one of three, so a report cannot say it ran without a key.
#[derive(Debug)]
pub enum Ran {
    /// The manifest derives no key from this message, so a host would reject it unrun.
    NoKey(String),
    /// It ran under `key` and answered.
    Answered {
        /// The idempotency key it ran under.
        key: String,
        /// Its outcome and what its outbox holds.
        invocation: Invocation,
    },
    /// It ran under `key` and failed (a trap, the deadline, the memory limit); a host would
    /// retry it, then dead-letter it.
    Failed {
        /// The idempotency key it ran under.
        key: String,
        /// How it failed.
        failure: Failure,
    },
}

/// The queue name the handler is told its message came from.
pub(crate) const QUEUE: &str = "invoke";

/// What a batch call did to each message (`qhost invoke --batch`).
#[derive(Debug)]
pub struct BatchReport {
    /// The plugin name (the file stem).
    pub plugin: String,
    /// Its version (content hash).
    pub version: String,
    /// Each message's run, in the order given.
    pub ran: Vec<Ran>,
    /// Instantiate, call and drop time of the call.
    pub costs: Option<Costs>,
    /// Wall-clock time of the whole invocation.
    pub took: Duration,
    /// The HTTP origins the manifest grants that this call was not allowed to reach.
    pub http_withheld: Vec<String>,
}

/// Loads the batch plugin `path` and calls it once with one message per body of `bodies`,
/// each with `request`'s attributes (its body unused).
pub async fn invoke_batch_file(
    config: &Config,
    path: &Path,
    request: InvokeRequest,
    bodies: Vec<Vec<u8>>,
) -> anyhow::Result<BatchReport> {
    let (bench, http_withheld) = load(config, path, &request).await?;
    let plugin = bench.plugin();
    let msgs: Vec<Received> = (bodies.into_iter())
        .map(|body| message(body, request.attributes.clone()))
        .collect();
    let before = plugin.costs().unwrap_or_default();
    let started = Instant::now();
    let runs = bench.run_batch(&msgs).await.map_err(anyhow::Error::msg)?;
    Ok(BatchReport {
        plugin: plugin.name.clone(),
        version: plugin.version.clone(),
        ran: runs.into_iter().map(reported).collect(),
        costs: plugin.costs().map(|after| since(&before, after)),
        took: started.elapsed(),
        http_withheld,
    })
}

/// A message as `invoke` hands it over.
fn message(body: Vec<u8>, attributes: Vec<Attribute>) -> Received {
    Received {
        id: uuid::Uuid::new_v4().to_string(),
        handle: String::new(),
        queue: QUEUE.into(),
        body,
        attributes,
        delivery_count: 1,
        sent_at_ms: now_ms(),
        group_id: None,
        malformed: None,
    }
}

/// Loads `path` with `request`'s settings; the HTTP origins withheld from it.
async fn load(
    config: &Config,
    path: &Path,
    request: &InvokeRequest,
) -> anyhow::Result<(Bench, Vec<String>)> {
    let overrides = request.config.clone();
    let allow_http = request.allow_http;
    let withheld = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&withheld);
    let edit = move |manifest: &mut Manifest| {
        let texts = overrides
            .into_iter()
            .map(|(k, v)| (k, ConfigValue::Text(v)));
        manifest.config.extend(texts);
        if !allow_http {
            let http = std::mem::take(&mut manifest.capabilities.http);
            *kept.lock().unwrap_or_else(|e| e.into_inner()) = http;
        }
    };
    let bench = Bench::load_for(config, LoadAs::file(path), edit, None).await?;
    let http_withheld = std::mem::take(&mut *withheld.lock().unwrap_or_else(|e| e.into_inner()));
    Ok((bench, http_withheld))
}

/// Loads `path` and runs `request` through it once.
pub async fn invoke_file(
    config: &Config,
    path: &Path,
    request: InvokeRequest,
) -> anyhow::Result<InvokeReport> {
    let (bench, http_withheld) = load(config, path, &request).await?;
    let plugin = bench.plugin();
    let msg = message(request.body, request.attributes);
    // Loading may have run an instance already (a check): only this call's costs count.
    let before = plugin.costs().unwrap_or_default();
    let started = Instant::now();
    let mut runs = (bench.run(&msg, None, None).await).map_err(anyhow::Error::msg)?;
    let ran = runs
        .pop()
        .context("qhost's format reads one run from every message")?;
    let ran = reported(ran);
    let costs = match ran {
        Ran::NoKey(_) => None,
        _ => plugin.costs().map(|after| since(&before, after)),
    };
    Ok(InvokeReport {
        http_withheld,
        took: started.elapsed(),
        plugin: plugin.name.clone(),
        version: plugin.version.clone(),
        ran,
        costs,
    })
}

/// The report's form of what the bench ran.
fn reported(ran: bench::Ran) -> Ran {
    let ran = ran.end;
    let key = ran.key.unwrap_or_default();
    let outcome = match ran.ended {
        Ended::Ack => Outcome::Ack,
        Ended::Retry(secs) => Outcome::Retry(secs),
        Ended::Reject(reason) => Outcome::Reject(reason),
        Ended::NoKey(why) => return Ran::NoKey(why),
        other => match ran.failure {
            Some(failure) => return Ran::Failed { key, failure },
            None => return Ran::NoKey(other.to_string()),
        },
    };
    let invocation = Invocation {
        outcome,
        outbox: ran.outbox,
        result: ran.result,
        state: ran.state,
    };
    Ran::Answered { key, invocation }
}

pub(crate) fn since(before: &Costs, after: Costs) -> Costs {
    Costs {
        instances: after.instances - before.instances,
        instantiate: after.instantiate.saturating_sub(before.instantiate),
        calls: after.calls - before.calls,
        call: after.call.saturating_sub(before.call),
        drop: after.drop.saturating_sub(before.drop),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
