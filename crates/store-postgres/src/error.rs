//! What a driver's or the pool's error is to the pipeline: the store could not answer
//! (`Unavailable`, the message goes back without using up an attempt), or it did not answer in
//! time (`TimedOut`: a statement the server cancelled at `statement_timeout`, or no connection
//! free within the pool's wait).

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

use qhost_store::IdempotencyError;

/// A statement's failure.
pub(crate) fn failed(e: tokio_postgres::Error) -> IdempotencyError {
    if e.code() == Some(&SqlState::QUERY_CANCELED) {
        return IdempotencyError::TimedOut(format!("PostgreSQL cancelled the statement: {e}"));
    }
    if e.is_closed() {
        return IdempotencyError::Unavailable(format!("the PostgreSQL connection closed: {e}"));
    }
    IdempotencyError::unavailable(e)
}

/// The pool's failure to hand out a connection.
pub(crate) fn pool(e: PoolError) -> IdempotencyError {
    match e {
        PoolError::Timeout(_) => IdempotencyError::TimedOut(format!(
            "no PostgreSQL connection free or made within the pool's wait ({e}): the pool is \
             exhausted or the server is slow to accept"
        )),
        PoolError::Backend(e) => failed(e),
        other => IdempotencyError::unavailable(other),
    }
}
