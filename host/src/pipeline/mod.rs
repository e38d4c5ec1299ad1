//! The data path: receive, route, lease, run, and end each delivery one way.
//!
//! ```text
//! receive (per queue) --batch--> read (format) --> route + key --> acquire leases (one call per batch)
//!    completed before -> finish without running (sending any outbox left unsent)
//!    leased elsewhere -> put back until the lease lapses
//!    granted          -> run: fetch an offloaded payload (bad pointer: dead-letter; store
//!                        down: back off), invoke (async, under the plugin's deadline),
//!                        heartbeat extending lease + visibility
//!                        ack:    commit outbox + completed record, send outbox, delete
//!                        retry:  release lease, delay by backoff (dead-letter at max attempts)
//!                        reject: dead-letter with the reason, then delete
//! ```
//!
//! Every received message becomes one [`delivery::Delivery`], which owns it through its life
//! and ends through exactly one consuming method. A semaphore caps messages in flight across
//! queues, and a poller asks the queue only for as many messages as it has permits, so nothing
//! waits in a buffer while its visibility runs out.
//!
//! | module       | stage                                                               |
//! |--------------|---------------------------------------------------------------------|
//! | `receive`    | the per-queue poll loop and its in-flight permits                   |
//! | `priority`   | priorities between queues: a lower one leaves slots to a busy higher |
//! | `batch`      | a received batch: FIFO groups, one lease call, a task per message   |
//! | `route`      | a message read by its queue's format; plugin and key for each run   |
//! | `gate`       | flow control: a key's fair share, its lease and flow slot in one call|
//! | `part`       | one run of a message of several: where it reports how it ended      |
//! | `parts`      | a message of several runs: one fate for the message once all end    |
//! | `run`        | what the lease found; resolve, invoke, end by the outcome           |
//! | `invoke`     | one call of a plugin: its concurrency limit, span, timing, panics   |
//! | `batches`    | a batch handler's calls: messages gathered, each answered on its own|
//! | `delivery`   | one message's life and its fates                                    |
//! | `heartbeat`  | lease and visibility extension while leased: one sweeper per queue  |
//! | `heartbeats` | a queue's running heartbeats, the registry its sweeper reads        |
//! | `outbox`     | what qhost stamps on outgoing messages                              |
//! | `outbox_mark`| marking a sent outbox in the store, retried after an outage         |
//! | `deadletter` | the dead letter for a message                                       |
//! | `backoff`    | retry delays                                                        |
//! | `acker`      | batched deletes, flushed concurrently (a stuck one holds only its own)|
//! | `putback`    | batched put-backs (visibility changes that end a delivery)          |
//! | `slot_releases` | flow slots given back in batches as their deliveries end         |
//! | `waiting`    | a run over its flow key's limit waits on the host for its turn       |
//! | `turns`      | each key's line of waiting messages, driven: when each one's turn comes |
//! | `lines`      | the lines themselves: one per key, bounded per key and per host      |
//! | `completer`  | batched completions                                                 |
//! | `gather`     | a batch from a channel: what is queued and what comes in a linger   |
//! | `context`    | what the stages share                                               |
//! | `tap`        | how each run ended, for runs outside a host (`qhost test`, `invoke`) |
//! | `alone`      | one queue's pipeline on in-memory parts: how those runs are made    |

mod acker;
pub(crate) mod alone;
pub(crate) mod backoff;
mod batch;
#[cfg(test)]
mod batch_calls;
mod batches;
mod canary;
mod completer;
mod context;
mod deadletter;
mod delivery;
#[cfg(test)]
mod fates;
#[cfg(test)]
mod flow_fates;
mod gate;
mod gather;
mod heartbeat;
mod heartbeats;
mod invoke;
mod leased;
mod lines;
mod outbox;
mod outbox_mark;
mod part;
mod parts;
pub(crate) mod priority;
mod putback;
mod receive;
mod route;
mod run;
mod slot_releases;
pub(crate) mod tap;
#[cfg(test)]
pub(crate) mod test_bed;
mod turns;
mod waiting;

pub(crate) use acker::{AckTask, Acker};
pub(crate) use batches::Batches;
pub(crate) use completer::Completer;
pub(crate) use context::{QueueCtx, Shared};
pub(crate) use heartbeats::Heartbeats;
pub(crate) use outbox_mark::OutboxMarks;
pub(crate) use putback::PutBacks;
pub(crate) use receive::run_poller;
pub(crate) use slot_releases::SlotReleases;
pub(crate) use turns::{LineParts, WaitLines};
