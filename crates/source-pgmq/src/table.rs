//! A pgmq queue's table, `pgmq.q_NAME`: the name lower-cased as pgmq's `format_table_name`
//! does, and refused where pgmq refuses it.

use qhost_postgres_link::quoted;
use qhost_source::SourceError;

/// The longest queue name pgmq allows (its tables' names must fit 63 bytes).
const MAX_NAME: usize = 47;

/// The queue table of `queue`, quoted for SQL; refused as pgmq refuses the name.
pub(crate) fn queue_table(queue: &str) -> Result<String, SourceError> {
    check(queue)?;
    Ok(format!(
        "pgmq.{}",
        quoted(&format!("q_{}", queue.to_lowercase()))
    ))
}

/// pgmq's rules for a queue's name.
fn check(queue: &str) -> Result<(), SourceError> {
    if queue.is_empty() || queue.len() > MAX_NAME {
        return Err(SourceError::Refused(format!(
            "`{queue}` is not a pgmq queue name: 1 to {MAX_NAME} characters"
        )));
    }
    if ["$", ";", "--", "'"].iter().any(|bad| queue.contains(bad)) {
        return Err(SourceError::Refused(format!(
            "`{queue}` is not a pgmq queue name: pgmq refuses $, ;, -- and '"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_pgmq_s_lower_cased_and_quoted() {
        assert_eq!(queue_table("Jobs").unwrap(), "pgmq.\"q_jobs\"");
        assert_eq!(queue_table("jobs-dlq").unwrap(), "pgmq.\"q_jobs-dlq\"");
        for bad in ["", "a;drop", "a--b", "it's", &"x".repeat(48)] {
            assert!(queue_table(bad).is_err(), "{bad}");
        }
    }
}
