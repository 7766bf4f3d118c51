//! The transitions as values: what each one changes, from what, for a given row.

use super::*;
use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::entities::{entity_lock, run_history};
use crate::outbox::{ClaimedRun, PULL_CLAIMANT, PullTarget, Recorded, Verdict};

const NOW: Millis = 1_700_000_000_000;

fn run(status: RunStatus) -> run::Model {
    run::Model {
        id: "run-1".into(),
        tenant_id: "acme".into(),
        workflow_id: "triage".into(),
        target_entity_id: "ticket-1".into(),
        intake_id: "intake-1".into(),
        status,
        fencing_token: 7,
        lock_ttl_ms: 60_000,
        created_at: NOW - 1_000,
        updated_at: NOW - 1_000,
        finished_at: None,
        traceparent: None,
        tracestate: None,
        config_revision: None,
        principal_id: None,
        deadline_at: None,
        budgets: None,
        run_usage: None,
        end_reason: None,
        worker_version: None,
        subject_version: None,
    }
}

fn row() -> dispatch::Model {
    dispatch::Model {
        id: "dispatch-1".into(),
        run_id: "run-1".into(),
        tenant_id: "acme".into(),
        workflow_id: "triage".into(),
        target: "worker".into(),
        status: DispatchStatus::Pending,
        attempts: 0,
        series: 1,
        due_at: NOW - 10,
        claimed_by: None,
        claim_token: None,
        reason: None,
        last_error: None,
        created_at: NOW - 1_000,
        updated_at: NOW - 1_000,
        delivered_at: None,
        wait_id: None,
    }
}

fn pull_target(max_claims: i32) -> PullTarget {
    PullTarget {
        name: "worker".into(),
        claim_ttl_ms: 30_000,
        max_claims,
    }
}

/// An attempt of claim 2 of series 1 by `replica-a`.
fn attempt(verdict: Verdict) -> Recorded {
    let mut dispatch = row();
    dispatch.attempts = 2;
    dispatch.claimed_by = Some("replica-a".into());
    Recorded {
        claimed: ClaimedRun {
            dispatch,
            run: run(RunStatus::Queued),
            lease_expires_at: NOW + 60_000,
        },
        owner: "replica-a".into(),
        verdict,
        result: "retry".into(),
        status_code: Some(503),
        response: None,
        error: Some("unavailable".into()),
        started_at: NOW - 5,
        duration_ms: 5,
    }
}

fn causes(history: &[run_history::Model]) -> Vec<(&str, RunStatus)> {
    history
        .iter()
        .map(|h| (h.cause.as_str(), h.status))
        .collect()
}

#[test]
fn a_push_claim_takes_one_more_attempt_until_the_claim_lapses() {
    let PushStep::Claimed { change, claimed } = claim_push(
        row(),
        Some(&run(RunStatus::Queued)),
        "replica-a",
        NOW + 30_000,
        NOW,
    ) else {
        panic!("not claimed");
    };
    assert_eq!(change.expect, Expect::AsRead);
    assert_eq!(
        change.set,
        DispatchSet {
            attempts: Some(Attempts::OneMore),
            claimed_by: Some(Some("replica-a".into())),
            due_at: Some(NOW + 30_000),
            ..DispatchSet::at(NOW)
        }
    );
    assert_eq!(
        (change.run, change.lease, change.attempt),
        (None, None, None)
    );
    assert!(change.history.is_empty());
    assert_eq!(claimed.dispatch.attempts, 1);
    assert_eq!(claimed.dispatch.claimed_by.as_deref(), Some("replica-a"));
    assert_eq!(claimed.dispatch.due_at, NOW + 30_000);
    assert_eq!(claimed.run.status, RunStatus::Queued);
}

#[test]
fn a_claim_of_a_run_that_ended_cancels_its_dispatch() {
    for run in [
        Some(run(RunStatus::Completed)),
        Some(run(RunStatus::Expired)),
        None,
    ] {
        let expected = DispatchSet {
            status: Some(DispatchStatus::Cancelled),
            reason: Some(Some("run_ended".into())),
            claim_token: Some(None),
            ..DispatchSet::at(NOW)
        };
        match claim_push(row(), run.as_ref(), "replica-a", NOW + 1, NOW) {
            PushStep::Cancelled(change) => assert_eq!(change.set, expected),
            other => panic!("{run:?}: {other:?}"),
        }
        let step = claim_pull(row(), run.as_ref(), Some(&pull_target(3)), NOW, || {
            panic!("no token for a cancelled claim")
        });
        match step {
            PullStep::Cancelled(change) => assert_eq!(change.set, expected),
            other => panic!("{run:?}: {other:?}"),
        }
    }
}

#[test]
fn a_first_pull_claim_dispatches_the_run_with_its_token() {
    let PullStep::Claimed { change, claim } = claim_pull(
        row(),
        Some(&run(RunStatus::Queued)),
        Some(&pull_target(3)),
        NOW,
        || "token-1".into(),
    ) else {
        panic!("not claimed");
    };
    assert_eq!(
        change.set,
        DispatchSet {
            attempts: Some(Attempts::OneMore),
            claimed_by: Some(Some(PULL_CLAIMANT.into())),
            claim_token: Some(Some("token-1".into())),
            due_at: Some(NOW + 30_000),
            ..DispatchSet::at(NOW)
        }
    );
    let run_change = change.run.expect("run change");
    assert_eq!(run_change.from, &[RunStatus::Queued]);
    assert_eq!(run_change.to, RunStatus::Dispatched);
    assert_eq!(
        change.lease, None,
        "the first claim keeps the fencing token"
    );
    assert_eq!(
        causes(&change.history),
        [("claimed", RunStatus::Dispatched)]
    );
    assert_eq!(
        (claim.token.as_str(), claim.expires_at),
        ("token-1", NOW + 30_000)
    );
    assert_eq!(claim.claimed.run.status, RunStatus::Dispatched);
    assert_eq!(claim.claimed.dispatch.attempts, 1);
}

#[test]
fn a_pull_claim_after_a_lapse_is_recorded_and_moves_the_fencing_token() {
    let mut lapsed = row();
    lapsed.attempts = 1;
    lapsed.claimed_by = Some(PULL_CLAIMANT.into());
    lapsed.claim_token = Some("token-1".into());
    let PullStep::Claimed { change, claim } = claim_pull(
        lapsed,
        Some(&run(RunStatus::Dispatched)),
        Some(&pull_target(3)),
        NOW,
        || "token-2".into(),
    ) else {
        panic!("not claimed");
    };
    assert_eq!(change.run, None, "already dispatched");
    assert_eq!(
        change.lease,
        Some(LeaseChange::NextToken {
            held: Held::of(&run(RunStatus::Dispatched)),
            at: NOW
        })
    );
    assert_eq!(
        causes(&change.history),
        [
            ("claim_expired", RunStatus::Queued),
            ("claimed", RunStatus::Dispatched)
        ]
    );
    assert!(
        change.history[1]
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("claim 2 of series 1") && d.ends_with("lapsed)"))
    );
    assert_eq!(claim.token, "token-2");
    assert_eq!(
        claim.claimed.dispatch.claim_token.as_deref(),
        Some("token-2")
    );
}

#[test]
fn a_pull_claim_past_max_claims_dead_letters_the_run() {
    let mut lapsed = row();
    lapsed.attempts = 3;
    lapsed.claim_token = Some("token-3".into());
    let PullStep::DeadLettered(change) = claim_pull(
        lapsed,
        Some(&run(RunStatus::Dispatched)),
        Some(&pull_target(3)),
        NOW,
        || panic!("no token for a dead letter"),
    ) else {
        panic!("not dead-lettered");
    };
    assert_eq!(
        change.set,
        DispatchSet {
            status: Some(DispatchStatus::DeadLettered),
            reason: Some(Some("max_attempts".into())),
            claim_token: Some(None),
            claimed_by: Some(None),
            ..DispatchSet::at(NOW)
        }
    );
    assert_eq!(
        causes(&change.history),
        [("claim_expired", RunStatus::Queued)]
    );
    let ended = change.run.expect("run change");
    assert_eq!(
        (ended.from, ended.to),
        (&ACTIVE_RUNS[..], RunStatus::DeadLettered)
    );
    assert_eq!(ended.finished, Finished::At(NOW));
    let ending = ended.ended.expect("ending");
    assert_eq!(
        ending.history.detail.as_deref(),
        Some("max_attempts: claimed 3 times without finishing")
    );
}

#[test]
fn a_row_of_another_target_is_left_alone() {
    let step = claim_pull(row(), Some(&run(RunStatus::Queued)), None, NOW, || {
        panic!("no token")
    });
    assert!(matches!(step, PullStep::Skipped));
}

#[test]
fn a_record_applies_only_while_its_claim_is_the_callers() {
    let change = recorded(&attempt(Verdict::Delivered), NOW);
    let expect = Expect::Claim {
        owner: "replica-a".into(),
        attempts: 2,
        series: 1,
    };
    assert_eq!(change.expect, expect);
    let mut held = row();
    held.attempts = 2;
    held.claimed_by = Some("replica-a".into());
    assert!(expect.holds(&held));
    type Edit = fn(&mut dispatch::Model);
    let taken: [(&str, Edit); 4] = [
        ("claimed by another", |d| {
            d.claimed_by = Some("replica-b".into())
        }),
        ("claimed again", |d| d.attempts = 3),
        ("redispatched", |d| d.series = 2),
        ("dead-lettered", |d| d.status = DispatchStatus::DeadLettered),
    ];
    for (what, edit) in taken {
        let mut row = held.clone();
        edit(&mut row);
        assert!(!expect.holds(&row), "{what}");
    }
    assert!(Expect::AsRead.holds(&row()));
}

#[test]
fn a_delivery_dispatches_the_run() {
    let change = recorded(&attempt(Verdict::Delivered), NOW);
    assert_eq!(
        change.set,
        DispatchSet {
            status: Some(DispatchStatus::Delivered),
            claimed_by: Some(None),
            delivered_at: Some(NOW),
            ..DispatchSet::at(NOW)
        }
    );
    let run_change = change.run.expect("run change");
    assert_eq!(
        (run_change.from, run_change.to),
        (&[RunStatus::Queued][..], RunStatus::Dispatched)
    );
    assert_eq!(run_change.ended, None);
    assert_eq!(
        causes(&change.history),
        [("delivered", RunStatus::Dispatched)]
    );
    assert_eq!(
        change.history[0].detail.as_deref(),
        Some("attempt 2 of series 1: retry (HTTP 503): unavailable")
    );
    let row = change.attempt.expect("attempt row");
    assert_eq!(
        (row.attempt, row.series, row.status_code),
        (2, 1, Some(503))
    );
}

#[test]
fn a_retry_gives_the_claim_up_until_next_due() {
    let change = recorded(
        &attempt(Verdict::Retry {
            next_due: NOW + 5_000,
        }),
        NOW,
    );
    assert_eq!(
        change.set,
        DispatchSet {
            claimed_by: Some(None),
            last_error: Some("attempt 2 of series 1: retry (HTTP 503): unavailable".into()),
            due_at: Some(NOW + 5_000),
            ..DispatchSet::at(NOW)
        }
    );
    assert_eq!(change.run, None);
    assert_eq!(
        causes(&change.history),
        [("attempt_failed", RunStatus::Queued)]
    );
    assert!(
        change.history[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("; next attempt at 2023-11-14T22:13:25.000Z"))
    );
    assert!(change.attempt.is_some());
}

#[test]
fn a_dead_letter_ends_the_run_and_releases_its_lease() {
    let change = recorded(
        &attempt(Verdict::DeadLetter {
            reason: "rejected_4xx",
        }),
        NOW,
    );
    assert_eq!(change.set.status, Some(DispatchStatus::DeadLettered));
    assert_eq!(change.set.reason, Some(Some("rejected_4xx".into())));
    assert_eq!(change.set.claimed_by, Some(None));
    assert!(
        change.history.is_empty(),
        "written only if the run ends here"
    );
    let ended = change.run.expect("run change");
    assert_eq!(ended.from, &ACTIVE_RUNS);
    let ending = ended.ended.expect("ending");
    assert_eq!(
        ending.release,
        LeaseChange::Release {
            held: Held::of(&run(RunStatus::Queued)),
            at: NOW
        }
    );
    assert_eq!(ending.history.status, RunStatus::DeadLettered);
    assert!(
        ending
            .history
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("rejected_4xx: attempt 2"))
    );
}

#[test]
fn a_lapsed_or_released_claim_is_pending_again_without_its_token() {
    let mut claimed = row();
    claimed.attempts = 1;
    claimed.claimed_by = Some(PULL_CLAIMANT.into());
    claimed.claim_token = Some("token-1".into());
    let unclaimed = |due_at| DispatchSet {
        claim_token: Some(None),
        claimed_by: Some(None),
        due_at: Some(due_at),
        ..DispatchSet::at(NOW)
    };
    let change = lapsed(&claimed, NOW);
    assert_eq!(change.set, unclaimed(NOW));
    let run_change = change.run.expect("run change");
    assert_eq!(
        (run_change.from, run_change.to),
        (&[RunStatus::Dispatched][..], RunStatus::Queued)
    );
    assert_eq!(
        causes(&change.history),
        [("claim_expired", RunStatus::Queued)]
    );
    assert_eq!(change.attempt, None);

    let change = released(&claimed, NOW + 2_000, NOW);
    assert_eq!(change.set, unclaimed(NOW + 2_000));
    assert_eq!(causes(&change.history), [("released", RunStatus::Queued)]);
    let row = change.attempt.expect("attempt row");
    assert_eq!(
        (row.result.as_str(), row.attempt, row.duration_ms),
        ("released", 1, 0)
    );

    let change = extended(&claimed, NOW + 9_000, NOW);
    assert_eq!(
        change.set,
        DispatchSet {
            due_at: Some(NOW + 9_000),
            ..DispatchSet::at(NOW)
        }
    );
}

#[test]
fn a_takeover_cancels_with_its_reason() {
    let change = cancelled("dispatch-1", "lease_expired", NOW);
    assert_eq!(change.set.status, Some(DispatchStatus::Cancelled));
    assert_eq!(change.set.reason, Some(Some("lease_expired".into())));
    assert_eq!(change.set.claim_token, Some(None));
}

fn lease(run_id: &str, token: i64, expires_at: Millis) -> entity_lock::Model {
    entity_lock::Model {
        tenant_id: "acme".into(),
        target_entity_id: "ticket-1".into(),
        run_id: Some(run_id.into()),
        fencing_token: token,
        expires_at,
        updated_at: NOW - 1_000,
    }
}

#[test]
fn a_redispatch_retakes_the_lease_and_starts_a_new_series() {
    let mut dead = run(RunStatus::DeadLettered);
    dead.finished_at = Some(NOW - 10);
    dead.end_reason = Some("rejected_4xx".into());
    let mut dispatch = row();
    dispatch.status = DispatchStatus::DeadLettered;
    dispatch.attempts = 5;
    dispatch.reason = Some("max_attempts".into());
    let released = entity_lock::Model {
        run_id: None,
        ..lease("run-1", 7, NOW - 10)
    };
    let RedispatchStep::Queued { change, run } =
        redispatch(&dead, &dispatch, Some(&released), Some("token:ops"), NOW)
    else {
        panic!("not queued");
    };
    assert_eq!(change.dispatch_id, "dispatch-1");
    assert_eq!(
        change.set,
        DispatchSet {
            status: Some(DispatchStatus::Pending),
            attempts: Some(Attempts::Reset),
            series: Some(2),
            due_at: Some(NOW),
            claimed_by: Some(None),
            claim_token: Some(None),
            reason: Some(None),
            ..DispatchSet::at(NOW)
        }
    );
    let run_change = change.run.expect("run change");
    assert_eq!(run_change.from, &[RunStatus::DeadLettered]);
    assert_eq!(
        (run_change.finished, run_change.fencing_token),
        (Finished::Reopened, Some(8))
    );
    let Some(LeaseChange::Retaken {
        lease: retaken,
        existed,
    }) = change.lease
    else {
        panic!("no lease retaken");
    };
    assert!(existed);
    assert_eq!(
        (retaken.run_id.as_deref(), retaken.fencing_token),
        (Some("run-1"), 8)
    );
    assert_eq!(retaken.expires_at, NOW + 60_000);
    assert_eq!(
        causes(&change.history),
        [("redispatched", RunStatus::Queued)]
    );
    assert_eq!(
        change.history[0].detail.as_deref(),
        Some("series 2 of dispatch dispatch-1 with fencing token 8; by token:ops"),
        "the history names who asked"
    );
    assert_eq!(
        (
            run.status,
            run.fencing_token,
            run.finished_at,
            run.end_reason
        ),
        (RunStatus::Queued, 8, None, None)
    );

    // No lease row yet: created, with the first token.
    let RedispatchStep::Queued { change, .. } = redispatch(&dead, &dispatch, None, None, NOW)
    else {
        panic!("not queued");
    };
    assert!(matches!(
        change.lease,
        Some(LeaseChange::Retaken { ref lease, existed: false }) if lease.fencing_token == 1
    ));

    // Another run holds the entity: refused.
    let other = lease("run-2", 9, NOW + 1);
    assert!(matches!(
        redispatch(&dead, &dispatch, Some(&other), None, NOW),
        RedispatchStep::EntityLocked { held_by_run_id } if held_by_run_id == "run-2"
    ));
    // Its lease ran out: taken over.
    let expired = lease("run-2", 9, NOW);
    assert!(matches!(
        redispatch(&dead, &dispatch, Some(&expired), None, NOW),
        RedispatchStep::Queued { .. }
    ));
}
