//! What a transition is made of: the row changes of one dispatch ([`Change`]: its row, its
//! run's status, its lease, history and attempt rows) and what an applier reports back
//! ([`Applied`]).
//!
//! Invariant: every part of a [`Change`] but its attempt row is conditional (on [`Expect`], on
//! [`RunChange::from`], on a lease still [`Held`]); an applier writes it as it says.

use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::entities::{dispatch_attempt, entity_lock, run_history};

/// The statuses of a run that may still hold its lease (what an ending ends).
pub const ACTIVE_RUNS: [RunStatus; 3] = [
    RunStatus::Queued,
    RunStatus::Dispatched,
    RunStatus::NeedsInput,
];

/// Why a dispatch of a run that ended is cancelled at its claim.
pub const RUN_ENDED: &str = "run_ended";

/// The state a dispatch row must still be in for a change to apply.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expect {
    /// As this transaction just read it, under its row lock (SQLite: under its write lock): the
    /// read checked the state (a due row for a claim, a live or lapsed claim token, a
    /// dead-lettered dispatch for a redispatch).
    AsRead,
    /// Only while its claim is still the caller's: still pending, claimed by `owner`, at
    /// `attempts` of `series`. A late or duplicate record never overrides a newer claim.
    Claim {
        owner: String,
        attempts: i32,
        series: i32,
    },
}

impl Expect {
    /// Whether `row`, read in the applying transaction under its row lock, is still in this
    /// state.
    pub fn holds(&self, row: &dispatch::Model) -> bool {
        match self {
            Expect::AsRead => true,
            Expect::Claim {
                owner,
                attempts,
                series,
            } => {
                row.status == DispatchStatus::Pending
                    && row.claimed_by.as_deref() == Some(owner.as_str())
                    && row.attempts == *attempts
                    && row.series == *series
            }
        }
    }

    /// The claim this change must still hold, if it names one.
    pub fn claim(&self) -> Option<(&str, i32, i32)> {
        match self {
            Expect::AsRead => None,
            Expect::Claim {
                owner,
                attempts,
                series,
            } => Some((owner.as_str(), *attempts, *series)),
        }
    }
}

/// How a change moves a dispatch's attempt count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attempts {
    /// One more (a claim): `attempts + 1` of the row as it is.
    OneMore,
    /// Back to 0: a new series.
    Reset,
}

/// The fields a change sets on its dispatch row; `None` leaves one as it is (`Some(None)`
/// clears a nullable one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DispatchSet {
    pub status: Option<DispatchStatus>,
    pub attempts: Option<Attempts>,
    pub series: Option<i32>,
    pub claimed_by: Option<Option<String>>,
    pub claim_token: Option<Option<String>>,
    pub due_at: Option<Millis>,
    pub reason: Option<Option<String>>,
    pub last_error: Option<String>,
    pub delivered_at: Option<Millis>,
    pub updated_at: Millis,
}

impl DispatchSet {
    /// Nothing but `updated_at`.
    pub fn at(now: Millis) -> Self {
        Self {
            status: None,
            attempts: None,
            series: None,
            claimed_by: None,
            claim_token: None,
            due_at: None,
            reason: None,
            last_error: None,
            delivered_at: None,
            updated_at: now,
        }
    }
}

/// What happens to a run's `finished_at` (and `end_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Finished {
    Keep,
    /// It ends now.
    At(Millis),
    /// It is active again (a redispatch): `finished_at` and `end_reason` cleared.
    Reopened,
}

/// A run's hold on its entity lease: a lease change applies only while the row still names
/// this run with this fencing token (nobody took it over meanwhile).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Held {
    pub tenant_id: String,
    pub target_entity_id: String,
    pub run_id: String,
    pub fencing_token: i64,
}

impl Held {
    /// The lease `run` holds (if it still does).
    pub fn of(run: &run::Model) -> Self {
        Self {
            tenant_id: run.tenant_id.clone(),
            target_entity_id: run.target_entity_id.clone(),
            run_id: run.id.clone(),
            fencing_token: run.fencing_token,
        }
    }
}

/// A change of an entity lease row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseChange {
    /// Released (no holder, expired `at`) if still held: the row stays, so the next holder's
    /// fencing token is larger.
    Release { held: Held, at: Millis },
    /// Moved to the next fencing token if still held, and the run with it: a pull claim after
    /// the first goes to a new holder, and the worker whose claim lapsed can no longer
    /// heartbeat or finish the run.
    NextToken { held: Held, at: Millis },
    /// Taken again by its run (a redispatch), as [`entity_lock::Model::retaken`] made it:
    /// overwritten if a row `existed` (row-locked by the read), else created with a plain
    /// insert (a concurrent creator makes it fail).
    Retaken {
        lease: entity_lock::Model,
        existed: bool,
    },
}

/// What an ending writes besides the run's status, only if the run did end there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// Its lease, released if it still holds it.
    pub release: LeaseChange,
    pub history: run_history::Model,
}

/// A change of a run's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunChange {
    pub run_id: String,
    /// It applies only while the run is in one of these.
    pub from: &'static [RunStatus],
    pub to: RunStatus,
    pub finished: Finished,
    /// Its new fencing token (a redispatch's retaken lease).
    pub fencing_token: Option<i64>,
    pub updated_at: Millis,
    /// Written only if the run was still in `from`.
    pub ended: Option<Ended>,
}

impl RunChange {
    pub(super) fn status(
        run_id: &str,
        from: &'static [RunStatus],
        to: RunStatus,
        now: Millis,
    ) -> Self {
        Self {
            run_id: run_id.to_owned(),
            from,
            to,
            finished: Finished::Keep,
            fencing_token: None,
            updated_at: now,
            ended: None,
        }
    }
}

/// One transition of one dispatch, as the rows it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub dispatch_id: String,
    /// The state the row must still be in; if it is not, nothing below applies but `attempt`.
    pub expect: Expect,
    pub set: DispatchSet,
    pub run: Option<RunChange>,
    /// Applied with the dispatch (a pull claim's new fencing token, a redispatch's lease).
    pub lease: Option<LeaseChange>,
    /// History entries written with the dispatch change, oldest first.
    pub history: Vec<run_history::Model>,
    /// The attempt row: written whether the change applied or not.
    pub attempt: Option<dispatch_attempt::Model>,
}

impl Change {
    pub(super) fn new(dispatch_id: &str, expect: Expect, set: DispatchSet) -> Self {
        Self {
            dispatch_id: dispatch_id.to_owned(),
            expect,
            set,
            run: None,
            lease: None,
            history: Vec::new(),
            attempt: None,
        }
    }
}

/// What an applier did with one change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Applied {
    /// The dispatch row was still as expected, so the change applied.
    pub held: bool,
    /// A [`LeaseChange::NextToken`] moved the lease: the run has the next fencing token.
    pub token_moved: bool,
}

pub(super) fn entry(
    run_id: &str,
    status: RunStatus,
    cause: &str,
    detail: String,
    now: Millis,
) -> run_history::Model {
    run_history::Model::entry(run_id, status, cause, Some(detail), now)
}
