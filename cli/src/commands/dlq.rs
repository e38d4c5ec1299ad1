//! `qhost dlq peek|redrive`: dead letters read, and sent back to the queue they came from.

use anyhow::bail;

use qhost::{Config, Queues};

pub(crate) async fn dlq_peek(config: Config, queue: &str, limit: usize) -> anyhow::Result<()> {
    let letters = Queues::open(&config, &[queue])
        .await?
        .dead_letters(queue, limit)
        .await?;
    for letter in &letters {
        let (m, v) = (&letter.message, &letter.verdict);
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
    let done = Queues::open(&config, &queues)
        .await?
        .redrive(queue, to, limit)
        .await?;
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
