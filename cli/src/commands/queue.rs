//! The queue verbs: `send`, `peek` and `purge`.

use anyhow::bail;

use super::shown;
use crate::args::SendArgs;
use qhost::{Config, Outgoing, Purged, Queues};

/// `qhost send`; `defaults` when no configuration file was read (the built-in one).
pub(crate) async fn send(config: Config, defaults: bool, args: SendArgs) -> anyhow::Result<()> {
    if args.queue.ends_with(".fifo") && args.group.is_none() {
        bail!(
            "`{}` is a FIFO queue: give the message group with --group GROUP",
            args.queue
        );
    }
    if let Some(why) = undeclared(&config, defaults, &args.queue) {
        bail!("{why}");
    }
    let unconsumed = config
        .queue(&args.queue)
        .is_none()
        .then(|| unconsumed(&config, defaults, &args.queue));
    if let (Some(why), true) = (&unconsumed, args.strict) {
        bail!("{why}; not sent (--strict)");
    }
    let (body, attributes) = args.read()?;
    let mut msg = Outgoing::new(args.queue.clone(), body);
    msg.attributes = attributes;
    msg.delay_seconds = args.delay;
    msg.group_id = args.group.clone();
    let queues = Queues::open(&config, &[&args.queue]).await?;
    let ids = queues.send(msg, args.copies).await?;
    for id in ids {
        println!("{id}");
    }
    if let Some(why) = unconsumed {
        eprintln!("warning: {why}");
    }
    if let Some(q) = config.queue(&args.queue)
        && q.format.name() != "qhost"
        && args.format.is_none()
        && args.celery_task.is_none()
    {
        let format = q.format.name();
        eprintln!(
            "note: queue `{}` reads {format} messages, and the body was sent as it is; \
             --format {format} sends a body as its producer delivers it{}",
            args.queue,
            match format {
                "celery" => " (or --celery-task NAME --args JSON --kwargs JSON)",
                _ => "",
            }
        );
    }
    Ok(())
}

/// Why a message to `queue`, which no configured queue consumes, would wait unread: with the
/// configured name it is nearest to, and which configuration that is.
fn unconsumed(config: &Config, defaults: bool, queue: &str) -> String {
    let names: Vec<&str> = config.queues.iter().map(|q| q.name.as_str()).collect();
    let near = did_you_mean(&names, queue);
    let configured = if defaults {
        format!(
            "no qhost.toml here: the built-in defaults consume only `{}`",
            names.join("`, `")
        )
    } else {
        format!("configured: {}", names.join(", "))
    };
    format!(
        "no configured queue consumes `{queue}`{near}: `qhost run` with this configuration will not take the message ({configured})"
    )
}

/// ` (did you mean `NAME`?)` for the name among `names` a typo away from `queue`, else nothing.
fn did_you_mean(names: &[&str], queue: &str) -> String {
    qhost::nearest(names.iter().copied(), queue)
        .map(|n| format!(" (did you mean `{n}`?)"))
        .unwrap_or_default()
}

/// On the embedded queue, why `queue` cannot take a message: the configuration does not
/// declare it, so it does not exist there (as on SQS before it is created).
pub(super) fn undeclared(config: &Config, defaults: bool, queue: &str) -> Option<String> {
    let exist = config.local_queues()?;
    if exist.contains(queue) {
        return None;
    }
    let names: Vec<&str> = exist.iter().map(String::as_str).collect();
    let near = did_you_mean(&names, queue);
    let whose = match defaults {
        true => "no qhost.toml here: the built-in defaults' queues are",
        false => {
            "the configuration's queues (consumed, dead-letter, scheduled and [source] queues) are"
        }
    };
    Some(format!(
        "queue `{queue}` does not exist on the embedded queue{near}; {whose} {}. \
         To create it, name it in qhost.toml: [source] queues = [\"{queue}\"]",
        names.join(", ")
    ))
}

/// `qhost purge`: asks on a terminal unless `yes`; refuses without one.
pub(crate) async fn purge(config: Config, queue: &str, yes: bool) -> anyhow::Result<()> {
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
    match Queues::open(&config, &[queue]).await?.purge(queue).await? {
        Purged::Deleted(n) => println!("purged `{queue}`: {n} message(s) deleted"),
        Purged::Requested => {
            println!("purging `{queue}`: SQS deletes its messages within a minute")
        }
    }
    Ok(())
}

pub(crate) async fn peek(config: Config, queue: &str, limit: usize) -> anyhow::Result<()> {
    let messages = Queues::open(&config, &[queue])
        .await?
        .peek(queue, limit)
        .await?;
    for m in &messages {
        println!("{}  {}", m.id, shown(&m.body, &m.attributes));
    }
    // On stderr, so what scripts count on stdout stays one line a message.
    if messages.is_empty() {
        eprintln!("0 messages in `{queue}`");
    }
    Ok(())
}
