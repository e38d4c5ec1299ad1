//! Flow control by key: which runs may start now, when one queue carries many tenants' work or
//! its handler calls a partner with a limit of its own.
//!
//! A plugin's manifest names a **flow key** per message (`[flow] key = "attribute:tenant"`, a
//! JSON field of the body its handler sees, or the message group), and limits per key:
//!
//! - **`max-concurrency`**: at most N runs of one key at once across the fleet. Slots live in
//!   the idempotency store beside the leases (`idempotency::slots`) and are asked for in the
//!   same call as the message's lease, so the limit costs no round trip of its own.
//! - **`rate`**: runs of one key per second or minute across the fleet, the GCRA of the
//!   plugin's own rate (`idempotency::rate`) keyed by flow.
//! - **Fair shares** within a host ([`fair`]): a key may hold only its share of the host's
//!   in-flight slots (weighted by `weights`), with one share kept for keys not seen yet, so a
//!   key with a backlog cannot hold every slot while others wait.
//!
//! A message over its key's fleet-wide limit waits on the host that received it for its turn
//! (`pipeline::waiting`), holding its lease but none of the host's slots; what the host cannot
//! keep, and a message beyond its key's fair share, is put back for as long as the limit
//! implies. No attempt is used, it is never dead-lettered for it, and it is counted
//! (`flow_limited`, `fair_share`, waits). The gate
//! sits between routing and the lease: it runs on what routing decided (the plugin, the body
//! its handler sees) and before anything is held. A message with no flow key is in the
//! default flow (the empty key), so a limit without a key is a limit on the whole plugin.
//!
//! | module   | role                                                             |
//! |----------|------------------------------------------------------------------|
//! | `policy` | the manifest's `[flow]`: the key's source, the limits, weights   |
//! | `fair`   | a host's fair shares of its in-flight slots among flow keys      |
//! | `held`   | a held flow slot, given back when its delivery ends              |

pub(crate) mod fair;
pub(crate) mod held;
pub(crate) mod policy;

pub(crate) use fair::FairShares;
pub(crate) use held::HeldSlot;
pub(crate) use policy::FlowPolicy;
