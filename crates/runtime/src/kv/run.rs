//! One run's view of its plugin's buckets: what it reads comes from the store (once per key,
//! then from memory) with its own writes laid over it; what it writes is held here and becomes
//! a [`StateCommit`] when the run ends. Nothing reaches the store before the run's completion.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{Bucket, Dropped, KvPolicy, Refused};
use qhost_store::commit::{self, BucketCommit, Op, Read, StateCommit};

/// Keys `list-keys` pages through at most, committed and written.
pub const MAX_LISTED: usize = 10_000;
/// Keys one `list-keys` page holds.
const PAGE: usize = 1000;

/// What the guest is told when a call cannot be served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvError {
    /// The bucket is not granted.
    AccessDenied(String),
    /// Anything else, said in words.
    Other(String),
    /// The store did not answer a read: the run is ended (see `Failure::StateUnavailable`).
    Unavailable(String),
}

/// One run's reads and writes, set aside while another message of a batch call uses the view
/// (`runtime::batch_items`). What the call read from the store stays shared: each message
/// still sees the committed state plus its own writes, never another message's.
#[derive(Debug, Default)]
pub struct RunPart {
    decided_on: BTreeSet<(String, String)>,
    writes: BTreeMap<(String, String), Op>,
}

/// The state one run sees and writes.
#[derive(Debug)]
pub struct RunState {
    policy: Arc<KvPolicy>,
    /// Buckets opened, by handle; each a granted bucket.
    open: Vec<Bucket>,
    /// Committed values read, by (bucket, key): what the run saw.
    seen: BTreeMap<(String, String), Option<Vec<u8>>>,
    /// Keys whose value the run read to decide (get, exists, get-many).
    decided_on: BTreeSet<(String, String)>,
    /// Writes, by (bucket, key), each key's final operation.
    writes: BTreeMap<(String, String), Op>,
    /// Whether the writes were handed on (to be committed); if not, dropping them counts them.
    taken: bool,
    /// What the store said when it could not answer a read, which ends the run.
    unavailable: Option<String>,
}

impl RunState {
    /// An empty view for one run of the plugin `policy` is for.
    pub fn new(policy: Arc<KvPolicy>) -> Self {
        RunState {
            policy,
            open: Vec::new(),
            seen: BTreeMap::new(),
            decided_on: BTreeSet::new(),
            writes: BTreeMap::new(),
            taken: false,
            unavailable: None,
        }
    }

    /// Starts the next run on a reused instance: nothing read, nothing written. Buckets the
    /// guest keeps open stay open.
    pub fn reset(&mut self) {
        self.seen.clear();
        self.decided_on.clear();
        self.writes.clear();
        self.taken = false;
        self.unavailable = None;
    }

    /// Swaps this run's reads and writes with `part`'s: the view becomes another message's.
    pub fn swap_part(&mut self, part: &mut RunPart) {
        std::mem::swap(&mut self.decided_on, &mut part.decided_on);
        std::mem::swap(&mut self.writes, &mut part.writes);
    }

    /// Why the store could not answer a read of this run, if it could not.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Notes that the store did not answer: the run ends.
    fn store_failed(&mut self, e: impl std::fmt::Display) -> KvError {
        let text = e.to_string();
        self.unavailable = Some(text.clone());
        KvError::Unavailable(text)
    }

    /// Opens a granted bucket; its handle.
    pub fn open(&mut self, name: &str) -> Result<u32, KvError> {
        let Some(bucket) = self.policy.grant.bucket(name) else {
            self.policy.counts.refused(Refused::NotGranted);
            return Err(KvError::AccessDenied(format!(
                "bucket `{name}` is not granted to this plugin (its manifest's [capabilities] keyvalue must name it)"
            )));
        };
        self.open.push(bucket.clone());
        Ok((self.open.len() - 1) as u32)
    }

    fn bucket(&self, handle: u32) -> Result<&Bucket, KvError> {
        self.open
            .get(handle as usize)
            .ok_or_else(|| KvError::Other("no such bucket handle".into()))
    }

    fn check_key(&self, key: &str) -> Result<(), KvError> {
        let max = self.policy.limits.key_bytes as usize;
        if key.len() > max {
            self.policy.counts.refused(Refused::KeyBytes);
            return Err(KvError::Other(format!(
                "a key of {} bytes is over this plugin's limits.kv-key-bytes ({max})",
                key.len()
            )));
        }
        Ok(())
    }

    /// The committed value of `key`, read from the store the first time.
    async fn committed(&mut self, bucket: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let id = (bucket.to_string(), key.to_string());
        if let Some(seen) = self.seen.get(&id) {
            return Ok(seen.clone());
        }
        let stored = self.policy.stored(bucket);
        let store = self.policy.store()?;
        self.policy.counts.read(1);
        let read = store.kv_get(&stored, &[key.to_string()]).await;
        let mut values = read.map_err(|e| self.store_failed(e))?;
        let value = values.pop().flatten();
        self.seen.insert(id, value.clone());
        Ok(value)
    }

    /// The value as this run sees it: its own write, else the committed one.
    async fn current(&mut self, bucket: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let id = (bucket.to_string(), key.to_string());
        match self.writes.get(&id) {
            Some(Op::Set { value }) => Ok(Some(value.clone())),
            Some(Op::Delete) => Ok(None),
            Some(Op::Add { delta }) => {
                let delta = *delta;
                let base = self.committed(bucket, key).await?;
                let base = commit::counter(base.as_deref()).unwrap_or(0);
                Ok(Some((base + delta).to_string().into_bytes()))
            }
            None => self.committed(bucket, key).await,
        }
    }

    /// `get`: the value this run sees; the commit then checks the key still holds what was
    /// committed when it was read.
    pub async fn get(&mut self, handle: u32, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let bucket = self.bucket(handle)?.name.clone();
        self.check_key(key)?;
        let value = self.current(&bucket, key).await?;
        if !self.writes.contains_key(&(bucket.clone(), key.to_string())) {
            self.decided_on.insert((bucket, key.to_string()));
        }
        Ok(value)
    }

    /// Holds a write, within the run's bounds.
    fn write(&mut self, handle: u32, key: &str, op: Op) -> Result<(), KvError> {
        let bucket = self.bucket(handle)?.name.clone();
        self.check_key(key)?;
        if let Op::Set { value } = &op {
            let max = self.policy.limits.value_bytes;
            if value.len() as u64 > max {
                self.policy.counts.refused(Refused::ValueBytes);
                return Err(KvError::Other(format!(
                    "a value of {} bytes is over this plugin's limits.kv-value-bytes ({max})",
                    value.len()
                )));
            }
        }
        let id = (bucket, key.to_string());
        let max = self.policy.limits.keys_per_run as usize;
        if !self.writes.contains_key(&id) && self.writes.len() >= max {
            self.policy.counts.refused(Refused::KeysPerRun);
            return Err(KvError::Other(format!(
                "this run has written {max} keys, this plugin's limits.kv-keys-per-run"
            )));
        }
        self.writes.insert(id, op);
        Ok(())
    }

    /// `set`.
    pub fn set(&mut self, handle: u32, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.write(handle, key, Op::Set { value })
    }

    /// `delete`.
    pub fn delete(&mut self, handle: u32, key: &str) -> Result<(), KvError> {
        self.write(handle, key, Op::Delete)
    }

    /// `increment`: the counter as this run sees it after adding `delta` (the committed value
    /// when first read, plus this run's increments). The commit adds this run's increments to
    /// whatever is committed then, so concurrent runs of other keys all count; the returned
    /// value does not include theirs, and reading it does not make the commit check the key.
    pub async fn increment(&mut self, handle: u32, key: &str, delta: u64) -> Result<u64, KvError> {
        let bucket = self.bucket(handle)?.name.clone();
        self.check_key(key)?;
        let now = self.current(&bucket, key).await?;
        let Some(base) = commit::counter(now.as_deref()) else {
            self.policy.counts.refused(Refused::NotACounter);
            return Err(KvError::Other(format!(
                "`{key}` holds a value that is not a counter (decimal digits up to {})",
                commit::MAX_COUNTER
            )));
        };
        let sum = base
            .checked_add(delta)
            .filter(|sum| *sum <= commit::MAX_COUNTER)
            .ok_or_else(|| {
                self.policy.counts.refused(Refused::NotACounter);
                KvError::Other(format!(
                    "incrementing `{key}` would pass the largest counter, {}",
                    commit::MAX_COUNTER
                ))
            })?;
        let id = (bucket, key.to_string());
        let op = match self.writes.get(&id) {
            Some(Op::Add { delta: before }) => Op::Add {
                delta: before + delta,
            },
            Some(_) => Op::Set {
                value: sum.to_string().into_bytes(),
            },
            None => Op::Add { delta },
        };
        self.write(handle, key, op)?;
        Ok(sum)
    }

    /// `get-many`: each key's value, paired with it, or `None`.
    pub async fn get_many(
        &mut self,
        handle: u32,
        keys: Vec<String>,
    ) -> Result<Vec<Option<(String, Vec<u8>)>>, KvError> {
        let mut found = Vec::with_capacity(keys.len());
        for key in keys {
            let value = self.get(handle, &key).await?;
            found.push(value.map(|v| (key, v)));
        }
        Ok(found)
    }

    /// `exists`.
    pub async fn exists(&mut self, handle: u32, key: &str) -> Result<bool, KvError> {
        Ok(self.get(handle, key).await?.is_some())
    }

    /// `list-keys`: the keys this run sees, in order, a page at a time from `cursor`.
    pub async fn list(
        &mut self,
        handle: u32,
        cursor: Option<u64>,
    ) -> Result<(Vec<String>, Option<u64>), KvError> {
        let bucket = self.bucket(handle)?.name.clone();
        let stored = self.policy.stored(&bucket);
        let store = self.policy.store()?;
        let listed = store.kv_list(&stored, MAX_LISTED).await;
        let committed = listed.map_err(|e| self.store_failed(e))?;
        let mut keys: BTreeSet<String> = committed.into_iter().collect();
        for ((b, key), op) in &self.writes {
            if *b != bucket {
                continue;
            }
            match op {
                Op::Delete => keys.remove(key),
                _ => keys.insert(key.clone()),
            };
        }
        let from = usize::try_from(cursor.unwrap_or(0)).unwrap_or(usize::MAX);
        let page: Vec<String> = keys.into_iter().skip(from).take(PAGE + 1).collect();
        let more = page.len() > PAGE && from + PAGE < MAX_LISTED;
        let page = page.into_iter().take(PAGE).collect();
        Ok((page, more.then_some((from + PAGE) as u64)))
    }

    /// The run's commit, by bucket; the run is over.
    pub fn take(&mut self) -> StateCommit {
        self.taken = true;
        let mut out: BTreeMap<String, BucketCommit> = BTreeMap::new();
        for (bucket, key) in std::mem::take(&mut self.decided_on) {
            let seen = self.seen.get(&(bucket.clone(), key.clone())).cloned();
            let seen = seen.flatten().map(|v| commit::sha1_hex(&v));
            self.share(&mut out, &bucket).reads.push(Read { key, seen });
        }
        for ((bucket, key), op) in std::mem::take(&mut self.writes) {
            self.share(&mut out, &bucket).writes.push((key, op));
        }
        StateCommit {
            buckets: out.into_values().collect(),
        }
    }

    /// The commit's entry for bucket `name`, made on first use.
    fn share<'a>(
        &self,
        out: &'a mut BTreeMap<String, BucketCommit>,
        name: &str,
    ) -> &'a mut BucketCommit {
        out.entry(name.to_string()).or_insert_with(|| BucketCommit {
            bucket: self.policy.stored(name),
            ttl_ms: (self.policy.grant.bucket(name))
                .and_then(|b| b.ttl)
                .map_or(0, |t| t.as_millis() as u64),
            reads: Vec::new(),
            writes: Vec::new(),
        })
    }
}

impl Drop for RunState {
    fn drop(&mut self) {
        if !self.taken && !self.writes.is_empty() {
            // The run ended without an outcome: a trap, its deadline, its memory limit, or a
            // shutdown that cut it short.
            (self.policy.counts).dropped(Dropped::Failed, self.writes.len() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::kv::{KvCounts, KvGrant, KvLimits, StateAccess};
    use qhost_store::{
        Acquired, Completion, IdempotencyError, IdempotencyStore, LeaseRequest, StateReads,
    };
    use qhost_store_local::LocalStore;

    fn memory() -> anyhow::Result<Arc<dyn StateReads>> {
        Ok(Arc::new(LocalStore::open(None)?))
    }

    /// Runs' state served from an embedded store of the test's own, which it commits through.
    fn bound() -> (Arc<StateAccess>, Arc<LocalStore>) {
        let access = Arc::new(StateAccess::new(memory));
        let store = Arc::new(LocalStore::open(None).expect("an in-memory store"));
        access.bind(store.clone(), "qhost");
        (access, store)
    }

    fn policy(access: Arc<StateAccess>) -> Arc<KvPolicy> {
        let grant: Vec<crate::kv::grant::BucketEntry> =
            toml::from_str::<toml::Table>(r#"k = ["counts", { bucket = "short", ttl-secs = 60 }]"#)
                .ok()
                .and_then(|t| t.get("k").cloned())
                .and_then(|k| k.try_into().ok())
                .expect("a grant");
        Arc::new(KvPolicy {
            plugin: "p".into(),
            grant: KvGrant::parse(&grant).expect("a grant"),
            limits: KvLimits {
                value_bytes: 8,
                keys_per_run: 3,
                key_bytes: 4,
            },
            counts: Arc::new(KvCounts::default()),
            access,
        })
    }

    /// Commits `state` as the completion of a fresh lease on `key`.
    async fn commit(
        store: &LocalStore,
        key: &str,
        state: StateCommit,
    ) -> Result<(), IdempotencyError> {
        let request = LeaseRequest {
            key: key.into(),
            ttl: Duration::from_secs(10),
            window: Duration::from_secs(60),
        };
        let Ok(Acquired::Granted(lease)) = store.acquire(&[request]).await.unwrap().remove(0)
        else {
            panic!("no lease on {key}");
        };
        let done = Completion {
            lease,
            outbox: Vec::new(),
            result: None,
            window: Duration::from_secs(60),
            digest: None,
            state,
        };
        store.complete(&[done]).await.unwrap().remove(0).map(drop)
    }

    #[tokio::test]
    async fn a_run_sees_its_own_writes_over_the_committed_state() {
        let access = Arc::new(StateAccess::new(memory));
        let mut run = RunState::new(policy(Arc::clone(&access)));
        assert_eq!(
            run.open("other"),
            Err(KvError::AccessDenied(
                "bucket `other` is not granted to this plugin (its manifest's [capabilities] keyvalue must name it)".into()
            ))
        );
        let b = run.open("counts").unwrap();
        assert_eq!(run.increment(b, "n", 2).await, Ok(2));
        assert_eq!(run.increment(b, "n", 3).await, Ok(5));
        assert_eq!(run.get(b, "n").await, Ok(Some(b"5".to_vec())));
        run.set(b, "s", b"7".to_vec()).unwrap();
        assert_eq!(
            run.increment(b, "s", 1).await,
            Ok(8),
            "a set value counts on"
        );
        run.delete(b, "d").unwrap();
        assert_eq!(
            run.increment(b, "d", 4).await,
            Ok(4),
            "a deleted key counts from 0"
        );
        run.set(b, "t", b"x".to_vec()).unwrap_err(); // a fourth key: over keys-per-run
        assert!(run.set(b, "toolong", vec![]).is_err());
        assert!(run.set(b, "v", vec![0; 9]).is_err());
        assert_eq!(
            run.list(b, None).await,
            Ok((vec!["d".into(), "n".into(), "s".into()], None))
        );
        let state = run.take();
        assert_eq!(state.buckets.len(), 1);
        let writes = &state.buckets[0].writes;
        assert_eq!(
            writes,
            &vec![
                (
                    "d".to_string(),
                    Op::Set {
                        value: b"4".to_vec()
                    }
                ),
                ("n".to_string(), Op::Add { delta: 5 }),
                (
                    "s".to_string(),
                    Op::Set {
                        value: b"8".to_vec()
                    }
                ),
            ]
        );
        assert!(
            state.buckets[0].reads.is_empty(),
            "a key written first is not read"
        );
        let refused = run.policy.counts.refused_by();
        assert_eq!(
            refused,
            vec![
                ("key-bytes", 1),
                ("keys-per-run", 1),
                ("not-granted", 1),
                ("value-bytes", 1)
            ]
        );
    }

    #[tokio::test]
    async fn a_commit_adds_to_counters_and_refuses_a_changed_read() {
        let (access, store) = bound();
        let policy = policy(Arc::clone(&access));
        let mut first = RunState::new(Arc::clone(&policy));
        let mut second = RunState::new(Arc::clone(&policy));
        let (b1, b2) = (
            first.open("counts").unwrap(),
            second.open("counts").unwrap(),
        );
        // Both read "seen" absent and both count: the first commits, the second conflicts.
        assert_eq!(first.get(b1, "seen").await, Ok(None));
        assert_eq!(second.exists(b2, "seen").await, Ok(false));
        for run in [&mut first, &mut second] {
            run.set(0, "seen", b"1".to_vec()).unwrap();
            run.increment(0, "n", 1).await.unwrap();
        }
        let (s1, s2) = (first.take(), second.take());
        assert_eq!(
            s1.buckets[0].reads,
            vec![Read {
                key: "seen".into(),
                seen: None
            }]
        );
        commit(&store, "k1", s1).await.unwrap();
        assert_eq!(
            commit(&store, "k2", s2).await,
            Err(IdempotencyError::Conflict("k2".into()))
        );
        let bucket = policy.stored("counts");
        let values = store
            .kv_get(&bucket, &["n".into(), "seen".into()])
            .await
            .unwrap();
        assert_eq!(values, vec![Some(b"1".to_vec()), Some(b"1".to_vec())]);

        // Blind increments of runs that overlap all count.
        let mut runs: Vec<RunState> = (0..3).map(|_| RunState::new(Arc::clone(&policy))).collect();
        for run in &mut runs {
            let b = run.open("counts").unwrap();
            assert_eq!(
                run.increment(b, "n", 1).await,
                Ok(2),
                "each sees the committed 1, plus its own"
            );
        }
        for (i, mut run) in runs.into_iter().enumerate() {
            commit(&store, &format!("blind-{i}"), run.take())
                .await
                .unwrap();
        }
        let n = store.kv_get(&bucket, &["n".into()]).await.unwrap();
        assert_eq!(n, vec![Some(b"4".to_vec())]);
        assert_eq!(store.kv_list(&bucket, 10).await.unwrap(), ["n", "seen"]);
    }

    #[tokio::test]
    async fn dropping_a_run_that_wrote_counts_its_writes_dropped() {
        let policy = policy(Arc::new(StateAccess::new(memory)));
        let mut run = RunState::new(Arc::clone(&policy));
        let b = run.open("short").unwrap();
        run.set(b, "a", b"1".to_vec()).unwrap();
        run.set(b, "b", b"1".to_vec()).unwrap();
        drop(run);
        assert_eq!(policy.counts.dropped_by(), vec![("failed", 2)]);
        let mut run = RunState::new(Arc::clone(&policy));
        let b = run.open("short").unwrap();
        run.set(b, "a", b"1".to_vec()).unwrap();
        let state = run.take();
        assert_eq!(
            state.buckets[0].ttl_ms, 60_000,
            "the grant's ttl goes with the writes"
        );
        drop(run);
        assert_eq!(
            policy.counts.dropped_by(),
            vec![("failed", 2)],
            "taken writes are not dropped"
        );
    }
}
