//! The claim transitions: a push claim and a pull claim of one due row, and the cancellation of
//! a dispatch whose run ended.

use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::outbox::{ClaimedRun, PULL_CLAIMANT, PullClaim, PullTarget};

use super::change::{
    Attempts, Change, DispatchSet, Expect, Held, LeaseChange, RUN_ENDED, RunChange, entry,
};
use super::records::{dead_lettered_run, lapse_entry};

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
