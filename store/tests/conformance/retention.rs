//! Conformance of retention: a pass deletes only what is past its window (runs in the final
//! status asked, finished before the cutoff, with their rows, their waits' Slack approval
//! messages included; ledger rows no run still needs; raw deliveries), in batches.

use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use switchyard_store::entities::run::RunStatus;
use switchyard_store::entities::{dispatch, raw_delivery, run, run_history, slack_message, wait};
use switchyard_store::retention::Deleted;
use switchyard_store::slack_messages::NewSlackMessage;
use switchyard_store::waits::NewWait;
use switchyard_store::{Millis, Store};

use crate::fixtures::*;
use crate::harness::TestStore;

/// How far back the window reaches.
const WINDOW: i64 = 60_000;

/// Run `n` made at `created` (its id says so), in `status`, finished at `finished`.
async fn aged(
    store: &Store,
    n: usize,
    created: Millis,
    status: RunStatus,
    finished: Millis,
) -> Routed {
    let r = routed_as(store, &id_at(created), n, WORKFLOW, HOOK, created).await;
    set_run_status(store, &r.run.id, status, finished).await;
    r
}

/// How many rows of `E` name `run_id` in `column`.
async fn count<E: EntityTrait>(store: &Store, column: E::Column, run_id: &str) -> u64
where
    E::Model: Sync,
{
    E::find()
        .filter(column.eq(run_id))
        .count(store.connection())
        .await
        .expect("count")
}

/// Whether anything of run `r` is left: `(run, dispatches, history, waits)`.
async fn left_of(store: &Store, r: &Routed) -> (u64, u64, u64, u64) {
    let id = r.run.id.as_str();
    (
        count::<run::Entity>(store, run::Column::Id, id).await,
        count::<dispatch::Entity>(store, dispatch::Column::RunId, id).await,
        count::<run_history::Entity>(store, run_history::Column::RunId, id).await,
        count::<wait::Entity>(store, wait::Column::RunId, id).await,
    )
}

#[tokio::test]
async fn pruning_finished_runs_deletes_only_those_of_the_status_finished_before_the_cutoff() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let cutoff = now - WINDOW;
        let old = cutoff - WINDOW;
        // Run 1 waited (its approval posted to Slack), then completed long ago: its wait, the
        // wait's message and its history go with it.
        let waited = routed_as(store, &id_at(old), 1, WORKFLOW, HOOK, old).await;
        set_run_status(store, &waited.run.id, RunStatus::Dispatched, old).await;
        let new = NewWait {
            fencing_token: 1,
            wait_id: "approve".into(),
            expects: "approval".into(),
            proposal_id: "p".into(),
            proposal_digest: "sha256:00".into(),
            token_hash: "token".into(),
            deadline: old + 100,
            on_timeout: "fail".into(),
            notify: Some(NewSlackMessage {
                source: "ws".into(),
                channel: "C0APPROVALS".into(),
                body: "Approve credit".into(),
                button_value: "{\"token\":\"secret\"}".into(),
            }),
        };
        store
            .open_wait(&waited.run.id, &new, old + 1)
            .await
            .expect("open");
        store
            .finish_run(
                &waited.run.id,
                1,
                RunStatus::Completed,
                &Default::default(),
                old + 2,
            )
            .await
            .expect("finish");
        let completed = aged(store, 2, old + 3, RunStatus::Completed, old + 4).await;
        let recent = aged(store, 3, old + 5, RunStatus::Completed, cutoff + 1).await;
        let active = aged(store, 4, old + 6, RunStatus::Queued, old + 6).await;
        let failed = aged(store, 5, old + 7, RunStatus::Failed, old + 8).await;

        let mut deleted = Deleted::default();
        assert_eq!(
            store
                .prune_finished_runs(RunStatus::Queued, now, 10, &mut deleted)
                .await
                .expect("queued"),
            0,
            "{backend:?}: an active run is never pruned"
        );
        let mut batches = Vec::new();
        loop {
            let selected = store
                .prune_finished_runs(RunStatus::Completed, cutoff, 1, &mut deleted)
                .await
                .expect("prune");
            batches.push(selected);
            if selected == 0 {
                break;
            }
        }
        assert_eq!(batches, [1, 1, 0], "{backend:?}: batches of one");
        assert_eq!(
            deleted,
            Deleted {
                runs: 2,
                dispatches: 2,
                run_history: 2,
                waits: 1,
                slack_messages: 1,
                ..Deleted::default()
            },
            "{backend:?}"
        );
        assert_eq!(left_of(store, &waited).await, (0, 0, 0, 0), "{backend:?}");
        assert_eq!(
            count::<slack_message::Entity>(store, slack_message::Column::RunId, &waited.run.id)
                .await,
            0,
            "{backend:?}: the wait's approval message went with it"
        );
        assert_eq!(left_of(store, &completed).await, (0, 0, 0, 0));
        assert_eq!(
            left_of(store, &recent).await.0,
            1,
            "{backend:?}: inside the window"
        );
        assert_eq!(left_of(store, &active).await.0, 1);
        assert_eq!(
            left_of(store, &failed).await.0,
            1,
            "{backend:?}: another status"
        );
        let entity = lease_of(store, &waited.run).await;
        assert_eq!(
            entity.fencing_token, 1,
            "{backend:?}: entity leases are never deleted"
        );
    }
}

/// Raw bytes for the ledger row `id`, received at `at` (kept in the row since m0023).
async fn raw(store: &Store, id: &str, at: Millis) {
    write_raw(
        store,
        &raw_delivery::Model {
            id: id.to_owned(),
            source: "github".into(),
            content_type: "application/json".into(),
            body: b"{}".to_vec(),
            received_at: at,
        },
    )
    .await;
}

#[tokio::test]
async fn pruning_the_ledger_keeps_rows_a_run_still_needs_and_rows_inside_the_window() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let cutoff = now - WINDOW;
        let old = cutoff - WINDOW;
        let active = aged(store, 1, old, RunStatus::Dispatched, old).await;
        let dead = aged(store, 2, old, RunStatus::DeadLettered, old).await;
        let done = aged(store, 3, old, RunStatus::Completed, old).await;
        let rows = [
            ledger_row(
                &id_at(old + 1),
                Some("acme"),
                "routed",
                Some(&active.run.id),
                old + 1,
            ),
            ledger_row(
                &id_at(old + 2),
                Some("acme"),
                "routed",
                Some(&dead.run.id),
                old + 2,
            ),
            ledger_row(
                &id_at(old + 3),
                Some("acme"),
                "routed",
                Some(&done.run.id),
                old + 3,
            ),
            ledger_row(&id_at(old + 4), Some("acme"), "no_match", None, old + 4),
            ledger_row(
                &id_at(cutoff + 1),
                Some("acme"),
                "no_match",
                None,
                cutoff + 1,
            ),
        ];
        insert_ledger(store, &rows).await;
        let batch = store.prune_ledger(cutoff, 10).await.expect("prune");
        assert_eq!(
            (batch.selected, batch.deleted),
            (2, 2),
            "{backend:?}: {batch:?}"
        );
        let mut left = Vec::new();
        for row in &rows {
            left.push(
                store
                    .ledger_row(&row.id, None)
                    .await
                    .expect("row")
                    .is_some(),
            );
        }
        assert_eq!(left, [true, true, false, false, true], "{backend:?}");
        assert_eq!(
            store
                .prune_ledger(cutoff, 10)
                .await
                .expect("again")
                .selected,
            0
        );

        // The bytes of a kept row older than the window go; the row stays.
        raw(store, &rows[0].id, old + 1).await;
        raw(store, &rows[4].id, cutoff + 1).await;
        let (batch, next) = store.prune_raw("", cutoff, 10).await.expect("prune raw");
        assert_eq!((batch.selected, batch.deleted), (1, 1), "{backend:?}");
        assert_eq!(store.raw_delivery(&rows[0].id).await.expect("raw"), None);
        assert!(
            store
                .ledger_row(&rows[0].id, None)
                .await
                .expect("row")
                .is_some(),
            "{backend:?}: emptying the bytes keeps the ledger row"
        );
        assert!(
            store
                .raw_delivery(&rows[4].id)
                .await
                .expect("raw")
                .is_some()
        );
        // The next pass starts where this one stopped and finds nothing more.
        assert_eq!(next, switchyard_store::cutoff_id(cutoff), "{backend:?}");
        let (again, _) = store.prune_raw(&next, cutoff, 10).await.expect("again");
        assert_eq!(again, Default::default(), "{backend:?}");
    }
}
