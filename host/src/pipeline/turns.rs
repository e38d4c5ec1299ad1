//! The turns of a host's waiting messages (`waiting`): each flow key's line, and the task that
//! drives it, asking for the line's first message's turn and starting it when it comes.
//!
//! What a line holds is anything [`Parked`]: the driver knows what it waits for ([`Turn`]),
//! whose key it is, and how to start it or give it up, not what a delivery is. So this
//! module needs the store, the fair shares and the host's in-flight slots, and nothing of the
//! pipeline's stages, which call into it.
//!
//! A line's first message asks for its turn whenever the line is woken (a run of its key
//! ended on this host and gave its slot back: `slot_releases`) or its poll interval has
//! passed (a slot another host gave back): an in-flight slot of the host first, then its key's
//! fair share of them, then the store's slot or its run under the rate. Once one starts, the
//! next asks at once. Only the first asks, so a key costs one store call per interval on a
//! host however many of its messages wait, and nothing when none do.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::lines::{Line, Lines};
use crate::flow::FairShares;
use crate::flow::fair::{Arrival, Ticket};
use crate::flow::policy::FlowPolicy;
use crate::idempotency::rate::{self, Admission, Rate};
use crate::idempotency::slots::{Slot, SlotAnswer, SlotRequest};
use crate::idempotency::{IdempotencyError, MessageStore};

/// A line keeps what its key's limit runs in about this long.
const LINE_SPAN: Duration = Duration::from_secs(2);
/// A line keeps at least this many per slot of its key (before a run of the key has ended on
/// the host, its run time is taken to be a second, which is usually long).
const MIN_PER_SLOT: usize = 8;
/// The longest a message waits on a host for its key's turn; then it is put back.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(30);
/// How often a line asks the store for a slot at most, and at least.
const MIN_POLL: Duration = Duration::from_millis(25);
const MAX_POLL: Duration = Duration::from_secs(1);
/// How often a line asks before its key's run time is known on the host.
const UNMEASURED_POLL: Duration = Duration::from_millis(100);
/// How long a line waits after the store did not answer.
const AFTER_FAILURE: Duration = Duration::from_secs(1);

/// What a waiting message waits for.
#[derive(Debug)]
pub(crate) enum Turn {
    /// One of its key's slots.
    Slot(SlotRequest),
    /// Its run under its key's rate, kept at `key`.
    Rate {
        /// The store key of the rate.
        key: String,
        /// The rate.
        limit: Rate,
    },
}

impl Turn {
    /// Its line: the store key of what it waits for.
    fn line(&self) -> &str {
        match self {
            Turn::Slot(request) => &request.key,
            Turn::Rate { key, .. } => key,
        }
    }
}

/// What its turn brought a waiting message.
#[derive(Debug)]
pub(crate) struct Go {
    /// One of the host's in-flight slots, to hold while it runs.
    pub(crate) permit: OwnedSemaphorePermit,
    /// Its run counted in its key's share of this host's slots.
    pub(crate) ticket: Ticket,
    /// What it was given.
    pub(crate) took: Took,
}

/// What a message's turn gave it.
#[derive(Debug)]
pub(crate) enum Took {
    /// One of its key's slots.
    Slot(Slot),
    /// Its run under its key's rate, reserved this long from now.
    Rate(Duration),
}

/// Why a waiting message is given up (put back into the queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GiveUp {
    /// No room, or it waited [`MAX_WAIT`]: back for this long (its turn's likely time),
    /// counted `flow_limited`.
    Back(Duration),
    /// The shutdown's grace is over: back at once, released.
    Shutdown,
}

/// A message kept in a line.
pub(crate) trait Parked: Send + Sync + 'static {
    /// What it waits for.
    fn turn(&self) -> &Turn;
    /// Its plugin's name.
    fn plugin(&self) -> &str;
    /// Its flow key.
    fn flow(&self) -> &str;
    /// Its plugin's flow policy.
    fn policy(&self) -> &FlowPolicy;
    /// Its turn came: it goes on in a task of its own.
    fn start(self: Box<Self>, go: Go, tasks: &TaskTracker);
    /// It is put back, unrun.
    fn give_up(self: Box<Self>, why: GiveUp, tasks: &TaskTracker);
    /// The store did not answer for its turn: counted as its delivery's backend error.
    fn unanswered(&self, error: &IdempotencyError);
}

/// One entry of a line: a message and since when it waits.
struct Entry {
    parked: Box<dyn Parked>,
    since: Instant,
}

/// A host's lines of waiting messages, and what driving them takes.
pub(crate) struct WaitLines {
    lines: Lines<Entry>,
    store: Arc<dyn MessageStore>,
    fair: Arc<FairShares>,
    in_flight: Arc<Semaphore>,
    abandon: CancellationToken,
    tasks: TaskTracker,
}

impl std::fmt::Debug for WaitLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitLines").finish_non_exhaustive()
    }
}

/// What a host's lines share with its pipeline.
pub(crate) struct LineParts {
    /// At most this many messages wait in all.
    pub(crate) capacity: usize,
    /// The store its turns are asked of.
    pub(crate) store: Arc<dyn MessageStore>,
    /// The fair shares of the host's slots.
    pub(crate) fair: Arc<FairShares>,
    /// The host's in-flight slots.
    pub(crate) in_flight: Arc<Semaphore>,
    /// Cancelled when the shutdown's grace is over.
    pub(crate) abandon: CancellationToken,
    /// Where the drivers and the started messages' tasks are tracked.
    pub(crate) tasks: TaskTracker,
}

impl WaitLines {
    /// Lines over `parts`.
    pub(crate) fn new(parts: LineParts) -> Arc<Self> {
        Arc::new(WaitLines {
            lines: Lines::new(parts.capacity),
            store: parts.store,
            fair: parts.fair,
            in_flight: parts.in_flight,
            abandon: parts.abandon,
            tasks: parts.tasks,
        })
    }

    /// Whether the host keeps as many messages as it may.
    pub(crate) fn is_full(&self) -> bool {
        self.lines.is_full()
    }

    /// Whether messages wait on this host for a slot kept at `key`.
    pub(crate) fn waits_for(&self, key: &str) -> bool {
        self.lines.holds(key)
    }

    /// Wakes the line of the slots kept at `key`: one of them was given back on this host.
    pub(crate) fn wake(&self, key: &str) {
        self.lines.wake(key);
    }

    /// The tracker of the tasks its messages go on (or back) in.
    pub(crate) fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Keeps `parked` in its key's line when the line and the host have room, or hands it back.
    pub(crate) fn keep(self: &Arc<Self>, parked: Box<dyn Parked>) -> Result<(), Box<dyn Parked>> {
        let room = self.room(parked.as_ref());
        let id = parked.turn().line().to_string();
        let first_look = self.poll(parked.as_ref());
        let (plugin, flow) = (parked.plugin().to_string(), parked.flow().to_string());
        let since = Instant::now();
        // Counted first: once in its line, its driver may start it (and count it out) at once.
        self.fair.waiting(&plugin, &flow, 1);
        let driver = match self.lines.keep(&id, room, Entry { parked, since }) {
            Ok(driver) => driver,
            Err(entry) => {
                self.fair.waiting(&plugin, &flow, -1);
                return Err(entry.parked);
            }
        };
        self.fair.waited(&plugin, &flow);
        if let Some(line) = driver {
            let lines = Arc::clone(self);
            self.tasks
                .spawn(async move { lines.drive(line, first_look).await });
        }
        Ok(())
    }

    /// How many a key's line keeps: what the key's limit runs in [`LINE_SPAN`] (for slots, at
    /// least [`MIN_PER_SLOT`] per slot).
    fn room(&self, parked: &dyn Parked) -> usize {
        match parked.turn() {
            Turn::Slot(request) => {
                let run = self.fair.run_time(parked.plugin(), parked.flow());
                let per_slot = LINE_SPAN.as_micros().div_ceil(run.as_micros().max(1));
                let per_slot = per_slot.max(MIN_PER_SLOT as u128) as usize;
                (request.limit as usize).saturating_mul(per_slot)
            }
            Turn::Rate { limit, .. } => {
                let runs = u128::from(limit.count) * LINE_SPAN.as_micros() / limit.per.as_micros();
                (runs as usize).max(2)
            }
        }
    }

    /// How long a line waits before asking the store again, unless a run of its key ending on
    /// this host wakes it first: a run's time over the key's limit, or [`UNMEASURED_POLL`]
    /// before a run of the key has ended on this host (another host may be running them all).
    fn poll(&self, parked: &dyn Parked) -> Duration {
        let limit = match parked.turn() {
            Turn::Slot(request) => request.limit.max(1),
            Turn::Rate { .. } => 1,
        };
        let run = self.fair.measured_run_time(parked.plugin(), parked.flow());
        run.map_or(UNMEASURED_POLL, |run| run / limit)
            .clamp(MIN_POLL, MAX_POLL)
    }

    /// Drives `line` until it is empty, its first message asking for its turn whenever the
    /// line is woken or `after` has passed.
    async fn drive(&self, line: Arc<Line<Entry>>, mut after: Duration) {
        loop {
            tokio::select! {
                biased;
                () = self.abandon.cancelled() => return self.give_back(&line),
                () = line.woken() => {}
                () = tokio::time::sleep(after) => {}
            }
            let Some(first) = self.lines.next(&line) else {
                return;
            };
            let (plugin, flow) = (first.parked.plugin(), first.parked.flow());
            if first.since.elapsed() >= MAX_WAIT {
                self.fair.waiting(plugin, flow, -1);
                let run = self.fair.run_time(plugin, flow);
                first.parked.give_up(GiveUp::Back(run), &self.tasks);
                after = Duration::ZERO;
                continue;
            }
            after = match self.ask(first).await {
                Asked::Started => Duration::ZERO,
                Asked::NotYet(first, wait) => {
                    self.lines.put_front(&line, first);
                    wait
                }
            };
        }
    }

    /// Asks for `first`'s turn: an in-flight slot of this host, its key's fair share of them,
    /// then the store; starts it when all three say yes.
    async fn ask(&self, first: Entry) -> Asked {
        let parked = first.parked.as_ref();
        let poll = self.poll(parked);
        let permit = tokio::select! {
            biased;
            () = self.abandon.cancelled() => return Asked::NotYet(first, Duration::ZERO),
            permit = Arc::clone(&self.in_flight).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return Asked::NotYet(first, poll),
            },
        };
        // The store decides the key's limit: a run of it on this host gives its slot back as
        // its call ends, before its delivery (and its count here) does.
        let arrival = Arrival {
            returning: true,
            may_wait: true,
            waiting: true,
        };
        let (plugin, flow) = (parked.plugin(), parked.flow());
        let Ok(ticket) = self.fair.admit(plugin, flow, parked.policy(), arrival) else {
            return Asked::NotYet(first, poll);
        };
        self.fair.asked(plugin, flow);
        let answer = match parked.turn() {
            Turn::Slot(request) => (self.take_slot(request).await).map(|slot| match slot {
                Some(slot) => Answer::Took(Took::Slot(slot)),
                None => Answer::NotYet(poll),
            }),
            Turn::Rate { key, limit } => (self.store.admit(key, *limit).await).map(|a| match a {
                Admission::After(wait) => Answer::Took(Took::Rate(wait)),
                // Asked again when its run comes within reach.
                Admission::Later(when) => {
                    Answer::NotYet(when.saturating_sub(rate::MAX_WAIT).max(MIN_POLL))
                }
            }),
        };
        let took = match answer {
            Ok(Answer::Took(took)) => took,
            Ok(Answer::NotYet(wait)) => return not_yet(first, ticket, wait),
            Err(e) => {
                parked.unanswered(&e);
                return not_yet(first, ticket, AFTER_FAILURE);
            }
        };
        self.fair.waiting(plugin, flow, -1);
        let go = Go {
            permit,
            ticket,
            took,
        };
        first.parked.start(go, &self.tasks);
        Asked::Started
    }

    /// One of the key's slots, if one is free.
    async fn take_slot(&self, request: &SlotRequest) -> Result<Option<Slot>, IdempotencyError> {
        let asked = std::slice::from_ref(request);
        let (_, mut answers) = self.store.acquire_with_slots(&[], asked).await?;
        if answers.len() != 1 {
            let why = format!("{} answers to one slot request", answers.len());
            return Err(IdempotencyError::Corrupt(why));
        }
        Ok(match answers.remove(0)? {
            SlotAnswer::Held(slot) => Some(slot),
            SlotAnswer::Full { .. } => None,
        })
    }

    /// The end of a shutdown's grace: everything still waiting in `line` is put back at once.
    fn give_back(&self, line: &Line<Entry>) {
        while let Some(entry) = self.lines.next(line) {
            let parked = entry.parked;
            self.fair.waiting(parked.plugin(), parked.flow(), -1);
            parked.give_up(GiveUp::Shutdown, &self.tasks);
        }
    }
}

/// What the store said of a turn.
enum Answer {
    /// It came.
    Took(Took),
    /// Not yet: ask again after this long.
    NotYet(Duration),
}

/// What asking for a waiting message's turn found.
enum Asked {
    /// Its turn came: it goes on in a task of its own.
    Started,
    /// Not yet: ask again after this long (or when woken).
    NotYet(Entry, Duration),
}

/// Not its turn yet: its ticket is given back unrun, and it asks again after `wait`.
fn not_yet(first: Entry, ticket: Ticket, wait: Duration) -> Asked {
    ticket.unrun();
    Asked::NotYet(first, wait)
}
