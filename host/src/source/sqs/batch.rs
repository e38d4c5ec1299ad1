//! Splitting sends into SQS batches: at most ten entries and at most 1 MiB per request.

use crate::message::wire::{MAX_BATCH_ENTRIES as MAX_ENTRIES, MAX_MESSAGE_BYTES as MAX_BYTES};

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
