//! The one engine that runs a message outside a host: `qhost invoke`, `qhost replay` and
//! `qhost test` all run through [`Bench::run`].
//!
//! A bench is a plugin file loaded as a host loads it (manifest, limits, deadline, memory cap,
//! compiled-code cache), optionally into a [`World`] (canned HTTP answers, a virtual clock,
//! its logs kept). A message runs through the host's own pipeline (`pipeline::alone`): its
//! queue's format reads it into runs, each is routed and keyed, admitted by the flow gate,
//! leased, run and committed (the outbox, the result and the state writes with the completed
//! record) or put back, retried or dead-lettered, as on a host; how each run ended is read from
//! the pipeline's tap. With a [`Ledger`] (an in-memory embedded store, for `qhost test`) what
//! the runs commit is kept: a completed key is finished as a duplicate without running, and
//! the next message reads the state the last one committed. Without one (invoke, replay) each
//! message runs on an empty store, so the same message can be tried again and again.

use std::sync::Arc;

use anyhow::Context as _;

use crate::config::{Config, QueueConfig};
use crate::idempotency::local::LocalStore;
use crate::message::Received;
use crate::pipeline::alone::Alone;
use crate::pipeline::tap::RunEnd;
use crate::plugin::Plugin;
use crate::plugin::loader::LoadAs;
use crate::plugin::manifest::Manifest;
use crate::runtime::Runtime;
use crate::runtime::world::{Met, World};

pub(crate) use crate::pipeline::tap::Ended;

/// The namespace a ledger's keys and state live under (a configuration's default).
pub(crate) const NAMESPACE: &str = "qhost";

/// What one run of a message did: how it ended in the pipeline, and what it met in the world
/// (its HTTP requests and log lines).
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) end: RunEnd,
    pub(crate) met: Met,
}

impl From<RunEnd> for Ran {
    fn from(end: RunEnd) -> Ran {
        Ran {
            end,
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

    /// Runs `msg` through a pipeline consuming `queue` (or, with none, a queue of qhost's own
    /// format named as `msg`'s, for this plugin): how each of its runs ended, in order.
    /// What they commit is kept in `ledger`, or, without one, on an empty store.
    pub(crate) async fn run(
        &self,
        msg: &Received,
        queue: Option<&QueueConfig>,
        ledger: Option<&Arc<Ledger>>,
    ) -> Result<Vec<Ran>, String> {
        let plain;
        let queue = match queue {
            Some(queue) => queue,
            None => {
                plain = plain_queue(&msg.queue, &self.plugin.name)?;
                &plain
            }
        };
        let store = match ledger {
            Some(ledger) => Arc::clone(ledger),
            None => Arc::new(Ledger::open(None).map_err(|e| format!("an in-memory store: {e:#}"))?),
        };
        let alone = (Alone::new(queue, self.plugin.clone(), store))
            .map_err(|e| format!("the pipeline: {e:#}"))?;
        let ends = (alone.deliver(msg).await).map_err(|e| format!("{e:#}"))?;
        let mut ran: Vec<Ran> = ends.into_iter().map(Ran::from).collect();
        if let (Some(world), Some(first)) = (&self.world, ran.first_mut()) {
            first.met = world.take();
        }
        Ok(ran)
    }

    /// Runs `msgs` through a batch plugin as a host gathers them into calls (each read by
    /// qhost's own format on a queue named as the first's, keyed by the manifest, on an empty
    /// store): each message's run, in order. A message with no key is left out of the calls,
    /// as a host dead-letters it unrun.
    pub(crate) async fn run_batch(&self, msgs: &[Received]) -> Result<Vec<Ran>, String> {
        if !self.plugin.is_batch() {
            return Err(format!(
                "{} exports `handle`, one message per call: --batch is for batch handlers (`handle-batch`)",
                self.plugin.name
            ));
        }
        let Some(first) = msgs.first() else {
            return Ok(Vec::new());
        };
        let queue = plain_queue(&first.queue, &self.plugin.name)?;
        let store = Ledger::open(None).map_err(|e| format!("an in-memory store: {e:#}"))?;
        let alone = (Alone::new(&queue, self.plugin.clone(), Arc::new(store)))
            .map_err(|e| format!("the pipeline: {e:#}"))?;
        let ends = (alone.deliver_all(msgs).await).map_err(|e| format!("{e:#}"))?;
        Ok(ends.into_iter().flatten().map(Ran::from).collect())
    }
}

/// A queue of qhost's own format named `name`, consumed by `plugin`.
fn plain_queue(name: &str, plugin: &str) -> Result<QueueConfig, String> {
    let mut table = toml::Table::new();
    table.insert("name".into(), toml::Value::String(name.into()));
    table.insert("plugin".into(), toml::Value::String(plugin.into()));
    let mut file = toml::Table::new();
    file.insert("queue".into(), toml::Value::Array(vec![table.into()]));
    let mut config =
        Config::parse(&file.to_string()).map_err(|e| format!("queue {name}: {e:#}"))?;
    Ok(config.queues.swap_remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::{HandlerMessage, Invocation, Outcome};
    use crate::message::Attribute;

    /// A bench of a native plugin `p` with `manifest` that acks every message.
    fn acking(manifest: &str) -> Bench {
        let manifest = Manifest::parse(manifest).expect("a manifest");
        let handler = |_: HandlerMessage| Ok(Invocation::new(Outcome::Ack));
        let plugin = Plugin::new("p", "v1", manifest, Arc::new(handler));
        Bench {
            plugin,
            world: None,
        }
    }

    fn job(id: &str) -> Received {
        Received {
            id: id.into(),
            handle: String::new(),
            queue: "jobs".into(),
            body: b"{}".to_vec(),
            attributes: vec![Attribute::string("job", id)],
            delivery_count: 1,
            sent_at_ms: 0,
            group_id: None,
            malformed: None,
        }
    }

    #[tokio::test]
    async fn a_run_over_its_plugin_s_rate_is_put_back_as_on_a_host() {
        let bench = acking("[idempotency]\nkey = \"attribute:job\"\n[limits]\nrate = \"1/min\"\n");
        let ledger = Arc::new(Ledger::open(None).expect("a ledger"));
        let first = bench
            .run(&job("a"), None, Some(&ledger))
            .await
            .expect("ran");
        assert_eq!(first[0].end.ended, Ended::Ack, "{first:?}");
        assert_eq!(first[0].end.key.as_deref(), Some("a"));
        // The pipeline's rate, which a second engine beside it never took: the next run's
        // slot is a minute off, so the message goes back unrun.
        let second = bench
            .run(&job("b"), None, Some(&ledger))
            .await
            .expect("ran");
        assert_eq!(second.len(), 1, "{second:?}");
        assert_eq!(second[0].end.ended, Ended::PutBack("rate limited".into()));
    }

    #[tokio::test]
    async fn a_completed_key_is_a_duplicate_and_a_message_without_one_is_dead_lettered() {
        let bench = acking("[idempotency]\nkey = \"attribute:job\"\n");
        let ledger = Arc::new(Ledger::open(None).expect("a ledger"));
        let ran = bench
            .run(&job("a"), None, Some(&ledger))
            .await
            .expect("ran");
        assert_eq!(ran[0].end.ended, Ended::Ack);
        let again = bench
            .run(&job("a"), None, Some(&ledger))
            .await
            .expect("ran");
        assert_eq!(again[0].end.ended, Ended::Duplicate, "{again:?}");
        let mut keyless = job("c");
        keyless.attributes.clear();
        let refused = bench.run(&keyless, None, None).await.expect("ran");
        assert!(
            matches!(&refused[0].end.ended, Ended::NoKey(why) if why.contains("job")),
            "{refused:?}"
        );
        // Without a ledger nothing is remembered: the same message runs again.
        let fresh = bench.run(&job("a"), None, None).await.expect("ran");
        assert_eq!(fresh[0].end.ended, Ended::Ack);
    }
}
