//! The one engine that runs a message outside a host: `qhost invoke`, `qhost replay` and
//! `qhost test` all run through [`Bench::run`].
//!
//! A bench is a plugin file loaded as a host loads it (manifest, limits, deadline, memory cap,
//! compiled-code cache), optionally into a [`World`] (canned HTTP answers, a virtual clock,
//! its logs kept). A message runs as the host runs it: its queue's format reads it into runs,
//! each run is keyed by the plugin's manifest, and the handler is given the run's view under
//! that key. With a [`Ledger`] (an in-memory embedded store, for `qhost test`) each run also
//! takes its lease, a completed key is finished as a duplicate without running, and an ack
//! commits the outbox, the result and the state writes with the completed record, so the next
//! message reads the state the last one committed. Without one (invoke, replay) nothing is
//! leased or remembered, and the same message can be tried again and again.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::config::Config;
use crate::format::{Admit, Format, Run};
use crate::handler::{Failure, HandlerMessage, Invocation, Outcome};
use crate::idempotency::key::scoped;
use crate::idempotency::local::LocalStore;
use crate::idempotency::{Acquired, Completion, IdempotencyStore, Lease, LeaseRequest, Released};
use crate::kv::StateCommit;
use crate::message::{Outgoing, Received};
use crate::plugin::Plugin;
use crate::plugin::loader::LoadAs;
use crate::plugin::manifest::Manifest;
use crate::runtime::engine::Runtime;
use crate::runtime::world::{Met, World};

/// The namespace a ledger's keys and state live under.
pub(crate) const NAMESPACE: &str = "qhost";

/// How long a ledger's lease lasts: runs are one at a time, so it only has to outlast one.
const LEASE: Duration = Duration::from_secs(3600);

/// How one run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Its manifest derives no key from the message: a host would dead-letter it unrun.
    NoKey(String),
    /// The message is not what its queue's format says, or the format refuses the run: a host
    /// would dead-letter it unrun.
    Refused(String),
    /// Not due yet (a Celery task's eta): a host would put it back, unrun.
    NotDue(String),
    /// Past its expiry: a host would ack it unrun.
    Expired(String),
    /// Its key was completed already: a host finishes it as a duplicate, unrun.
    Duplicate,
    /// It acked.
    Ack,
    /// It asked for a retry after at least this many seconds.
    Retry(u32),
    /// It rejected, with this reason.
    Reject(String),
    /// It trapped, ran out of time or memory, or could not be instantiated.
    Failed(String),
}

impl Ended {
    /// The kind, which is what comparing two outcomes compares.
    pub fn kind(&self) -> &'static str {
        match self {
            Ended::NoKey(_) => "no key",
            Ended::Refused(_) => "refused",
            Ended::NotDue(_) => "not due",
            Ended::Expired(_) => "expired",
            Ended::Duplicate => "duplicate",
            Ended::Ack => "ack",
            Ended::Retry(_) => "retry",
            Ended::Reject(_) => "reject",
            Ended::Failed(_) => "failed",
        }
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Ack | Ended::Duplicate => f.write_str(self.kind()),
            Ended::Retry(secs) => write!(f, "retry {secs}s"),
            Ended::NoKey(why)
            | Ended::Refused(why)
            | Ended::NotDue(why)
            | Ended::Expired(why)
            | Ended::Reject(why)
            | Ended::Failed(why) => write!(f, "{}: {why}", self.kind()),
        }
    }
}

/// What one run of a message did.
#[derive(Debug)]
pub(crate) struct Ran {
    /// The key it ran under (none when it derived none, or did not get as far).
    pub(crate) key: Option<String>,
    /// How it ended.
    pub(crate) ended: Ended,
    /// How it failed, when it did.
    pub(crate) failure: Option<Failure>,
    /// What it would send: its outbox (with the format's own messages) when it acked; for a
    /// duplicate, what the store still held unsent.
    pub(crate) outbox: Vec<Outgoing>,
    /// Its result value, when it acked with one.
    pub(crate) result: Option<String>,
    /// The state it would commit, when it acked.
    pub(crate) state: StateCommit,
    /// What it met in the world: its HTTP requests and log lines.
    pub(crate) met: Met,
}

impl Ran {
    fn ended(key: Option<String>, ended: Ended) -> Ran {
        Ran {
            key,
            ended,
            failure: None,
            outbox: Vec::new(),
            result: None,
            state: StateCommit::default(),
            met: Met::default(),
        }
    }
}

/// A plugin file loaded to run messages outside a host.
#[derive(Debug)]
pub(crate) struct Bench {
    plugin: Plugin,
    world: Option<Arc<World>>,
}

/// An in-memory embedded store that keeps what runs commit: leases, completed keys, state.
pub(crate) type Ledger = LocalStore;

impl Bench {
    /// Loads `what` on `runtime` (compiling, or from the cache), its manifest changed by `edit`,
    /// into `world` when given.
    pub(crate) async fn load(
        runtime: &Runtime,
        what: LoadAs,
        edit: impl FnOnce(&mut Manifest) + Send + 'static,
        world: Option<Arc<World>>,
    ) -> anyhow::Result<Bench> {
        let runtime = runtime.clone();
        let kept = world.clone();
        let plugin = tokio::task::spawn_blocking(move || {
            crate::plugin::loader::load_as(&runtime, what, edit, kept)
        })
        .await
        .context("the loader stopped")?
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        Ok(Bench { plugin, world })
    }

    /// Loads the plugin at `what` with `config`'s engine settings.
    pub(crate) async fn load_for(
        config: &Config,
        what: LoadAs,
        edit: impl FnOnce(&mut Manifest) + Send + 'static,
        world: Option<Arc<World>>,
    ) -> anyhow::Result<Bench> {
        let runtime = crate::host::runtime_for(config)?;
        Bench::load(&runtime, what, edit, world).await
    }

    /// The plugin.
    pub(crate) fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// Runs `msg` as `format` reads it, each of its runs in order; `Err` when the format
    /// refuses the message whole (a host dead-letters it).
    pub(crate) async fn run(
        &self,
        msg: &Received,
        format: &dyn Format,
        ledger: Option<&Arc<Ledger>>,
    ) -> Result<Vec<Ran>, String> {
        let runs = (format.read(msg, &msg.body, &msg.attributes)).map_err(|e| e.to_string())?;
        let mut ran = Vec::with_capacity(runs.len());
        for run in runs {
            let mut one = self.run_one(msg, run, ledger).await;
            if let Some(world) = &self.world {
                one.met = world.take();
            }
            ran.push(one);
        }
        Ok(ran)
    }

    /// Runs `msgs` through a batch plugin in one call, as a host would gather them (each read
    /// by qhost's own format, keyed by the manifest; nothing leased): each message's run, in
    /// order. A message with no key is left out of the call, as a host dead-letters it unrun.
    pub(crate) async fn run_batch(&self, msgs: &[Received]) -> Result<Vec<Ran>, String> {
        if !self.plugin.is_batch() {
            return Err(format!(
                "{} exports `handle`, one message per call: --batch is for batch handlers (`handle-batch`)",
                self.plugin.name
            ));
        }
        let format = crate::format::plain();
        let mut ran: Vec<Option<Ran>> = Vec::with_capacity(msgs.len());
        let (mut called, mut inputs) = (Vec::new(), Vec::new());
        for msg in msgs {
            let runs = (format.read(msg, &msg.body, &msg.attributes)).map_err(|e| e.to_string())?;
            let run = runs
                .into_iter()
                .next()
                .ok_or("qhost's format read no run")?;
            match run.key_of(msg, Some(&self.plugin.manifest)) {
                Ok(key) => {
                    inputs.push(Self::input(msg, &run, &key, 1));
                    called.push((ran.len(), run, key));
                    ran.push(None);
                }
                Err(why) => ran.push(Some(Ran::ended(None, Ended::NoKey(why)))),
            }
        }
        let answers = match self.plugin.invoke_batch(inputs).await {
            Ok(invocations) => invocations.into_iter().map(Ok).collect(),
            Err(failure) => vec![Err(failure); called.len()],
        };
        for ((at, run, key), answer) in called.into_iter().zip(answers) {
            ran[at] = Some(self.ended(&run, &key, answer));
        }
        Ok(ran.into_iter().flatten().collect())
    }

    /// What the handler is given for `run` of `msg` under `key` and `fencing_token`.
    fn input(msg: &Received, run: &Run, key: &str, fencing_token: u64) -> HandlerMessage {
        let (body, attributes) = run.view_of(msg);
        HandlerMessage {
            id: msg.id.clone(),
            idempotency_key: key.to_string(),
            fencing_token,
            queue: msg.queue.clone(),
            body,
            attributes,
            receive_count: msg.delivery_count,
            sent_at_ms: msg.sent_at_ms,
            group_id: msg.group_id.clone(),
            time_limit: run.time_limit,
        }
    }

    async fn run_one(&self, msg: &Received, run: Run, ledger: Option<&Arc<Ledger>>) -> Ran {
        let plugin = &self.plugin;
        match &run.admit {
            Admit::Now => {}
            Admit::NotDue { eta, .. } => return Ran::ended(None, Ended::NotDue(eta.clone())),
            Admit::Expired { expires } => {
                return Ran::ended(None, Ended::Expired(expires.clone()));
            }
            Admit::Refused(why) => return Ran::ended(None, Ended::Refused(why.clone())),
        }
        if let Some(effects) = &run.effects
            && let Err(why) = effects.check(plugin)
        {
            return Ran::ended(None, Ended::Refused(why.to_string()));
        }
        let key = match run.key_of(msg, Some(&plugin.manifest)) {
            Ok(key) => key,
            Err(why) => return Ran::ended(None, Ended::NoKey(why)),
        };
        let lease = match ledger {
            None => None,
            Some(ledger) => match self.lease(ledger, &key).await {
                Ok(Leased::Granted(lease)) => Some(lease),
                Ok(Leased::Completed(pending)) => {
                    let mut ran = Ran::ended(Some(key), Ended::Duplicate);
                    ran.outbox = pending;
                    return ran;
                }
                Err(why) => return Ran::ended(Some(key), Ended::Failed(why)),
            },
        };
        let token = lease.as_ref().map_or(1, |l| l.fencing_token);
        let answer = plugin.invoke(Self::input(msg, &run, &key, token)).await;
        let mut ran = self.ended(&run, &key, answer);
        if let (Some(ledger), Some(lease)) = (ledger, lease)
            && let Err(why) = self.settle(ledger, lease, &mut ran).await
        {
            ran.ended = Ended::Failed(why);
        }
        ran
    }

    /// What the handler's answer comes to, the format's effects applied to an ack.
    fn ended(&self, run: &Run, key: &str, answer: Result<Invocation, Failure>) -> Ran {
        let mut ran = Ran::ended(Some(key.to_string()), Ended::Ack);
        match answer {
            Ok(invocation) => match invocation.outcome {
                Outcome::Ack => {
                    // The format may add to the outbox (a Celery task's callbacks); the result
                    // value reported is the handler's own, whatever the format records of it.
                    let name = &self.plugin.name;
                    let result = invocation.result;
                    ran.outbox = match &run.effects {
                        Some(effects) => {
                            (effects.on_ack(invocation.outbox, name, key, result.clone())).0
                        }
                        None => invocation.outbox,
                    };
                    ran.result = result;
                    ran.state = invocation.state;
                }
                Outcome::Retry(secs) => ran.ended = Ended::Retry(secs),
                Outcome::Reject(reason) => ran.ended = Ended::Reject(reason),
            },
            Err(failure) => {
                ran.ended = Ended::Failed(failure.to_string());
                ran.failure = Some(failure);
            }
        }
        ran
    }

    async fn lease(&self, ledger: &Ledger, key: &str) -> Result<Leased, String> {
        let request = LeaseRequest {
            key: scoped(NAMESPACE, &self.plugin.name, key),
            ttl: LEASE,
            window: self.plugin.manifest.dedup_window(),
        };
        let acquired = (ledger.acquire(&[request]).await)
            .and_then(|mut answers| answers.remove(0))
            .map_err(|e| format!("the test's store: {e}"))?;
        match acquired {
            Acquired::Granted(lease) => Ok(Leased::Granted(lease)),
            Acquired::Completed { pending_outbox, .. } => Ok(Leased::Completed(pending_outbox)),
            Acquired::Busy { .. } => Err(format!("key {key} is leased by another run")),
        }
    }

    /// Commits an ack with its outbox, result and state (marking the outbox sent, as a host
    /// does once it has sent it); gives the lease back otherwise.
    async fn settle(&self, ledger: &Ledger, lease: Lease, ran: &mut Ran) -> Result<(), String> {
        let failed = |e: crate::idempotency::IdempotencyError| format!("the test's store: {e}");
        if ran.ended != Ended::Ack {
            let why = match ran.ended {
                Ended::Reject(_) => Released::GaveUp,
                _ => Released::Failed,
            };
            return ledger.release(&lease, why).await.map_err(failed);
        }
        let key = lease.key.clone();
        let completion = Completion {
            window: lease.window,
            lease,
            outbox: ran.outbox.clone(),
            result: ran.result.clone(),
            digest: None,
            state: ran.state.clone(),
        };
        let mut done = ledger.complete(&[completion]).await.map_err(failed)?;
        done.remove(0).map_err(failed)?;
        ledger.outbox_sent(&key).await.map_err(failed)
    }
}

/// What a ledger's lease found.
enum Leased {
    Granted(Lease),
    /// Completed already, with what it still had to send.
    Completed(Vec<Outgoing>),
}
