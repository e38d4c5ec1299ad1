//! The consumer of a schedule's messages, when it is qhost on this configuration: where its run
//! of a tick is leased. That is what `overlap` reads (is the previous tick still running?) and
//! what `qhost check` tells a user (which plugin a tick reaches, under which key, or why it
//! would be dead-lettered).
//!
//! The tick's message is read exactly as the queue's consumer would read it, through the
//! format step and the plugin's manifest (`format::inspect`), so a Celery task's id, a route
//! and a key taken from an attribute all come out as the consumer derives them.

use crate::config::Config;
use crate::config::schedule::ScheduleConfig;
use crate::format::inspect::inspect;
use crate::idempotency::key::scoped;
use crate::message::Received;

use super::tick::Tick;

/// Where a tick's message runs on this configuration's consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Consumer {
    /// The target queue is not consumed by this configuration: nothing to look at.
    Elsewhere,
    /// It runs on `plugin` under `key` (the stored key is `stored`).
    Runs {
        /// The plugin.
        plugin: String,
        /// Its idempotency key.
        key: String,
        /// The key as stored.
        stored: String,
    },
    /// The consumer would not run it: why.
    Refuses(String),
}

/// Where `tick` of `schedule` runs.
pub(crate) fn of(config: &Config, schedule: &ScheduleConfig, tick: &Tick) -> Consumer {
    let sent = tick.message(schedule);
    let Some(queue) = config.queue(&sent.queue) else {
        return Consumer::Elsewhere;
    };
    let received = Received {
        id: format!("schedule-{}", tick.key()),
        handle: String::new(),
        queue: sent.queue.clone(),
        body: sent.body,
        attributes: sent.attributes,
        delivery_count: 1,
        sent_at_ms: tick.time().as_millisecond().max(0) as u64,
        group_id: sent.group_id,
        malformed: None,
    };
    let runs = match inspect(config, &received, Some(queue), None) {
        Ok(inspected) => inspected.runs,
        Err(why) => return Consumer::Refuses(why),
    };
    let Some(run) = runs.into_iter().next() else {
        return Consumer::Refuses("it holds nothing to run".into());
    };
    match (run.plugin, run.key) {
        (Some(Ok(plugin)), Ok(key)) => Consumer::Runs {
            stored: scoped(&config.namespace, &plugin, &key),
            plugin,
            key,
        },
        (Some(Err(why)), _) | (_, Err(why)) => Consumer::Refuses(why),
        (None, _) => Consumer::Elsewhere,
    }
}
