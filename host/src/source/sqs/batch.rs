//! Splitting sends into SQS batches: at most ten entries and at most 1 MiB per request.

use crate::message::Outgoing;

/// Entries per `SendMessageBatch`.
pub const MAX_ENTRIES: usize = 10;
/// Bytes per request, body and attributes together (SQS's limit since 2025).
pub const MAX_BYTES: usize = 1024 * 1024;

/// The size SQS counts for a message: body, and each attribute's name, type and value.
pub fn size(m: &Outgoing, body_len: usize) -> usize {
    body_len
        + m.attributes
            .iter()
            .map(|a| {
                let value = match &a.value {
                    crate::message::AttributeValue::String(s)
                    | crate::message::AttributeValue::Number(s) => s.len(),
                    crate::message::AttributeValue::Binary(b) => b.len(),
                };
                a.name.len() + 6 + value
            })
            .sum::<usize>()
}

/// Indices of `sizes` grouped into batches within both limits; a message over the byte limit
/// is an error, since no batch can carry it.
pub fn plan(sizes: &[usize]) -> Result<Vec<Vec<usize>>, String> {
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut bytes = 0;
    for (i, &size) in sizes.iter().enumerate() {
        if size > MAX_BYTES {
            return Err(format!(
                "a message of {size} bytes exceeds SQS's limit of {MAX_BYTES} bytes"
            ));
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
        assert!(plan(&[MAX_BYTES + 1]).unwrap_err().contains("exceeds"));
        assert!(plan(&[]).unwrap().is_empty());
    }
}
