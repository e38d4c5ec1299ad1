//! State commits: a run's writes applied with its completion, its reads checked first (a key
//! that changed since it was read refuses the whole completion, and leaves the lease the
//! caller's), counters added at commit, and values that expire.

use std::time::Duration;

use super::{Fixture, LONG, cases, eventually};
use crate::commit::{BucketCommit, Op, Read, StateCommit, sha1_hex, stored_bucket};
use crate::{Completion, IdempotencyError, KeyStatus, Lease};

cases! {
    "state: a run's writes are applied with its completion" => writes_applied,
    "state: a key read that changed refuses the completion, which may then go through without it" => conflict_refuses,
    "state: adding to a value that is not a counter is refused" => add_to_text_refused,
    "state: written values expire after their bucket's time to live" => values_expire,
}

/// One bucket's commit of `reads` and `writes`, values living `ttl_ms` (0: until deleted).
fn commit(bucket: &str, ttl_ms: u64, reads: Vec<Read>, writes: Vec<(&str, Op)>) -> StateCommit {
    StateCommit {
        buckets: vec![BucketCommit {
            bucket: bucket.to_string(),
            ttl_ms,
            reads,
            writes: writes
                .into_iter()
                .map(|(k, op)| (k.to_string(), op))
                .collect(),
        }],
    }
}

fn set(value: &str) -> Op {
    Op::Set {
        value: value.as_bytes().to_vec(),
    }
}

fn seen(key: &str, value: Option<&str>) -> Read {
    Read {
        key: key.to_string(),
        seen: value.map(|v| sha1_hex(v.as_bytes())),
    }
}

/// Completes `lease` with `state`: the store's answer for it.
async fn complete(f: &Fixture, lease: &Lease, state: StateCommit) -> Result<(), IdempotencyError> {
    let done = Completion {
        lease: lease.clone(),
        outbox: vec![],
        result: None,
        window: LONG,
        digest: None,
        state,
    };
    f.store.complete(&[done]).await.unwrap().remove(0).map(drop)
}

/// The values of `keys` in `bucket`, as text.
async fn values(f: &Fixture, bucket: &str, keys: &[&str]) -> Vec<Option<String>> {
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    let got = f.store.kv_get(bucket, &keys).await.unwrap();
    got.into_iter()
        .map(|v| v.map(|v| String::from_utf8_lossy(&v).into_owned()))
        .collect()
}

fn texts(values: &[Option<&str>]) -> Vec<Option<String>> {
    values.iter().map(|v| v.map(str::to_string)).collect()
}

async fn writes_applied(f: Fixture) {
    let bucket = stored_bucket(&f.prefix, "p", "b");
    let first = f.grant(&f.key("run-1"), LONG).await;
    let writes = vec![
        ("a", set("x")),
        ("n", Op::Add { delta: 2 }),
        ("c", Op::Delete),
    ];
    complete(&f, &first, commit(&bucket, 0, vec![], writes))
        .await
        .unwrap();
    assert_eq!(
        values(&f, &bucket, &["a", "n", "c"]).await,
        texts(&[Some("x"), Some("2"), None])
    );
    assert_eq!(f.store.kv_list(&bucket, 10).await.unwrap(), ["a", "n"]);
    let second = f.grant(&f.key("run-2"), LONG).await;
    let reads = vec![seen("a", Some("x")), seen("z", None)];
    let writes = vec![("n", Op::Add { delta: 3 }), ("a", Op::Delete)];
    complete(&f, &second, commit(&bucket, 0, reads, writes))
        .await
        .unwrap();
    assert_eq!(
        values(&f, &bucket, &["a", "n"]).await,
        texts(&[None, Some("5")])
    );
    assert_eq!(f.store.kv_list(&bucket, 10).await.unwrap(), ["n"]);
    assert_eq!(
        f.store.kv_list(&bucket, 0).await.unwrap(),
        Vec::<String>::new()
    );
}

async fn conflict_refuses(f: Fixture) {
    let bucket = stored_bucket(&f.prefix, "p", "b");
    let setup = f.grant(&f.key("setup"), LONG).await;
    complete(
        &f,
        &setup,
        commit(&bucket, 0, vec![], vec![("a", set("x"))]),
    )
    .await
    .unwrap();
    // Run 1 reads a = "x"; run 2 changes it and completes first.
    let (k1, k2) = (f.key("run-1"), f.key("run-2"));
    let (run1, run2) = (f.grant(&k1, LONG).await, f.grant(&k2, LONG).await);
    complete(&f, &run2, commit(&bucket, 0, vec![], vec![("a", set("y"))]))
        .await
        .unwrap();
    let stale = commit(
        &bucket,
        0,
        vec![seen("a", Some("x"))],
        vec![("b", set("from-x"))],
    );
    assert_eq!(
        complete(&f, &run1, stale).await,
        Err(IdempotencyError::Conflict(k1.clone()))
    );
    assert_eq!(
        values(&f, &bucket, &["a", "b"]).await,
        texts(&[Some("y"), None]),
        "nothing written"
    );
    assert!(
        matches!(f.store.status(&k1).await.unwrap(), KeyStatus::InProgress { ref owner, .. } if *owner == run1.owner),
        "the lease is still the caller's"
    );
    let fresh = commit(
        &bucket,
        0,
        vec![seen("a", Some("y"))],
        vec![("b", set("from-y"))],
    );
    complete(&f, &run1, fresh).await.unwrap();
    assert_eq!(values(&f, &bucket, &["b"]).await, texts(&[Some("from-y")]));
}

async fn add_to_text_refused(f: Fixture) {
    let bucket = stored_bucket(&f.prefix, "p", "b");
    let setup = f.grant(&f.key("setup"), LONG).await;
    complete(
        &f,
        &setup,
        commit(&bucket, 0, vec![], vec![("a", set("text"))]),
    )
    .await
    .unwrap();
    let k = f.key("run");
    let run = f.grant(&k, LONG).await;
    let add = commit(
        &bucket,
        0,
        vec![],
        vec![("a", Op::Add { delta: 1 }), ("b", set("1"))],
    );
    assert_eq!(
        complete(&f, &run, add).await,
        Err(IdempotencyError::Conflict(k))
    );
    assert_eq!(
        values(&f, &bucket, &["a", "b"]).await,
        texts(&[Some("text"), None])
    );
}

async fn values_expire(f: Fixture) {
    let bucket = stored_bucket(&f.prefix, "p", "short");
    let run = f.grant(&f.key("run"), LONG).await;
    complete(
        &f,
        &run,
        commit(&bucket, 300, vec![], vec![("a", set("x"))]),
    )
    .await
    .unwrap();
    assert_eq!(values(&f, &bucket, &["a"]).await, texts(&[Some("x")]));
    let gone = eventually(Duration::from_secs(5), || async {
        values(&f, &bucket, &["a"]).await == [None]
    })
    .await;
    assert!(gone, "expired after its time to live");
    assert_eq!(
        f.store.kv_list(&bucket, 10).await.unwrap(),
        Vec::<String>::new()
    );
}
