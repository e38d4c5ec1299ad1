//! Two versions of a plugin on the same recorded messages, before the new one serves:
//! `qhost replay`.
//!
//! Each message runs through the old version, then the new, as `qhost invoke` runs one: loaded
//! as a host loads them (manifests, limits, deadlines), with no queue, no lease and no effect.
//! Outboxes are reported, not sent. HTTP requests their grants admit are written down (method,
//! URL, body digest) and answered with an empty `200 OK`, never sent (`runtime::http::record`),
//! so a replay touches no network and both versions meet the same answers.
//!
//! What is compared, per message:
//! - the outcome, by kind (ack, retry, reject, failed, no key): a changed reject reason is
//!   shown, not counted as a difference;
//! - the outbox each would send (none unless it acked): count, queue, body, attributes, delay
//!   and group, leaving out the `qhost-producer` stamp, which names the version by design;
//! - the HTTP requests each made, in order: method, URL and body digest.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::message::recorded::{LineError, RecordedMessage, read_lines};
use crate::message::{Outgoing, wire};
use crate::oneshot::Ended;
use crate::oneshot::bench::Bench;
use crate::plugin::Plugin;
use crate::plugin::loader::LoadAs;
use crate::runtime::Costs;
use crate::runtime::http::record::RecordedRequest;
use crate::runtime::world::World;

/// The queue name a replayed handler is told its message came from, when the record names
/// none.
const QUEUE: &str = "replay";

/// One version as the replay loaded it, and what its runs took.
#[derive(Debug)]
pub struct Side {
    /// The file it was loaded from.
    pub path: PathBuf,
    /// The plugin name (the file stem).
    pub plugin: String,
    /// Its version (content hash).
    pub version: String,
    /// Wall-clock time of its runs, in all.
    pub took: Duration,
    /// Instantiate and call time of its runs.
    pub costs: Option<Costs>,
}

/// What one version did with one message.
#[derive(Clone, Debug)]
pub struct Run {
    /// The key its manifest derived (none when it derived none).
    pub key: Option<String>,
    /// How it ended.
    pub ended: Ended,
    /// What it would send: its outbox when it acked, else nothing.
    pub outbox: Vec<Outgoing>,
    /// The HTTP requests it made, recorded.
    pub http: Vec<RecordedRequest>,
}

/// One message through both versions.
#[derive(Clone, Debug)]
pub struct Compared {
    /// Its line in the file.
    pub line: usize,
    /// Its message id.
    pub id: String,
    /// The old version's run.
    pub old: Run,
    /// The new version's run.
    pub new: Run,
}

impl Compared {
    /// Whether the two ended differently.
    pub fn outcome_differs(&self) -> bool {
        self.old.ended.kind() != self.new.ended.kind()
    }

    /// Whether they would send different messages.
    pub fn outbox_differs(&self) -> bool {
        let comparable = |run: &Run| -> Vec<Outgoing> {
            (run.outbox.iter().cloned())
                .map(|mut m| {
                    m.attributes.retain(|a| a.name != wire::PRODUCER);
                    m
                })
                .collect()
        };
        comparable(&self.old) != comparable(&self.new)
    }

    /// Whether they made different HTTP requests.
    pub fn http_differs(&self) -> bool {
        self.old.http != self.new.http
    }
}

/// A whole replay.
#[derive(Debug)]
pub struct Replay {
    /// The version serving now (or the one to compare against).
    pub old: Side,
    /// The version to try.
    pub new: Side,
    /// Each readable message, in file order.
    pub rows: Vec<Compared>,
    /// The lines that were not messages.
    pub unreadable: Vec<LineError>,
}

/// What a replay found, most serious first; a pipeline gates on it by exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Finding {
    /// Some message ended differently.
    OutcomesDiffer,
    /// Outcomes agree, but some message's outbox or HTTP requests differ.
    EffectsDiffer,
    /// All agree, but some lines could not be read.
    Unreadable,
    /// Every message agrees, and every line was read.
    Agree,
}

impl Replay {
    /// The most serious finding.
    pub fn finding(&self) -> Finding {
        if self.rows.iter().any(Compared::outcome_differs) {
            Finding::OutcomesDiffer
        } else if (self.rows.iter()).any(|r| r.outbox_differs() || r.http_differs()) {
            Finding::EffectsDiffer
        } else if !self.unreadable.is_empty() {
            Finding::Unreadable
        } else {
            Finding::Agree
        }
    }
}

/// Runs each message in `messages` (the JSON Lines text of a recorded-messages file) through
/// the plugin at `old`, then the one at `new`.
pub async fn replay_files(
    config: &Config,
    new: &Path,
    old: &Path,
    messages: &str,
) -> anyhow::Result<Replay> {
    let old_bench = load(config, old).await?;
    let new_bench = load(config, new).await?;
    let (old_plugin, new_plugin) = (old_bench.plugin(), new_bench.plugin());
    let mut rows = Vec::new();
    let mut unreadable = Vec::new();
    let (mut old_took, mut new_took) = (Duration::ZERO, Duration::ZERO);
    let (old_before, new_before) = (old_plugin.costs(), new_plugin.costs());
    for read in read_lines(messages) {
        let (line, msg) = match read {
            Ok(read) => read,
            Err(e) => {
                unreadable.push(e);
                continue;
            }
        };
        let started = Instant::now();
        let old = run(&old_bench, &msg).await;
        let between = Instant::now();
        let new = run(&new_bench, &msg).await;
        old_took += between - started;
        new_took += between.elapsed();
        rows.push(Compared {
            line,
            id: msg.id,
            old,
            new,
        });
    }
    let side = |path: &Path, plugin: &Plugin, before: Option<Costs>, took| Side {
        path: path.to_path_buf(),
        plugin: plugin.name.clone(),
        version: plugin.version.clone(),
        took,
        costs: (plugin.costs())
            .map(|after| crate::oneshot::since(&before.unwrap_or_default(), after)),
    };
    Ok(Replay {
        old: side(old, old_plugin, old_before, old_took),
        new: side(new, new_plugin, new_before, new_took),
        rows,
        unreadable,
    })
}

/// Loads the plugin at `path` into a replay's world: its HTTP requests written down, never
/// sent.
async fn load(config: &Config, path: &Path) -> anyhow::Result<Bench> {
    Bench::load_for(config, LoadAs::file(path), |_| {}, Some(World::replay())).await
}

impl Run {
    /// A message that did not run, and why.
    fn unrun(why: String) -> Run {
        Run {
            key: None,
            ended: Ended::Refused(why),
            outbox: Vec::new(),
            http: Vec::new(),
        }
    }
}

/// One message through one version.
async fn run(bench: &Bench, msg: &RecordedMessage) -> Run {
    let received = msg.received(QUEUE);
    let ran = match bench.run(&received, None, None).await {
        Ok(mut runs) if !runs.is_empty() => runs.remove(0),
        Ok(_) => return Run::unrun("the message held nothing to run".into()),
        Err(why) => return Run::unrun(why),
    };
    Run {
        key: ran.end.key,
        ended: ran.end.ended,
        outbox: ran.end.outbox,
        http: ran.met.http.iter().map(RecordedRequest::of).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ended: Ended, outbox: Vec<Outgoing>, http: Vec<RecordedRequest>) -> Run {
        Run {
            key: Some("k".into()),
            ended,
            outbox,
            http,
        }
    }

    fn compared(old: Run, new: Run) -> Compared {
        Compared {
            line: 1,
            id: "m".into(),
            old,
            new,
        }
    }

    fn request(url: &str) -> RecordedRequest {
        RecordedRequest {
            method: "POST".into(),
            url: url.into(),
            body_len: 0,
            body_sha256: String::new(),
        }
    }

    #[test]
    fn outcomes_compare_by_kind_and_outboxes_without_the_producer_stamp() {
        let stamped = |version: &str| {
            Outgoing::new("next", "hi")
                .with_attribute(crate::Attribute::string(wire::PRODUCER, version))
        };
        let same = compared(
            run(Ended::Reject("a".into()), vec![], vec![]),
            run(Ended::Reject("b".into()), vec![], vec![]),
        );
        assert!(!same.outcome_differs(), "a reason is shown, not compared");
        let acked = compared(
            run(Ended::Ack, vec![stamped("p@1")], vec![request("http://x/")]),
            run(Ended::Ack, vec![stamped("p@2")], vec![request("http://x/")]),
        );
        assert!(!acked.outbox_differs() && !acked.http_differs());
        let other = compared(
            run(Ended::Ack, vec![stamped("p@1")], vec![request("http://x/")]),
            run(Ended::Retry(3), vec![], vec![request("http://y/")]),
        );
        assert!(other.outcome_differs() && other.outbox_differs() && other.http_differs());
    }

    #[test]
    fn the_finding_is_the_most_serious_difference() {
        let side = || Side {
            path: PathBuf::new(),
            plugin: "p".into(),
            version: "v".into(),
            took: Duration::ZERO,
            costs: None,
        };
        let mut replay = Replay {
            old: side(),
            new: side(),
            rows: vec![compared(
                run(Ended::Ack, vec![], vec![]),
                run(Ended::Ack, vec![], vec![]),
            )],
            unreadable: vec![],
        };
        assert_eq!(replay.finding(), Finding::Agree);
        replay.unreadable.push(LineError {
            line: 2,
            reason: "x".into(),
        });
        assert_eq!(replay.finding(), Finding::Unreadable);
        replay.rows.push(compared(
            run(Ended::Ack, vec![], vec![]),
            run(Ended::Ack, vec![], vec![request("http://x/")]),
        ));
        assert_eq!(replay.finding(), Finding::EffectsDiffer);
        replay.rows.push(compared(
            run(Ended::Ack, vec![], vec![]),
            run(Ended::Failed("trap".into()), vec![], vec![]),
        ));
        assert_eq!(replay.finding(), Finding::OutcomesDiffer);
    }
}
