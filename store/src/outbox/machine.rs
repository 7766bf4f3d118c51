//! The outbox as a state machine: every transition of a dispatch (claimed, delivered, retry
//! scheduled, dead-lettered, claim lapsed or released, cancelled, redispatched) computed once, as
//! the row changes it makes, with no I/O. The appliers (`super::apply` on a sea-orm
//! transaction, `sqlite::outbox::apply` on the SQLite writer's `rusqlite` one) write a
//! [`Change`] as it says and decide nothing.
//!
//! Invariant: a change applies only while its dispatch row is still as its [`Expect`] says; one
//! that does not apply changes nothing but its attempt row (the attempt was made either way). A
//! run's status changes only from the statuses its [`RunChange`] names, and an ending's lease
//! release and history entry ([`Ended`]) are written only if the run did end there.

use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::entities::{dispatch_attempt, entity_lock, run_history};

use super::{ClaimedRun, PULL_CLAIMANT, PullClaim, PullTarget, Recorded, Verdict, attempt_words};

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
    fn status(run_id: &str, from: &'static [RunStatus], to: RunStatus, now: Millis) -> Self {
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
    fn new(dispatch_id: &str, expect: Expect, set: DispatchSet) -> Self {
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

fn entry(
    run_id: &str,
    status: RunStatus,
    cause: &str,
    detail: String,
    now: Millis,
) -> run_history::Model {
    run_history::Model::entry(run_id, status, cause, Some(detail), now)
}

/// A dispatch cancelled with `reason` (`run_ended` at a claim; `lease_expired` at a takeover):
/// nothing is left to deliver for a run that ended.
pub fn cancelled(dispatch_id: &str, reason: &str, now: Millis) -> Change {
    let set = DispatchSet {
        status: Some(DispatchStatus::Cancelled),
        reason: Some(Some(reason.to_owned())),
        claim_token: Some(None),
        ..DispatchSet::at(now)
    };
    Change::new(dispatch_id, Expect::AsRead, set)
}

/// What a push claim does with one due row it read.
#[derive(Debug)]
pub enum PushStep {
    /// One more attempt, claimed by the dispatcher until the claim lapses.
    Claimed {
        change: Change,
        claimed: Box<ClaimedRun>,
    },
    /// Its run ended: cancelled.
    Cancelled(Change),
}

/// A push claim of `row` (due, read under its lock) for `owner` until `claim_until`: one more
/// attempt, claimed, due when the claim lapses (a crash between delivery and record re-delivers
/// it under the same id). A dispatch whose run ended (or is gone) is cancelled instead.
pub fn claim_push(
    mut row: dispatch::Model,
    run: Option<&run::Model>,
    owner: &str,
    claim_until: Millis,
    now: Millis,
) -> PushStep {
    let Some(run) = run.filter(|r| r.status.is_active()) else {
        return PushStep::Cancelled(cancelled(&row.id, RUN_ENDED, now));
    };
    let set = DispatchSet {
        attempts: Some(Attempts::OneMore),
        claimed_by: Some(Some(owner.to_owned())),
        due_at: Some(claim_until),
        ..DispatchSet::at(now)
    };
    let change = Change::new(&row.id, Expect::AsRead, set);
    row.attempts += 1;
    row.claimed_by = Some(owner.to_owned());
    row.due_at = claim_until;
    PushStep::Claimed {
        change,
        claimed: Box::new(ClaimedRun {
            dispatch: row,
            run: run.clone(),
            lease_expires_at: 0,
        }),
    }
}

/// What a pull claim does with one due row it read.
#[derive(Debug)]
pub enum PullStep {
    /// Its target is not a pull target of this claim: left as it is.
    Skipped,
    /// Its run ended: cancelled.
    Cancelled(Change),
    /// Claimed as often as its target allows (`max_claims`) without finishing: dead-lettered.
    DeadLettered(Change),
    /// Handed to the worker with a claim token until the claim lapses.
    Claimed {
        change: Change,
        claim: Box<PullClaim>,
    },
}

/// A pull claim of `row` (due, read under its lock) for a worker of `target`, with the claim
/// token `token` makes. A row whose claim lapsed and was not reset yet is recorded as the
/// keep-alive sweep would have; a row past `max_claims` is dead-lettered; every claim after
/// the first moves the lease to a new fencing token.
pub fn claim_pull(
    mut row: dispatch::Model,
    run: Option<&run::Model>,
    target: Option<&PullTarget>,
    now: Millis,
    token: impl FnOnce() -> String,
) -> PullStep {
    let Some(run) = run.filter(|r| r.status.is_active()) else {
        return PullStep::Cancelled(cancelled(&row.id, RUN_ENDED, now));
    };
    let Some(target) = target else {
        return PullStep::Skipped;
    };
    let mut history = Vec::new();
    let reclaimed = row.claim_token.is_some();
    if reclaimed {
        // Taken over before the keep-alive sweep reset it: recorded as the sweep would.
        history.push(lapse_entry(&run.id, row.attempts, now));
    }
    if row.attempts >= target.max_claims {
        let set = DispatchSet {
            status: Some(DispatchStatus::DeadLettered),
            reason: Some(Some("max_attempts".to_owned())),
            claim_token: Some(None),
            claimed_by: Some(None),
            ..DispatchSet::at(now)
        };
        let what = format!("claimed {} times without finishing", row.attempts);
        let mut change = Change::new(&row.id, Expect::AsRead, set);
        change.history = history;
        change.run = Some(dead_lettered_run(run, "max_attempts", &what, now));
        return PullStep::DeadLettered(change);
    }
    let token = token();
    let expires_at = now.saturating_add(target.claim_ttl_ms);
    let set = DispatchSet {
        attempts: Some(Attempts::OneMore),
        claimed_by: Some(Some(PULL_CLAIMANT.to_owned())),
        claim_token: Some(Some(token.clone())),
        due_at: Some(expires_at),
        ..DispatchSet::at(now)
    };
    let mut change = Change::new(&row.id, Expect::AsRead, set);
    row.attempts += 1;
    row.claimed_by = Some(PULL_CLAIMANT.to_owned());
    row.claim_token = Some(token.clone());
    row.due_at = expires_at;
    let mut run = run.clone();
    if run.status == RunStatus::Queued {
        change.run = Some(RunChange::status(
            &run.id,
            &[RunStatus::Queued],
            RunStatus::Dispatched,
            now,
        ));
        run.status = RunStatus::Dispatched;
    }
    if row.attempts > 1 {
        change.lease = Some(LeaseChange::NextToken {
            held: Held::of(&run),
            at: now,
        });
    }
    let detail = format!(
        "claim {} of series {} until {}{}",
        row.attempts,
        row.series,
        crate::millis_rfc3339(expires_at),
        if reclaimed {
            " (the previous claim lapsed)"
        } else {
            ""
        }
    );
    history.push(entry(
        &run.id,
        RunStatus::Dispatched,
        "claimed",
        detail,
        now,
    ));
    change.history = history;
    PullStep::Claimed {
        change,
        claim: Box::new(PullClaim {
            claimed: ClaimedRun {
                dispatch: row,
                run,
                lease_expires_at: 0,
            },
            token,
            expires_at,
        }),
    }
}

/// What one recorded attempt does, only while its claim is still the caller's: delivered (the
/// run `dispatched`), a retry scheduled (the claim given up, the error kept, due at
/// `next_due`), or dead-lettered (the run ended, its lease released). Its attempt row is
/// written either way.
pub fn recorded(attempt: &Recorded, now: Millis) -> Change {
    let d = &attempt.claimed.dispatch;
    let run = &attempt.claimed.run;
    let words = attempt_words(attempt);
    let expect = Expect::Claim {
        owner: attempt.owner.clone(),
        attempts: d.attempts,
        series: d.series,
    };
    let mut change = match &attempt.verdict {
        Verdict::Delivered => {
            let set = DispatchSet {
                status: Some(DispatchStatus::Delivered),
                claimed_by: Some(None),
                delivered_at: Some(now),
                ..DispatchSet::at(now)
            };
            let mut change = Change::new(&d.id, expect, set);
            change.run = Some(RunChange::status(
                &run.id,
                &[RunStatus::Queued],
                RunStatus::Dispatched,
                now,
            ));
            change.history = vec![entry(
                &run.id,
                RunStatus::Dispatched,
                "delivered",
                words,
                now,
            )];
            change
        }
        Verdict::Retry { next_due } => {
            let detail = format!(
                "{words}; next attempt at {}",
                crate::millis_rfc3339(*next_due)
            );
            let set = DispatchSet {
                claimed_by: Some(None),
                last_error: Some(words),
                due_at: Some(*next_due),
                ..DispatchSet::at(now)
            };
            let mut change = Change::new(&d.id, expect, set);
            change.history = vec![entry(
                &run.id,
                RunStatus::Queued,
                "attempt_failed",
                detail,
                now,
            )];
            change
        }
        Verdict::DeadLetter { reason } => {
            let ended = dead_lettered_run(run, reason, &words, now);
            let set = DispatchSet {
                status: Some(DispatchStatus::DeadLettered),
                reason: Some(Some((*reason).to_owned())),
                claimed_by: Some(None),
                last_error: Some(words),
                ..DispatchSet::at(now)
            };
            let mut change = Change::new(&d.id, expect, set);
            change.run = Some(ended);
            change
        }
    };
    change.attempt = Some(dispatch_attempt::Model {
        id: uuid::Uuid::now_v7().to_string(),
        dispatch_id: d.id.clone(),
        run_id: d.run_id.clone(),
        series: d.series,
        attempt: d.attempts,
        target: d.target.clone(),
        result: attempt.result.clone(),
        status_code: attempt.status_code,
        response: attempt.response.clone(),
        error: attempt.error.clone(),
        started_at: attempt.started_at,
        duration_ms: attempt.duration_ms,
    });
    change
}

/// An active run ends `dead_lettered` (`reason`, after `what`) and releases its lease.
fn dead_lettered_run(run: &run::Model, reason: &str, what: &str, now: Millis) -> RunChange {
    RunChange {
        finished: Finished::At(now),
        ended: Some(Ended {
            release: LeaseChange::Release {
                held: Held::of(run),
                at: now,
            },
            history: entry(
                &run.id,
                RunStatus::DeadLettered,
                "dead_lettered",
                format!("{reason}: {what}"),
                now,
            ),
        }),
        ..RunChange::status(&run.id, &ACTIVE_RUNS, RunStatus::DeadLettered, now)
    }
}

fn lapse_entry(run_id: &str, attempts: i32, now: Millis) -> run_history::Model {
    entry(
        run_id,
        RunStatus::Queued,
        "claim_expired",
        format!("claim {attempts} expired without extend, release or finish"),
        now,
    )
}

/// A pull claim given up: pending again at `due_at`, token cleared, the run `queued` again.
fn unclaimed(row: &dispatch::Model, due_at: Millis, now: Millis) -> Change {
    let set = DispatchSet {
        claim_token: Some(None),
        claimed_by: Some(None),
        due_at: Some(due_at),
        ..DispatchSet::at(now)
    };
    let mut change = Change::new(&row.id, Expect::AsRead, set);
    change.run = Some(RunChange::status(
        &row.run_id,
        &[RunStatus::Dispatched],
        RunStatus::Queued,
        now,
    ));
    change
}

/// A pull claim that lapsed (read under lock: pending, with a token, due): pending again now,
/// its token cleared (the next claim gets a new one, and a new fencing token).
pub fn lapsed(row: &dispatch::Model, now: Millis) -> Change {
    let mut change = unclaimed(row, now, now);
    change.history = vec![lapse_entry(&row.run_id, row.attempts, now)];
    change
}

/// A live pull claim the worker gave back: pending again at `due_at` (the claim counts as an
/// attempt).
pub fn released(row: &dispatch::Model, due_at: Millis, now: Millis) -> Change {
    let mut change = unclaimed(row, due_at, now);
    change.history = vec![entry(
        &row.run_id,
        RunStatus::Queued,
        "released",
        format!(
            "claim {} released by the worker; pending again at {}",
            row.attempts,
            crate::millis_rfc3339(due_at)
        ),
        now,
    )];
    change.attempt = Some(dispatch_attempt::Model {
        id: uuid::Uuid::now_v7().to_string(),
        dispatch_id: row.id.clone(),
        run_id: row.run_id.clone(),
        series: row.series,
        attempt: row.attempts,
        target: row.target.clone(),
        result: "released".into(),
        status_code: None,
        response: None,
        error: None,
        started_at: now,
        duration_ms: 0,
    });
    change
}

/// A live pull claim extended until `expires_at`.
pub fn extended(row: &dispatch::Model, expires_at: Millis, now: Millis) -> Change {
    let set = DispatchSet {
        due_at: Some(expires_at),
        ..DispatchSet::at(now)
    };
    Change::new(&row.id, Expect::AsRead, set)
}

/// What a redispatch does.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per redispatch, matched at once and never stored"
)]
pub enum RedispatchStep {
    /// The run is `queued` again, with its lease and the fencing token it carries.
    Queued {
        change: Change,
        run: Box<run::Model>,
    },
    /// Another active run holds the entity.
    EntityLocked { held_by_run_id: String },
}

/// A new attempt series for the dead-lettered `run` (both read under lock), under the same
/// dispatch id, after retaking its entity lease over `stored` with the next fencing token.
pub fn redispatch(
    run: &run::Model,
    dispatch: &dispatch::Model,
    stored: Option<&entity_lock::Model>,
    now: Millis,
) -> RedispatchStep {
    let lease = match entity_lock::Model::retaken(stored, run, now) {
        Ok(lease) => lease,
        Err(held_by_run_id) => return RedispatchStep::EntityLocked { held_by_run_id },
    };
    let token = lease.fencing_token;
    let series = dispatch.series + 1;
    let set = DispatchSet {
        status: Some(DispatchStatus::Pending),
        attempts: Some(Attempts::Reset),
        series: Some(series),
        due_at: Some(now),
        claimed_by: Some(None),
        claim_token: Some(None),
        reason: Some(None),
        ..DispatchSet::at(now)
    };
    let mut change = Change::new(&dispatch.id, Expect::AsRead, set);
    change.run = Some(RunChange {
        finished: Finished::Reopened,
        fencing_token: Some(token),
        ..RunChange::status(&run.id, &[RunStatus::DeadLettered], RunStatus::Queued, now)
    });
    change.lease = Some(LeaseChange::Retaken {
        lease,
        existed: stored.is_some(),
    });
    change.history = vec![entry(
        &run.id,
        RunStatus::Queued,
        "redispatched",
        format!(
            "series {series} of dispatch {} with fencing token {token}",
            dispatch.id
        ),
        now,
    )];
    let mut run = run.clone();
    run.status = RunStatus::Queued;
    run.fencing_token = token;
    run.updated_at = now;
    run.finished_at = None;
    run.end_reason = None;
    RedispatchStep::Queued {
        change,
        run: Box::new(run),
    }
}

#[cfg(test)]
mod tests;
