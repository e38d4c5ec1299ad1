//! Gathering a batch from a channel: what is queued already, and what arrives within a short
//! linger after the first item, up to a size. The completer and the put-back batcher share it;
//! the acker gathers its own way, because closing it cuts its linger short.

use std::time::Duration;

use tokio::sync::mpsc;

/// A batch that starts with `first`: up to `max` items, taken from `rx` until `linger` has
/// passed since `first` came or the channel is closed.
pub(crate) async fn gather<T>(
    first: T,
    rx: &mut mpsc::UnboundedReceiver<T>,
    max: usize,
    linger: Duration,
) -> Vec<T> {
    let mut batch = vec![first];
    let deadline = tokio::time::Instant::now() + linger;
    while batch.len() < max {
        let next = match rx.try_recv() {
            Ok(next) => Some(next),
            Err(_) => tokio::time::timeout_at(deadline, rx.recv())
                .await
                .ok()
                .flatten(),
        };
        match next {
            Some(next) => batch.push(next),
            None => break,
        }
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn takes_what_is_queued_and_what_comes_within_the_linger_up_to_the_size() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 1..=3 {
            tx.send(i).unwrap();
        }
        let late = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            late.send(4).unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
            late.send(5).unwrap();
        });
        let first = gather(0, &mut rx, 10, Duration::from_millis(5)).await;
        assert_eq!(first, [0, 1, 2, 3, 4], "5 came after the linger");
        assert_eq!(gather(5, &mut rx, 10, Duration::ZERO).await, [5]);
        for i in 0..20 {
            tx.send(i).unwrap();
        }
        assert_eq!(
            gather(-1, &mut rx, 10, Duration::from_secs(1)).await.len(),
            10
        );
    }
}
