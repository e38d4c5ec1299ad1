//! `qhost dlq peek|redrive`: dead letters read, and sent back to the queue they came from.

use anyhow::bail;

use super::local_queue;
use qhost::config::Config;

pub(crate) async fn dlq_peek(config: Config, queue: &str, limit: usize) -> anyhow::Result<()> {
    let letters = match config.source {
        qhost::config::SourceKind::Local => local_queue(&config)?.peek(queue, limit).await?,
        _ => {
            let source = qhost::host::open_source_for(&config, &[queue]).await?;
            qhost::dlq::peek(source.as_ref(), queue, limit).await?
        }
    };
    for m in &letters {
        let v = qhost::dlq::verdict(m);
        let body = String::from_utf8_lossy(&m.body);
        let preview: String = body.chars().take(200).collect();
        let more = if body.chars().count() > 200 {
            "…"
        } else {
            ""
        };
        println!("{}", m.id);
        println!(
            "  from {} by {}@{} after {} attempt(s)",
            v.source_queue.as_deref().unwrap_or("?"),
            v.plugin,
            v.version,
            v.attempts
        );
        println!("  reason: {}", v.reason);
        println!("  body:   {preview}{more}");
    }
    println!("{} dead letter(s) shown", letters.len());
    Ok(())
}

pub(crate) async fn dlq_redrive(
    config: Config,
    queue: &str,
    limit: usize,
    to: Option<&str>,
) -> anyhow::Result<()> {
    let queues: Vec<&str> = std::iter::once(queue).chain(to).collect();
    let source = qhost::host::open_source_for(&config, &queues).await?;
    let done = qhost::dlq::redrive(source.as_ref(), queue, to, limit).await?;
    for (id, target) in &done.moved {
        println!("{id} -> {target}");
    }
    for (id, why) in &done.left {
        eprintln!("{id} left in {queue}: {why}");
    }
    println!("{} redriven, {} left", done.moved.len(), done.left.len());
    if !done.left.is_empty() {
        bail!("{} dead letter(s) could not be redriven", done.left.len());
    }
    Ok(())
}
