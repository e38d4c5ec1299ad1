//! One file per family of commands, each a function the dispatcher calls with the checked
//! configuration; and what more than one of them shows.

mod dlq;
mod invoke;
mod plugins;
mod queue;
mod run;

pub(crate) use dlq::{dlq_peek, dlq_redrive};
pub(crate) use invoke::invoke;
pub(crate) use plugins::{check, check_deploy, list};
pub(crate) use queue::{peek, purge, send};
pub(crate) use run::{DEAD_LETTERED, run};

use anyhow::bail;

use qhost::config::Config;
use qhost::message::Attribute;

/// The local queue, for the commands only it supports.
pub(crate) fn local_queue(config: &Config) -> anyhow::Result<qhost::source::local::LocalQueue> {
    if config.source != qhost::config::SourceKind::Local {
        bail!("this works on the local queue only (source.kind = \"local\")");
    }
    let path = config.database();
    qhost::source::local::LocalQueue::open(path.as_deref(), Default::default())
}

/// A message as the commands print it: `BODY  [NAME=VALUE, …]`.
pub(crate) fn shown(body: &[u8], attributes: &[Attribute]) -> String {
    let attrs: Vec<String> = (attributes.iter())
        .map(|a| format!("{}={}", a.name, a.text().unwrap_or("<binary>")))
        .collect();
    format!("{}  [{}]", String::from_utf8_lossy(body), attrs.join(", "))
}
