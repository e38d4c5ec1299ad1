//! `qhost celery inspect`: a Celery message as qhost reads it.

use std::path::Path;

use anyhow::{Context as _, bail};
use qhost::{CeleryReport, Config, Queues};

/// Prints what qhost reads from the message in `file` (or the first waiting in `queue`) and,
/// with `queue`, where that queue routes it.
pub(crate) async fn inspect(
    config: Config,
    file: Option<&Path>,
    queue: Option<&str>,
) -> anyhow::Result<()> {
    let raw = match (file, queue) {
        (Some(file), _) => super::read_input(file)?,
        (None, Some(queue)) => first_waiting(&config, queue).await?,
        (None, None) => bail!("name a FILE holding the message, or --queue to read its first"),
    };
    let queue_config = match queue {
        None => None,
        Some(name) => Some(
            config
                .queue(name)
                .with_context(|| format!("queue `{name}` is not in the configuration"))?,
        ),
    };
    let report = qhost::inspect_celery(&raw, queue_config).map_err(anyhow::Error::msg)?;
    print!("{}", shown(&report));
    Ok(())
}

async fn first_waiting(config: &Config, queue: &str) -> anyhow::Result<Vec<u8>> {
    let queues = Queues::open(config, &[queue]).await?;
    let waiting = queues.peek(queue, 1).await?;
    let first = waiting
        .into_iter()
        .next()
        .with_context(|| format!("no message is waiting in `{queue}`"))?;
    Ok(first.body)
}

fn shown(r: &CeleryReport) -> String {
    let or_none = |s: &Option<String>| s.clone().unwrap_or_else(|| "-".to_string());
    let mut out = format!(
        "task      {}\nid        {}\nprotocol  {}\nretries   {}\neta       {}\nexpires   {}\n\
         args      {}\nkwargs    {}\nkey       {}\n",
        r.task,
        r.id,
        r.protocol,
        r.retries,
        or_none(&r.eta),
        or_none(&r.expires),
        r.args,
        r.kwargs,
        r.key
    );
    match &r.route {
        None => {}
        Some(Ok(plugin)) => out.push_str(&format!("plugin    {plugin}\n")),
        Some(Err(why)) => out.push_str(&format!("plugin    none ({why})\n")),
    }
    out
}
