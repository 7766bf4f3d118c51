//! Pre-claims: an intake writer claims a new run's push dispatch in the run's own
//! transaction and hands it to this daemon's dispatcher in memory after the commit, so the
//! run reaches its worker without a claim transaction of its own (on SQLite that transaction
//! waited for the one write lock in turn with intake, and delayed intake in turn).
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
    ready: Vec<PreClaimed>,
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
    /// Due rows may be waiting for a free slot (a pre-claim found none): a freed slot is worth
    /// a claim pass. Cleared when a claim pass looks at the backlog, so it starts no pass
    /// after that.
    backlog_left: AtomicBool,
    /// Pre-claims were handed over: send them (no claim transaction needed).
    pub ready: Notify,
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
        state.capped = capped.map(|(workflow, _)| workflow).collect();
    }

    /// Whether any push target may be claimed for (the intake writer skips its work if not).
    pub fn has_targets(&self) -> bool {
        let state = self.state();
        state.owner.is_some() && !state.slots.is_empty()
    }

    /// The dispatcher stopped: nothing more is claimed, nothing waiting is sent.
    pub fn close(&self) {
        *self.state() = State::default();
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

    /// Whether due rows may be waiting for a slot (see the field).
    pub fn backlog_left(&self) -> bool {
        self.backlog_left.load(Ordering::SeqCst)
    }

    /// A claim pass looked at the backlog: rows `left` or not.
    pub fn set_backlog_left(&self, left: bool) {
        self.backlog_left.store(left, Ordering::SeqCst);
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
