//! The transitions of a claimed dispatch: a recorded attempt (delivered, retry, dead letter),
//! and a pull claim that lapsed, was released or extended.

use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::entities::{dispatch_attempt, run_history};
use crate::outbox::{Recorded, Verdict, attempt_words};

use super::change::{
    ACTIVE_RUNS, Change, DispatchSet, Ended, Expect, Finished, Held, LeaseChange, RunChange, entry,
};

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
pub(super) fn dead_lettered_run(
    run: &run::Model,
    reason: &str,
    what: &str,
    now: Millis,
) -> RunChange {
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

pub(super) fn lapse_entry(run_id: &str, attempts: i32, now: Millis) -> run_history::Model {
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
