//! Running a test file's cases: each case in a fresh world (an empty ledger with the case's
//! state written in, its canned answers, its clock), each of its steps through the one engine
//! (`oneshot::bench`), and what came of each compared with what it expects.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::expect::Got;
use super::file::{Case, Step, TestFile, World as CaseWorld};
use super::{CaseReport, FileReport};
use crate::config::{Config, QueueConfig};
use crate::handler::Failure;
use crate::idempotency::commit::{BucketCommit, Op, stored_bucket};
use crate::oneshot::bench::{Bench, Ended, Ledger, NAMESPACE, Ran};
use crate::plugin::loader::LoadAs;
use crate::plugin::manifest::{ConfigValue, Manifest};
use crate::runtime::Runtime;
use crate::runtime::world::{Answers, World};

/// What a file's cases share: the engine, the ledger their state lives in, and the world.
pub(super) struct Runner {
    runtime: Runtime,
    ledger: Arc<Ledger>,
    world: Arc<World>,
}

impl Runner {
    /// A runner on `config`'s engine settings, its state in an in-memory ledger.
    pub(super) fn new(config: &Config) -> anyhow::Result<Runner> {
        let runtime = crate::host::runtime_for(config)?;
        let ledger = Arc::new(Ledger::open(None)?);
        runtime.state().bind(ledger.clone(), NAMESPACE);
        Ok(Runner {
            runtime,
            ledger,
            world: World::test(),
        })
    }

    /// Says (at `-v`) how the run's plugins were obtained, as a host's start does: compiled,
    /// or taken from the compiled-code cache another command may have filled.
    pub(super) fn log_compiled(&self) {
        let counters = self.runtime.counters();
        tracing::info!(
            compiled = counters.compiled(),
            from_cache = counters.cache_hits(),
            "plugins ready"
        );
    }

    /// Loads `plugin` as its manifest has it (for recording).
    pub(super) async fn load_plain(&self, plugin: &LoadAs) -> Result<Bench, String> {
        self.load(plugin, &CaseWorld::default()).await
    }

    /// Runs `msg` in a fresh world at `now` whose HTTP answers are all an empty `200 OK`
    /// (for recording what a plugin does today).
    pub(super) async fn record(
        &self,
        bench: &Bench,
        msg: &crate::message::Received,
        now: std::time::SystemTime,
    ) -> Result<Vec<Ran>, String> {
        self.ledger.forget_all().await.map_err(|e| e.to_string())?;
        self.world.begin(Answers::Empty, Some(now));
        bench.run(msg, None, Some(&self.ledger)).await
    }

    /// Runs every case of `file`.
    pub(super) async fn run_file(&self, file: &TestFile) -> FileReport {
        let started = Instant::now();
        let mut benches: BTreeMap<BTreeMap<String, String>, Bench> = BTreeMap::new();
        let mut cases = Vec::new();
        for case in &file.cases {
            if !benches.contains_key(&case.world.config) {
                match self.load(&file.plugin, &case.world).await {
                    Ok(bench) => {
                        benches.insert(case.world.config.clone(), bench);
                    }
                    Err(why) => {
                        return FileReport {
                            path: file.path.clone(),
                            plugin: file.plugin.path.clone(),
                            broken: Some(why),
                            cases,
                            took: started.elapsed(),
                        };
                    }
                }
            }
            let bench = &benches[&case.world.config];
            cases.push(self.run_case(bench, &file.queue, case).await);
        }
        FileReport {
            path: file.path.clone(),
            plugin: file.plugin.path.clone(),
            broken: None,
            cases,
            took: started.elapsed(),
        }
    }

    /// Loads the plugin with the case's `[config]` values and secrets over its manifest's.
    async fn load(&self, plugin: &LoadAs, world: &CaseWorld) -> Result<Bench, String> {
        let values = world.config.clone();
        let unresolved = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&unresolved);
        let edit = move |manifest: &mut Manifest| {
            for (key, value) in values {
                manifest.config.insert(key, ConfigValue::Text(value));
            }
            let mut from_host = Vec::new();
            for (key, value) in &manifest.config {
                match value {
                    ConfigValue::Env(name) => from_host.push(format!("config.{key} (env {name})")),
                    ConfigValue::File(path) => {
                        from_host.push(format!("config.{key} (file {})", path.display()));
                    }
                    ConfigValue::Text(_) => {}
                }
            }
            *kept.lock().unwrap_or_else(|e| e.into_inner()) = from_host;
        };
        let loaded = Bench::load(
            &self.runtime,
            plugin.clone(),
            edit,
            Some(self.world.clone()),
        )
        .await;
        let from_host = std::mem::take(&mut *unresolved.lock().unwrap_or_else(|e| e.into_inner()));
        if !from_host.is_empty() {
            return Err(format!(
                "the manifest reads {} from the host; a test reads nothing from the host: give \
                 each in [world] secrets",
                from_host.join(", ")
            ));
        }
        loaded.map_err(|e| format!("the plugin does not load: {e:#}"))
    }

    async fn run_case(&self, bench: &Bench, queue: &QueueConfig, case: &Case) -> CaseReport {
        let started = Instant::now();
        let mut differences = Vec::new();
        if let Err(e) = self.set_world(bench, case).await {
            differences.push(format!("the test's store: {e}"));
        }
        let several = case.steps.len() > 1;
        for step in &case.steps {
            let label = |d: String| match several {
                true => format!("{}: {d}", step.name),
                false => d,
            };
            let diffs = self.run_step(bench, queue, case, step).await;
            differences.extend(diffs.into_iter().map(label));
        }
        CaseReport {
            name: case.name.clone(),
            differences,
            took: started.elapsed(),
        }
    }

    /// An empty ledger with the case's state written in.
    async fn set_world(&self, bench: &Bench, case: &Case) -> anyhow::Result<()> {
        self.ledger.forget_all().await?;
        let plugin = &bench.plugin().name;
        let buckets = (case.world.state.iter())
            .map(|(bucket, keys)| BucketCommit {
                bucket: stored_bucket(NAMESPACE, plugin, bucket),
                ttl_ms: 0,
                reads: Vec::new(),
                writes: (keys.iter())
                    .map(|(k, v)| (k.clone(), Op::Set { value: v.clone() }))
                    .collect(),
            })
            .collect();
        self.ledger.seed(buckets).await?;
        Ok(())
    }

    /// Runs a step (twice, when it says so) and says how it differed from what it expects.
    async fn run_step(
        &self,
        bench: &Bench,
        queue: &QueueConfig,
        case: &Case,
        step: &Step,
    ) -> Vec<String> {
        let got = (self.deliver(bench, queue, case, step.now, &step.message)).await;
        let mut diffs = step.expect.compare(&got);
        if step.twice {
            // Delivered again at once: the clock goes on from the first delivery.
            let mut again = step.message.clone();
            again.delivery_count += 1;
            let second = self.deliver(bench, queue, case, None, &again).await;
            diffs.extend(duplicate_differences(&second));
        }
        diffs
    }

    async fn deliver(
        &self,
        bench: &Bench,
        queue: &QueueConfig,
        case: &Case,
        now: Option<std::time::SystemTime>,
        msg: &crate::message::Received,
    ) -> Got {
        self.world
            .begin(Answers::Canned(case.world.http.clone()), now);
        match bench.run(msg, Some(queue), Some(&self.ledger)).await {
            Ok(runs) => got(runs),
            Err(why) => Got {
                outcome: "dead-letter".into(),
                reason: Some(why),
                ..Got::default()
            },
        }
    }
}

/// How a second delivery differs from a duplicate finished unrun.
fn duplicate_differences(second: &Got) -> Vec<String> {
    let mut diffs = Vec::new();
    if second.outcome != "duplicate" {
        let how = match &second.reason {
            Some(reason) => format!("{}: {reason}", second.outcome),
            None => second.outcome.clone(),
        };
        diffs.push(format!(
            "second delivery: expected a duplicate finished unrun, got {how} (it ran again)"
        ));
    }
    if !second.outbox.is_empty() {
        diffs.push(format!(
            "second delivery: sent {} message(s) again",
            second.outbox.len()
        ));
    }
    if !second.http.is_empty() {
        diffs.push(format!(
            "second delivery: made {} HTTP request(s) again",
            second.http.len()
        ));
    }
    if !second.state.is_empty() {
        diffs.push(format!(
            "second delivery: wrote {} state key(s) again",
            second.state.len()
        ));
    }
    diffs
}

/// What a message's runs came to, together: the first outcome other than an ack (or ack),
/// and every run's effects in order.
fn got(runs: Vec<Ran>) -> Got {
    let mut got = Got {
        outcome: "ack".into(),
        ..Got::default()
    };
    let mut decided = false;
    for ran in runs {
        let (outcome, retry, reason) = outcome(&ran);
        if !decided && (outcome != "ack") {
            got.outcome = outcome.to_string();
            got.retry_secs = retry;
            got.reason = reason;
            decided = true;
        }
        got.outbox.extend(ran.end.outbox);
        got.state.extend(Got::writes_of(&ran.end.state));
        got.http.extend(ran.met.http);
        got.logs.extend(ran.met.logs);
        if ran.end.result.is_some() {
            got.result = ran.end.result;
        }
    }
    got
}

/// A run's outcome as a test names it, with its retry delay and reason.
fn outcome(ran: &Ran) -> (&'static str, Option<u32>, Option<String>) {
    match &ran.end.ended {
        Ended::Ack => ("ack", None, None),
        Ended::Duplicate => ("duplicate", None, None),
        Ended::Retry(secs) => ("retry", Some(*secs), None),
        Ended::Reject(why) => ("reject", None, Some(why.clone())),
        Ended::NoKey(why) | Ended::Refused(why) => ("dead-letter", None, Some(why.clone())),
        Ended::NotDue(eta) => ("put-back", None, Some(format!("not due until {eta}"))),
        Ended::PutBack(why) => ("put-back", None, Some(why.clone())),
        Ended::Expired(at) => ("expired", None, Some(format!("expired at {at}"))),
        Ended::Failed(why) => {
            let kind = match &ran.end.failure {
                Some(Failure::Trap(_) | Failure::Instantiate(_)) => "trap",
                Some(Failure::Timeout(_)) => "timeout",
                Some(Failure::MemoryLimit(_)) => "memory-limit",
                Some(Failure::StateUnavailable(_)) | None => "error",
            };
            (kind, None, Some(why.clone()))
        }
    }
}
