//! Records a fleet shares, as small JSON texts replaced whole by compare-and-set
//! ([`SharedRecords::swap_record`]): a plugin's rollout, a schedule's record. Two writers that
//! read the same record cannot both replace it, so counts add up once and a decision is made
//! once; a writer that lost reads again and applies its change to what won.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{IdempotencyError, SharedRecords, StoreResult};

/// Compare-and-set attempts before a change gives up (for this pass: its caller tries again).
const ATTEMPTS: usize = 8;

/// The record at `key` (`what` names it in errors).
pub async fn read<T: DeserializeOwned>(
    store: &dyn SharedRecords,
    key: &str,
    what: &str,
) -> StoreResult<Option<T>> {
    parsed(key, what, store.record(key).await?.as_deref())
}

fn parsed<T: DeserializeOwned>(
    key: &str,
    what: &str,
    text: Option<&str>,
) -> StoreResult<Option<T>> {
    text.map(serde_json::from_str)
        .transpose()
        .map_err(|e| IdempotencyError::Corrupt(format!("{what} {key}: {e}")))
}

/// Applies `change` to the record at `key`, kept for `keep` after, by compare-and-set until it
/// holds. `change` is given the record as stored (`None`: absent) and returns the new one, or
/// `None` to leave it as it is. The record as it is after, and whether this call replaced it.
pub async fn update<T: Serialize + DeserializeOwned>(
    store: &dyn SharedRecords,
    key: &str,
    keep: Duration,
    what: &str,
    mut change: impl FnMut(Option<&T>) -> Option<T>,
) -> StoreResult<(Option<T>, bool)> {
    for _ in 0..ATTEMPTS {
        let text = store.record(key).await?;
        let current = parsed(key, what, text.as_deref())?;
        let Some(next) = change(current.as_ref()) else {
            return Ok((current, false));
        };
        let new = serde_json::to_string(&next)
            .map_err(|e| IdempotencyError::Corrupt(format!("{what} {key}: {e}")))?;
        if store.swap_record(key, text.as_deref(), &new, keep).await? {
            return Ok((Some(next), true));
        }
    }
    Err(IdempotencyError::Unavailable(format!(
        "{what} {key} kept changing under {ATTEMPTS} attempts"
    )))
}
