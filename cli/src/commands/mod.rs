//! One file per family of commands, each a function the dispatcher calls with the checked
//! configuration; and what more than one of them shows.

mod celery;
mod dlq;
mod fleet;
mod inspect;
mod invoke;
mod kv;
mod plugins;
mod queue;
mod replay;
mod run;
mod schedule;
mod test;

pub(crate) use celery::inspect as celery_inspect;
pub(crate) use dlq::{dlq_peek, dlq_redrive};
pub(crate) use fleet::fleet;
pub(crate) use inspect::inspect;
pub(crate) use invoke::invoke;
pub(crate) use kv::{kv_get, kv_list};
pub(crate) use plugins::{check, check_deploy, decide, list};
pub(crate) use queue::{peek, purge, send};
pub(crate) use replay::replay;
pub(crate) use run::{DEAD_LETTERED, run};
pub(crate) use schedule::schedule;
pub(crate) use test::{fixture, test};

use qhost::Attribute;

/// A message as the commands print it: `BODY  [NAME=VALUE, …]`.
pub(crate) fn shown(body: &[u8], attributes: &[Attribute]) -> String {
    let attrs: Vec<String> = (attributes.iter())
        .map(|a| format!("{}={}", a.name, a.text().unwrap_or("<binary>")))
        .collect();
    format!("{}  [{}]", String::from_utf8_lossy(body), attrs.join(", "))
}

/// The bytes of `file`, or of standard input for `-`.
pub(crate) fn read_input(file: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context as _;
    use std::io::Read as _;
    if file == std::path::Path::new("-") {
        let mut raw = Vec::new();
        std::io::stdin()
            .read_to_end(&mut raw)
            .context("reading standard input")?;
        return Ok(raw);
    }
    std::fs::read(file).with_context(|| format!("reading {}", file.display()))
}
