//! Conformance of durable waits: opening one pauses the run and holds its lease, a resume
//! resumes the wait its token names exactly once (however many race), and the timer fires a
//! due wait once, as its `on_timeout` says.

use switchyard_store::entities::dispatch::DispatchStatus;
use switchyard_store::entities::run::RunStatus;
use switchyard_store::entities::wait::{self, WaitStatus};
use switchyard_store::entities::{intake, run};
use switchyard_store::waits::{
    NewWait, OpenError, Resolution, Resume, ResumeKey, ResumeWrite, WaitEnd, resume_dispatch_id,
};
use switchyard_store::{Millis, Store};

use crate::fixtures::*;
use crate::harness::TestStore;

/// How long after opening a wait times out.
const WAIT_MS: i64 = 10_000;

/// The wait `approve` of run `r`, resumed by the token whose hash is `token-<run id>`.
fn new_wait(r: &Routed, on_timeout: &str, now: Millis) -> NewWait {
    NewWait {
        fencing_token: 1,
        wait_id: "approve".into(),
        expects: "approval".into(),
        proposal_id: "proposal-1".into(),
        proposal_digest: "sha256:00".into(),
        token_hash: format!("token-{}", r.run.id),
        deadline: now + WAIT_MS,
        on_timeout: on_timeout.into(),
        notify: None,
    }
}

/// Routes run `n`, dispatched, and opens its wait.
async fn waiting(store: &Store, n: usize, on_timeout: &str, now: Millis) -> (Routed, wait::Model) {
    let r = routed(store, n, WORKFLOW, HOOK, now).await;
    set_run_status(store, &r.run.id, RunStatus::Dispatched, now).await;
    let (wait, _) = store
        .open_wait(&r.run.id, &new_wait(&r, on_timeout, now), now)
        .await
        .expect("open wait");
    (r, wait)
}

async fn waits_of(store: &Store, r: &Routed) -> Vec<wait::Model> {
    store.waits_of_run(&r.run.id).await.expect("waits")
}

/// The resume delivery `delivery` carrying the token whose hash is `token`.
fn key<'a>(token: &'a str, delivery: &'a str) -> ResumeKey<'a> {
    ResumeKey {
        source: "github",
        scope: "",
        delivery_id: delivery,
        token_hash: token,
        tenant_id: "acme",
    }
}

/// The daemon's judgement: resume an open wait of an active run, else record the delivery
/// as `no_wait_match`. Returns the status the wait was seen in.
fn judge(
    delivery: &str,
    now: Millis,
) -> impl Fn(Option<&wait::Model>, Option<&run::Model>) -> (ResumeWrite, Option<WaitStatus>) + Sync
{
    let id = id_at(now);
    let delivery = delivery.to_owned();
    move |wait, run| {
        let open = wait.is_some_and(|w| w.status == WaitStatus::Open)
            && run.is_some_and(|r| r.status.is_active());
        let mut row = ledger_row(
            &id,
            Some("acme"),
            if open { "resumed" } else { "no_wait_match" },
            run.map(|r| r.id.as_str()),
            now,
        );
        row.delivery_id.clone_from(&delivery);
        let resume = open.then(|| Resume {
            decision: "approve".into(),
            actor: Some("alice".into()),
            target: HOOK.into(),
            history_detail: format!("resumed by {delivery}"),
        });
        (
            ResumeWrite {
                resume,
                row,
                raw: None,
            },
            wait.map(|w| w.status),
        )
    }
}

/// Whether a resolution resumed the run, and its ledger row.
fn decided(resolution: Resolution<Option<WaitStatus>>) -> (bool, intake::Model) {
    match resolution {
        Resolution::Decided { row, resumed, .. } => (resumed, row),
        Resolution::Duplicate(row) => panic!("a duplicate of {}", row.id),
    }
}

#[tokio::test]
async fn opening_a_wait_puts_the_run_in_needs_input_and_holds_the_lease_past_the_deadline() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let r = routed(store, 1, WORKFLOW, HOOK, now).await;
        set_run_status(store, &r.run.id, RunStatus::Dispatched, now).await;
        let new = new_wait(&r, "fail", now);
        let (wait, run) = store
            .open_wait(&r.run.id, &new, now + 1)
            .await
            .expect("open");
        assert_eq!(
            waits_of(store, &r).await,
            std::slice::from_ref(&wait),
            "{backend:?}"
        );
        assert_eq!(
            (wait.status, wait.deadline, wait.token_hash.as_str()),
            (WaitStatus::Open, now + WAIT_MS, new.token_hash.as_str())
        );
        assert_eq!(run, run_of(store, &r.run.id).await);
        assert_eq!(run.status, RunStatus::NeedsInput);
        assert_eq!(
            lease_of(store, &r.run).await.expires_at,
            now + WAIT_MS + TTL
        );
        assert_eq!(
            history_of(store, &r.run.id).await,
            causes(&[("wait_opened", RunStatus::NeedsInput)])
        );

        let twice = store.open_wait(&r.run.id, &new, now + 2).await;
        assert!(
            matches!(twice, Err(OpenError::DuplicateWait { .. })),
            "{backend:?}: {twice:?}"
        );
        let stale = NewWait {
            fencing_token: 2,
            wait_id: "other".into(),
            ..new.clone()
        };
        let stale = store.open_wait(&r.run.id, &stale, now + 2).await;
        assert!(
            matches!(stale, Err(OpenError::StaleToken { given: 2, .. })),
            "{stale:?}"
        );
        let queued = routed(store, 2, WORKFLOW, HOOK, now).await;
        let early = store
            .open_wait(&queued.run.id, &new_wait(&queued, "fail", now), now + 2)
            .await;
        assert!(
            matches!(early, Err(OpenError::NotDispatched { .. })),
            "{early:?}"
        );
        assert_eq!(
            waits_of(store, &r).await,
            [wait],
            "{backend:?}: nothing more"
        );
        assert!(waits_of(store, &queued).await.is_empty());
        assert_eq!(history_of(store, &r.run.id).await.len(), 1);
        assert_eq!(run_of(store, &queued.run.id).await, queued.run);
    }
}

#[tokio::test]
async fn a_resume_resumes_only_the_wait_its_token_names_and_a_second_resume_is_refused() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let (one, _) = waiting(store, 1, "fail", now).await;
        let (two, _) = waiting(store, 2, "fail", now).await;
        let token = format!("token-{}", two.run.id);
        let at = now + 100;
        let first = store
            .resume_wait(&key(&token, "delivery-a"), at, judge("delivery-a", at))
            .await
            .expect("resume");
        let (resumed, row) = decided(first);
        assert!(resumed, "{backend:?}");
        let dispatch_id = resume_dispatch_id(&two.run.id, "approve");
        let [wait] = <[wait::Model; 1]>::try_from(waits_of(store, &two).await).expect("one wait");
        assert_eq!(
            (wait.status, wait.decision.as_deref(), wait.actor.as_deref()),
            (WaitStatus::Resumed, Some("approve"), Some("alice"))
        );
        assert_eq!(wait.resumed_by.as_deref(), Some(row.id.as_str()));
        assert_eq!(wait.dispatch_id.as_deref(), Some(dispatch_id.as_str()));
        assert_eq!(wait.ended_at, Some(at));
        let resume = dispatch_of(store, &dispatch_id).await;
        assert_eq!(
            (
                resume.status,
                resume.run_id.as_str(),
                resume.wait_id.as_deref()
            ),
            (
                DispatchStatus::Pending,
                two.run.id.as_str(),
                Some("approve")
            )
        );
        assert_eq!(
            run_of(store, &two.run.id).await.status,
            RunStatus::Dispatched
        );
        assert_eq!(
            store.ledger_row(&row.id, None).await.expect("row"),
            Some(row.clone())
        );
        let resumes = store
            .resumes_of(vec![dispatch_id.clone()])
            .await
            .expect("resumes");
        assert_eq!(resumes[&dispatch_id], (wait.clone(), Some(row.clone())));
        // The other run's wait is untouched.
        assert_eq!(waits_of(store, &one).await[0].status, WaitStatus::Open);
        assert_eq!(
            run_of(store, &one.run.id).await.status,
            RunStatus::NeedsInput
        );

        let copy = store
            .resume_wait(
                &key(&token, "delivery-a"),
                at + 1,
                judge("delivery-a", at + 1),
            )
            .await
            .expect("copy");
        assert!(
            matches!(&copy, Resolution::Duplicate(first) if first.id == row.id),
            "{backend:?}: {copy:?}"
        );
        let second = store
            .resume_wait(
                &key(&token, "delivery-b"),
                at + 2,
                judge("delivery-b", at + 2),
            )
            .await
            .expect("second");
        let Resolution::Decided {
            resumed,
            with,
            row: second_row,
        } = second
        else {
            panic!("{backend:?}: a new delivery is decided");
        };
        assert!(!resumed, "{backend:?}: resumed twice");
        assert_eq!(with, Some(WaitStatus::Resumed), "it saw the wait resumed");
        assert_eq!(second_row.outcome, "no_wait_match");
        assert_eq!(
            waits_of(store, &two).await,
            [wait],
            "{backend:?}: the first resume stands"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_resumes_of_one_wait_racing_resume_it_once() {
    for test in TestStore::all().await {
        let backend = test.backend;
        let now = start();
        let (r, _) = waiting(&test.store, 1, "fail", now).await;
        let token = format!("token-{}", r.run.id);
        let replica = test.replica().await;
        let at = now + 100;
        let (key_a, key_b) = (key(&token, "delivery-a"), key(&token, "delivery-b"));
        let (a, b) = tokio::join!(
            test.store.resume_wait(&key_a, at, judge("delivery-a", at)),
            replica.resume_wait(&key_b, at + 1, judge("delivery-b", at + 1)),
        );
        let (a, b) = (decided(a.expect("a")), decided(b.expect("b")));
        assert!(
            a.0 ^ b.0,
            "{backend:?}: exactly one resumed ({}, {})",
            a.0,
            b.0
        );
        let winner = if a.0 { &a.1 } else { &b.1 };
        let wait = &waits_of(&test.store, &r).await[0];
        assert_eq!(wait.status, WaitStatus::Resumed);
        assert_eq!(
            wait.resumed_by.as_deref(),
            Some(winner.id.as_str()),
            "{backend:?}"
        );
        let resumed: Vec<_> = history_of(&test.store, &r.run.id)
            .await
            .into_iter()
            .filter(|(cause, _)| cause == "resumed")
            .collect();
        assert_eq!(resumed.len(), 1, "{backend:?}: one resume in the history");
        for row in [&a.1, &b.1] {
            assert!(
                test.store
                    .ledger_row(&row.id, None)
                    .await
                    .expect("row")
                    .is_some(),
                "{backend:?}: both deliveries are in the ledger"
            );
        }
    }
}

#[tokio::test]
async fn a_due_wait_on_timeout_fail_expires_and_fails_its_run_once() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let (r, wait) = waiting(store, 1, "fail", now).await;
        let deadline = now + WAIT_MS;
        assert!(
            store
                .due_waits(deadline - 1, 10)
                .await
                .expect("due")
                .is_empty()
        );
        assert_eq!(
            store.due_waits(deadline, 10).await.expect("due"),
            std::slice::from_ref(&wait)
        );
        let fired = store.fire_wait(&wait, HOOK, deadline).await.expect("fire");
        assert_eq!(fired, Some(WaitEnd::Failed), "{backend:?}");
        let row = &waits_of(store, &r).await[0];
        assert_eq!(
            (row.status, row.ended_at),
            (WaitStatus::Expired, Some(deadline))
        );
        let run = run_of(store, &r.run.id).await;
        assert_eq!(
            (run.status, run.finished_at),
            (RunStatus::Failed, Some(deadline))
        );
        let lease = lease_of(store, &r.run).await;
        assert_eq!(lease.run_id, None, "{backend:?}: released");
        assert_eq!(
            dispatch_of(store, &r.dispatch.id).await.status,
            DispatchStatus::Cancelled
        );
        assert_eq!(
            history_of(store, &r.run.id).await,
            causes(&[
                ("wait_opened", RunStatus::NeedsInput),
                ("wait_expired", RunStatus::Failed)
            ])
        );
        assert!(store.due_waits(deadline, 10).await.expect("due").is_empty());
        assert_eq!(
            store
                .fire_wait(&wait, HOOK, deadline + 1)
                .await
                .expect("again"),
            None
        );
        assert_eq!(
            run_of(store, &r.run.id).await,
            run,
            "{backend:?}: fired once"
        );
    }
}

#[tokio::test]
async fn a_due_wait_on_timeout_resume_times_out_and_resumes_its_run() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let (r, wait) = waiting(store, 1, "resume", now).await;
        let deadline = now + WAIT_MS;
        let fired = store.fire_wait(&wait, HOOK, deadline).await.expect("fire");
        assert_eq!(fired, Some(WaitEnd::Resumed), "{backend:?}");
        let dispatch_id = resume_dispatch_id(&r.run.id, "approve");
        let row = &waits_of(store, &r).await[0];
        assert_eq!(
            (
                row.status,
                row.decision.as_deref(),
                row.dispatch_id.as_deref()
            ),
            (
                WaitStatus::TimedOut,
                Some("timeout"),
                Some(dispatch_id.as_str())
            )
        );
        assert_eq!(
            dispatch_of(store, &dispatch_id).await.status,
            DispatchStatus::Pending
        );
        assert_eq!(run_of(store, &r.run.id).await.status, RunStatus::Dispatched);
        let lease = lease_of(store, &r.run).await;
        assert_eq!(lease.run_id.as_deref(), Some(r.run.id.as_str()));
        assert!(lease.expires_at >= deadline + TTL, "{backend:?}: renewed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_timers_firing_one_wait_fire_it_once() {
    for test in TestStore::all().await {
        let backend = test.backend;
        let now = start();
        let (r, wait) = waiting(&test.store, 1, "resume", now).await;
        let replica = test.replica().await;
        let at = now + WAIT_MS;
        let (a, b) = tokio::join!(
            test.store.fire_wait(&wait, HOOK, at),
            replica.fire_wait(&wait, HOOK, at)
        );
        let (a, b) = (a.expect("a"), b.expect("b"));
        assert!(
            matches!(
                (a, b),
                (Some(WaitEnd::Resumed), None) | (None, Some(WaitEnd::Resumed))
            ),
            "{backend:?}: {a:?} / {b:?}"
        );
        let resumed = history_of(&test.store, &r.run.id)
            .await
            .into_iter()
            .filter(|(cause, _)| cause == "resumed")
            .count();
        assert_eq!(resumed, 1, "{backend:?}");
    }
}

#[tokio::test]
async fn a_finish_cancels_the_runs_open_waits_so_their_timers_never_fire() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let (r, wait) = waiting(store, 1, "fail", now).await;
        store
            .finish_run(
                &r.run.id,
                1,
                RunStatus::Completed,
                &Default::default(),
                now + 5,
            )
            .await
            .expect("finish");
        let row = &waits_of(store, &r).await[0];
        assert_eq!(
            (row.status, row.ended_at),
            (WaitStatus::Cancelled, Some(now + 5))
        );
        assert!(
            store
                .due_waits(now + WAIT_MS, 10)
                .await
                .expect("due")
                .is_empty()
        );
        assert_eq!(
            store
                .fire_wait(&wait, HOOK, now + WAIT_MS)
                .await
                .expect("fire"),
            None,
            "{backend:?}"
        );
        assert_eq!(run_of(store, &r.run.id).await.status, RunStatus::Completed);
    }
}
