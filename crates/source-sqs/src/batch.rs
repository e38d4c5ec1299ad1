//! Splitting sends into SQS batches (at most ten entries and at most 1 MiB per request), and
//! reading a batch call's answer entry by entry.

use super::json::shapes::EntryFailure;
use qhost_message::wire::{MAX_BATCH_ENTRIES as MAX_ENTRIES, MAX_MESSAGE_BYTES as MAX_BYTES};
use qhost_source::SourceError;

/// Each of `n` entries' result, entry `i` having been sent with the id `i`: the entries SQS
/// lists as failed failed, with a receipt SQS no longer knows (or a message no longer in flight)
/// as [`SourceError::HandleExpired`]; the rest succeeded.
pub(crate) fn entry_results(n: usize, failed: &[EntryFailure]) -> Vec<Result<(), SourceError>> {
    let mut results: Vec<Result<(), SourceError>> = (0..n).map(|_| Ok(())).collect();
    for f in failed {
        let Some(result) = (f.id.parse::<usize>().ok()).and_then(|i| results.get_mut(i)) else {
            continue;
        };
        let code = &f.code;
        *result = Err(if super::refusal::receipt_expired(code) {
            SourceError::HandleExpired
        } else {
            SourceError::Backend(anyhow::anyhow!(
                "{code} {}",
                f.message.as_deref().unwrap_or_default()
            ))
        });
    }
    results
}

/// A message no batch can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a message of {0} bytes exceeds SQS's limit of {MAX_BYTES} bytes")]
pub(crate) struct TooLarge(pub(crate) usize);

/// Indices of `sizes` grouped into batches within both limits; a message over the byte limit
/// is an error, since no batch can carry it.
pub(crate) fn plan(sizes: &[usize]) -> Result<Vec<Vec<usize>>, TooLarge> {
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut bytes = 0;
    for (i, &size) in sizes.iter().enumerate() {
        if size > MAX_BYTES {
            return Err(TooLarge(size));
        }
        let fits = batches
            .last()
            .is_some_and(|b| b.len() < MAX_ENTRIES && bytes + size <= MAX_BYTES);
        if fits {
            bytes += size;
            if let Some(b) = batches.last_mut() {
                b.push(i);
            }
        } else {
            batches.push(vec![i]);
            bytes = size;
        }
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(id: &str, code: &str) -> EntryFailure {
        EntryFailure {
            id: id.into(),
            code: code.into(),
            sender_fault: true,
            message: Some("why".into()),
        }
    }

    #[test]
    fn each_entry_gets_its_own_answer_and_a_stale_receipt_is_expired() {
        let answers = entry_results(
            4,
            &[
                failed("1", "ReceiptHandleIsInvalid"),
                failed("2", "AWS.SimpleQueueService.MessageNotInflight"),
                failed("3", "InvalidParameterValue"),
                failed("7", "InvalidParameterValue"),
                failed("x", "InvalidParameterValue"),
            ],
        );
        assert!(answers[0].is_ok());
        assert!(matches!(answers[1], Err(SourceError::HandleExpired)));
        assert!(matches!(answers[2], Err(SourceError::HandleExpired)));
        let other = answers[3].as_ref().unwrap_err().to_string();
        assert_eq!(other, "InvalidParameterValue why");
        assert_eq!(answers.len(), 4, "ids it did not send are ignored");
    }

    #[test]
    fn batches_respect_count_and_bytes() {
        assert_eq!(
            plan(&[1; 25])
                .unwrap()
                .iter()
                .map(Vec::len)
                .collect::<Vec<_>>(),
            vec![10, 10, 5]
        );
        let big = MAX_BYTES / 2 + 1;
        assert_eq!(plan(&[big, big, 10]).unwrap(), vec![vec![0], vec![1, 2]]);
        assert_eq!(plan(&[MAX_BYTES]).unwrap(), vec![vec![0]]);
        let e = plan(&[MAX_BYTES + 1]).unwrap_err();
        assert_eq!(e, TooLarge(MAX_BYTES + 1));
        assert!(e.to_string().contains("exceeds"), "{e}");
        assert!(plan(&[]).unwrap().is_empty());
    }
}
