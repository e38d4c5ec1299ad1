//! `qhost dlq peek|redrive`: dead letters read, and sent back to the queue they came from.

use anyhow::bail;

use qhost::{Config, DeadLetter, Queues};

/// The dead-letter queue `queue` names: itself, or, for a consumed queue, the one its dead
/// letters go to (said on stderr, so a reader of the output knows where they came from).
fn dead_letter_queue<'a>(config: &'a Config, queue: &'a str) -> &'a str {
    match config.queue(queue) {
        Some(consumed) => {
            let dlq = consumed.dead_letter.as_str();
            eprintln!("{queue} is a consumed queue: its dead letters are in {dlq}");
            dlq
        }
        None => queue,
    }
}

pub(crate) async fn dlq_peek(
    config: Config,
    queue: &str,
    limit: usize,
    jsonl: bool,
) -> anyhow::Result<()> {
    let queue = dead_letter_queue(&config, queue);
    let letters = Queues::open(&config, &[queue])
        .await?
        .dead_letters(queue, limit)
        .await?;
    if jsonl {
        return print_jsonl(&letters);
    }
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

/// Each dead letter as one line of recorded-message JSON, for `qhost replay`; the count on
/// standard error, so the output is the file.
fn print_jsonl(letters: &[DeadLetter]) -> anyhow::Result<()> {
    let mut unreadable = 0;
    for letter in letters {
        match letter.recorded() {
            Ok(record) => println!("{}", record.to_line()),
            Err(why) => {
                unreadable += 1;
                eprintln!("{} left out: {why}", letter.message.id);
            }
        }
    }
    eprintln!("{} dead letter(s) written", letters.len() - unreadable);
    Ok(())
}

pub(crate) async fn dlq_redrive(
    config: Config,
    queue: &str,
    limit: usize,
    to: Option<&str>,
) -> anyhow::Result<()> {
    let queue = dead_letter_queue(&config, queue);
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
