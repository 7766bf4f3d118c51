//! Conformance of config revisions and the workflows mirror: a new hash closes the revision in
//! force and opens its own, an unchanged one records nothing (also when replicas race), and
//! syncing workflows upserts them idempotently.

use std::time::Duration;

use sea_orm::{EntityTrait, QueryOrder};
use switchyard_core::{Workflow, WorkflowStatus};
use switchyard_store::Store;
use switchyard_store::entities::{config_revision, workflow};
use switchyard_store::revisions::{Part, RevisionContent};

use crate::fixtures::start;
use crate::harness::TestStore;

/// A revision naming the target `target`.
fn content(target: &str) -> RevisionContent {
    RevisionContent {
        workflows: Vec::new(),
        sources: Vec::new(),
        targets: vec![Part {
            kind: "webhook".into(),
            name: target.into(),
            tenants: Vec::new(),
        }],
        principals: Vec::new(),
    }
}

/// Every stored revision, oldest first: `(hash, in force from, until)`.
async fn stored(store: &Store) -> Vec<(String, i64, Option<i64>)> {
    config_revision::Entity::find()
        .order_by_asc(config_revision::Column::Id)
        .all(store.connection())
        .await
        .expect("read revisions")
        .into_iter()
        .map(|r| (r.hash, r.in_force_from, r.in_force_until))
        .collect()
}

#[tokio::test]
async fn a_new_revision_closes_the_one_in_force_and_an_unchanged_one_records_nothing() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        assert!(
            store
                .record_revision("hash-a", &content("a"), now)
                .await
                .expect("a")
        );
        assert!(
            !store
                .record_revision("hash-a", &content("a"), now + 1)
                .await
                .expect("a again"),
            "{backend:?}: an unchanged reload records nothing"
        );
        assert!(
            store
                .record_revision("hash-b", &content("b"), now + 2)
                .await
                .expect("b")
        );
        assert!(
            store
                .record_revision("hash-a", &content("a"), now + 3)
                .await
                .expect("a back")
        );
        let expected = vec![
            ("hash-a".to_owned(), now, Some(now + 2)),
            ("hash-b".to_owned(), now + 2, Some(now + 3)),
            ("hash-a".to_owned(), now + 3, None),
        ];
        assert_eq!(stored(store).await, expected, "{backend:?}");

        let newest = store.revisions(None, 2).await.expect("revisions");
        let hashes: Vec<&str> = newest.iter().map(|r| r.hash.as_str()).collect();
        assert_eq!(hashes, ["hash-a", "hash-b"]);
        assert_eq!(
            newest[1].content,
            content("b"),
            "{backend:?}: content read back"
        );
        let older = store
            .revisions(Some(newest[1].id.as_str()), 10)
            .await
            .expect("older");
        assert_eq!(older.len(), 1);
        assert_eq!(
            (older[0].in_force_from, older[0].in_force_until),
            (now, Some(now + 2))
        );
        let by_id = store
            .revision(&older[0].id)
            .await
            .expect("by id")
            .expect("found");
        assert_eq!(by_id.in_force_from, now);
        // By hash: the last time that file came into force.
        let by_hash = store
            .revision("hash-a")
            .await
            .expect("by hash")
            .expect("found");
        assert_eq!(
            (by_hash.id.as_str(), by_hash.in_force_until),
            (newest[0].id.as_str(), None)
        );
        let last_b = store
            .revision_by_hash("hash-b")
            .await
            .expect("b")
            .expect("found");
        assert_eq!(last_b.content, content("b"));
        assert!(store.revision("hash-none").await.expect("none").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_recording_one_new_revision_at_once_write_it_once() {
    for test in TestStore::all().await {
        let backend = test.backend;
        let now = start();
        let replica = test.replica().await;
        // At first start (nothing stored) and on a reload (a revision in force).
        for (hash, at) in [("hash-a", now), ("hash-b", now + 10)] {
            let said = content(hash);
            let (a, b) = tokio::join!(
                test.store.record_revision(hash, &said, at),
                replica.record_revision(hash, &said, at)
            );
            let (a, b) = (a.expect("a"), b.expect("b"));
            assert!(
                a ^ b,
                "{backend:?}: {hash} written by exactly one ({a}, {b})"
            );
        }
        assert_eq!(
            stored(&test.store).await,
            [
                ("hash-a".to_owned(), now, Some(now + 10)),
                ("hash-b".to_owned(), now + 10, None)
            ],
            "{backend:?}"
        );
    }
}

fn workflow(id: &str, status: WorkflowStatus, ttl_secs: u64) -> Workflow {
    Workflow {
        id: id.into(),
        tenant_id: "acme".into(),
        status,
        lock_ttl: Duration::from_secs(ttl_secs),
        triggers: Vec::new(),
    }
}

/// Every synced workflow, by id.
async fn synced(store: &Store) -> Vec<workflow::Model> {
    workflow::Entity::find()
        .order_by_asc(workflow::Column::Id)
        .all(store.connection())
        .await
        .expect("read workflows")
}

#[tokio::test]
async fn syncing_workflows_upserts_each_and_syncing_the_same_again_changes_nothing() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let first = [
            workflow("billing", WorkflowStatus::Live, 60),
            workflow("triage", WorkflowStatus::Shadow, 900),
        ];
        store
            .sync_workflows("rev-1", &first, now)
            .await
            .expect("sync");
        let rows = synced(store).await;
        let summary: Vec<_> = rows
            .iter()
            .map(|w| {
                (
                    w.id.as_str(),
                    w.status.as_str(),
                    w.lock_ttl_secs,
                    w.config_revision.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("billing", "live", 60, "rev-1"),
                ("triage", "shadow", 900, "rev-1")
            ],
            "{backend:?}"
        );
        assert_eq!(rows[0].triggers, "[]");
        store
            .sync_workflows("rev-1", &first, now)
            .await
            .expect("again");
        assert_eq!(synced(store).await, rows, "{backend:?}: idempotent");
        store
            .sync_workflows("rev-2", &[], now + 1)
            .await
            .expect("nothing");
        assert_eq!(synced(store).await, rows);

        // A new revision changes triage and drops billing, which keeps its last row.
        let second = [workflow("triage", WorkflowStatus::Live, 120)];
        store
            .sync_workflows("rev-2", &second, now + 2)
            .await
            .expect("rev-2");
        let after = synced(store).await;
        assert_eq!(
            after[0], rows[0],
            "{backend:?}: a removed workflow keeps its row"
        );
        assert_eq!(
            (
                after[1].status.as_str(),
                after[1].lock_ttl_secs,
                after[1].config_revision.as_str(),
                after[1].synced_at
            ),
            ("live", 120, "rev-2", now + 2)
        );
        assert_eq!(after.len(), 2);
    }
}
