//! Pre-claims: the SQLite intake writer claims a new run's push dispatch in the run's own
//! transaction and hands it to this daemon's dispatcher in memory after the commit, so the
//! run reaches its worker without a claim transaction of its own (on SQLite that transaction
//! waited for the one write lock in turn with intake, and delayed intake in turn).
//!
//! The writer also claims the oldest due rows of a target's backlog (runs that found no free
//! slot, retries come due, lapsed claims) when the dispatcher asks for them: the dispatcher
//! then reads those rows back and sends them, and takes no write transaction of its own.
//!
//! Invariant: a pre-claimed dispatch row is what `outbox::claim_push` would have written
//! (claimed by this dispatcher, one attempt, due when the claim lapses), taken only while the
//! target has a free slot (the permits travel with the claim), never for a workflow under
//! `max_running` (claimed in arrival order against its slots) nor for a dispatch due later (a
//! coalescing window). A hand-over that is lost (a crash, a shutdown, a failed commit's
//! retry) leaves a claim that lapses: the dispatch is claimed and sent again, same id.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use switchyard_store::Millis;
use switchyard_store::outbox::ClaimedRun;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::message::Routed;

/// The two slots one delivery holds: the dispatcher's and its target's.
#[derive(Debug)]
pub struct Permits {
    _all: OwnedSemaphorePermit,
    _target: OwnedSemaphorePermit,
}

impl Permits {
    pub fn new(all: OwnedSemaphorePermit, target: OwnedSemaphorePermit) -> Self {
        Self {
            _all: all,
            _target: target,
        }
    }
}

/// A push target as the intake writer may claim for it.
#[derive(Debug)]
struct Slot {
    in_flight: Arc<Semaphore>,
    claim_for: Millis,
}

#[derive(Debug, Default)]
struct State {
    /// The dispatcher's claimant id; `None` while no dispatcher runs (nothing is claimed).
    owner: Option<String>,
    all: Option<Arc<Semaphore>>,
    slots: HashMap<String, Slot>,
    /// Workflows under `max_running`: never pre-claimed.
    capped: HashSet<String>,
    /// Targets with a workflow under `max_running`: the dispatcher claims their backlog itself
    /// (in arrival order against the workflow's slots).
    capped_targets: HashSet<String>,
    ready: Vec<PreClaimed>,
    /// Backlog rows claimed by the writer: target, dispatch id, slots.
    backlog: Vec<BacklogClaim>,
}

/// A backlog row the writer claimed; the dispatcher reads it back before sending it.
#[derive(Debug)]
pub struct BacklogClaim {
    pub target: String,
    pub dispatch_id: String,
    pub permits: Permits,
}

/// A dispatch claimed at intake, with what its message needs.
#[derive(Debug)]
pub struct PreClaimed {
    pub claimed: ClaimedRun,
    pub routed: Routed,
    pub permits: Permits,
}

/// What the intake writer needs to claim: the claimant, until when, and the slots taken.
#[derive(Debug)]
pub struct Claim {
    pub owner: String,
    pub until: Millis,
    pub permits: Permits,
}

/// Shared by the intake writers (claim, hand over) and the dispatcher (publish, take).
#[derive(Debug, Default)]
pub struct PreClaims {
    state: Mutex<State>,
    /// The dispatcher asked for backlog rows; the writer looks at its next transaction.
    backlog_wanted: AtomicBool,
    /// Due rows may be waiting for a free slot (a claim found none, or the writer's last look
    /// filled every slot): a freed slot is worth a look at the backlog (asking the writer, or
    /// a claim pass). Cleared when the backlog is looked at, so it starts no pass after that.
    backlog_left: AtomicBool,
    /// Pre-claims were handed over: send them (no claim transaction needed).
    pub ready: Notify,
    /// Backlog rows the writer claimed were handed over: read them back and send them.
    pub backlog_ready: Notify,
    /// A delivery ended and freed a slot: claim again if rows were left waiting for one.
    pub slot_freed: Notify,
}

impl PreClaims {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The dispatcher's push targets, after each refresh.
    pub fn publish(
        &self,
        owner: &str,
        all: &Arc<Semaphore>,
        targets: impl Iterator<Item = (String, Arc<Semaphore>, Millis)>,
        capped: impl Iterator<Item = (String, String)>,
    ) {
        let mut state = self.state();
        state.owner = Some(owner.to_owned());
        state.all = Some(all.clone());
        state.slots = targets
            .map(|(name, in_flight, claim_for)| {
                (
                    name,
                    Slot {
                        in_flight,
                        claim_for,
                    },
                )
            })
            .collect();
        (state.capped, state.capped_targets) = capped.unzip();
    }

    /// Whether any push target may be claimed for (the intake writer skips its work if not).
    pub fn has_targets(&self) -> bool {
        let state = self.state();
        state.owner.is_some() && !state.slots.is_empty()
    }

    /// The dispatcher stopped: nothing more is claimed, nothing waiting is sent.
    pub fn close(&self) {
        *self.state() = State::default();
        self.backlog_wanted.store(false, Ordering::SeqCst);
    }

    /// A claim for a new run's dispatch of `workflow` to `target`, if one may be taken now.
    pub fn try_claim(&self, target: &str, workflow: &str, now: Millis) -> Option<Claim> {
        let state = self.state();
        let owner = state.owner.clone()?;
        if state.capped.contains(workflow) {
            return None;
        }
        let slot = state.slots.get(target)?;
        let permits = state
            .all
            .clone()?
            .try_acquire_owned()
            .and_then(|all| Ok((all, slot.in_flight.clone().try_acquire_owned()?)));
        let Ok((all, target)) = permits else {
            self.backlog_left.store(true, Ordering::SeqCst);
            return None;
        };
        Some(Claim {
            owner,
            until: now.saturating_add(slot.claim_for),
            permits: Permits::new(all, target),
        })
    }

    /// Whether a running SQLite intake writer may claim `target`'s backlog: not while a
    /// workflow on it is capped (the dispatcher claims those against the workflow's slots).
    pub fn writer_may_claim_for(&self, target: &str) -> bool {
        !self.state().capped_targets.contains(target)
    }

    /// The dispatcher wants backlog rows claimed (then wakes the writer).
    pub fn want_backlog(&self) {
        self.backlog_wanted.store(true, Ordering::SeqCst);
    }

    /// Whether backlog rows are wanted; the writer takes the request.
    pub fn wants_backlog(&self) -> bool {
        self.backlog_wanted.swap(false, Ordering::SeqCst)
    }

    /// Whether due rows may be waiting for a slot (see the field).
    pub fn backlog_left(&self) -> bool {
        self.backlog_left.load(Ordering::SeqCst)
    }

    /// The backlog was looked at (by the SQLite writer, or by a claim pass of the dispatcher
    /// where no writer claims it): rows `left` or not.
    pub fn set_backlog_left(&self, left: bool) {
        self.backlog_left.store(left, Ordering::SeqCst);
    }

    /// The targets whose backlog the writer may claim, each with its free slots.
    pub fn backlog_targets(&self) -> Vec<(String, usize)> {
        let state = self.state();
        let (Some(_), Some(all)) = (&state.owner, &state.all) else {
            return Vec::new();
        };
        state
            .slots
            .iter()
            .filter(|(name, _)| !state.capped_targets.contains(*name))
            .map(|(name, slot)| {
                let free = all
                    .available_permits()
                    .min(slot.in_flight.available_permits());
                (name.clone(), free)
            })
            .collect()
    }

    /// After the commit that claimed backlog rows.
    pub fn hand_over_backlog(&self, claimed: Vec<BacklogClaim>) {
        if claimed.is_empty() {
            return;
        }
        let mut state = self.state();
        if state.owner.is_some() {
            state.backlog.extend(claimed);
            self.backlog_ready.notify_one();
        }
    }

    pub fn take_backlog(&self) -> Vec<BacklogClaim> {
        std::mem::take(&mut self.state().backlog)
    }

    /// After the commit that wrote the claims.
    pub fn hand_over(&self, claimed: Vec<PreClaimed>) {
        let mut state = self.state();
        if state.owner.is_some() {
            state.ready.extend(claimed);
            self.ready.notify_one();
        }
    }

    pub fn take(&self) -> Vec<PreClaimed> {
        std::mem::take(&mut self.state().ready)
    }
}
