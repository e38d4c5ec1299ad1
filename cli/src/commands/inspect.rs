//! `qhost inspect`: what qhost reads from a message, by any format.

use std::path::Path;

use anyhow::{Context as _, bail};
use qhost::{Attribute, AttributeValue, Config, Inspected, MessageFormat, Queues, Received};

/// Prints what qhost reads from the message in `file` (or the first waiting in `queue`): by
/// `queue`'s format, routes and plugins when one is named, else by `format`.
pub(crate) async fn inspect(
    config: Config,
    file: Option<&Path>,
    format: Option<&str>,
    queue: Option<&str>,
) -> anyhow::Result<()> {
    let queue_config = match queue {
        None => None,
        Some(name) => Some(
            (config.queue(name))
                .with_context(|| format!("queue `{name}` is not in the configuration"))?,
        ),
    };
    let format = format
        .map(MessageFormat::named)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    if let (Some(q), Some(f)) = (queue_config, &format)
        && q.format.name() != f.name()
    {
        bail!(
            "queue `{}` reads format = \"{}\", not {}",
            q.name,
            q.format.name(),
            f.name()
        );
    }
    let msg = match (file, queue) {
        (Some(file), _) => from_file(super::read_input(file)?),
        (None, Some(queue)) => first_waiting(&config, queue).await?,
        (None, None) => bail!("name a FILE holding the message, or --queue to read its first"),
    };
    let report = qhost::inspect_message(&config, &msg, queue_config, format.as_ref())
        .map_err(|why| anyhow::anyhow!("{why}; a queue would dead-letter it"))?;
    print!("{}", shown(&report));
    Ok(())
}

/// A message read from a file: its body, with no attributes, id `-`.
fn from_file(body: Vec<u8>) -> Received {
    Received {
        id: "-".into(),
        handle: String::new(),
        queue: String::new(),
        body,
        attributes: Vec::new(),
        delivery_count: 1,
        sent_at_ms: 0,
        group_id: None,
        malformed: None,
    }
}

async fn first_waiting(config: &Config, queue: &str) -> anyhow::Result<Received> {
    let queues = Queues::open(config, &[queue]).await?;
    let waiting = queues.peek(queue, 1).await?;
    waiting
        .into_iter()
        .next()
        .with_context(|| format!("no message is waiting in `{queue}`"))
}

fn shown(report: &Inspected) -> String {
    let mut out = format!("format    {}\n", report.format);
    if report.runs.is_empty() {
        out.push_str("runs      none: the message holds nothing to run, and is acked\n");
    }
    for (i, run) in report.runs.iter().enumerate() {
        if report.runs.len() > 1 {
            out.push_str(&format!("run {}\n", i + 1));
        }
        let route = match run.route.is_empty() {
            true => "(the default plugin)".to_string(),
            false => run.route.join(", then "),
        };
        out.push_str(&format!("route     {route}\n"));
        match &run.plugin {
            None => {}
            Some(Ok(plugin)) => out.push_str(&format!("plugin    {plugin}\n")),
            Some(Err(why)) => out.push_str(&format!("plugin    none ({why})\n")),
        }
        match &run.key {
            Ok(key) => out.push_str(&format!("key       {key}\n")),
            Err(why) => out.push_str(&format!(
                "key       none ({why}; it would be dead-lettered)\n"
            )),
        }
        out.push_str(&format!("body      {}\n", text_of(&run.body)));
        for a in &run.attributes {
            out.push_str(&format!("attribute {} = {}\n", a.name, value_of(a)));
        }
    }
    out
}

fn text_of(body: &[u8]) -> String {
    match std::str::from_utf8(body) {
        Ok(text) => text.to_string(),
        Err(_) => format!("({} bytes, not UTF-8)", body.len()),
    }
}

fn value_of(a: &Attribute) -> String {
    match &a.value {
        AttributeValue::String(s) | AttributeValue::Number(s) => s.clone(),
        AttributeValue::Binary(b) => format!("({} bytes)", b.len()),
    }
}
