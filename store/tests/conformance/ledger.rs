//! Conformance of the ledger operations: opening and migrating, the ledger's pages and rows
//! with their tenant filters, raw bytes byte for byte, message claims and the console's counts.

use std::collections::BTreeSet;

use switchyard_store::entities::raw_delivery;
use switchyard_store::entities::run::RunStatus;
use switchyard_store::ledger::Filter;

use crate::fixtures::*;
use crate::harness::{Backend, TestStore};

/// Every backend opens, migrates, answers a ping, and says whether it is the embedded file.
#[tokio::test]
async fn every_backend_opens_migrated_and_answers() {
    for test in TestStore::all().await {
        test.store.ping().await.expect("ping");
        assert_eq!(
            test.store.is_embedded(),
            test.backend == Backend::Sqlite,
            "{:?}",
            test.backend
        );
        // Migrating twice is a no-op.
        test.store.migrate().await.expect("migrate again");
    }
}

fn ids(rows: &[switchyard_store::entities::intake::Model]) -> Vec<&str> {
    rows.iter().map(|r| r.id.as_str()).collect()
}

#[tokio::test]
async fn ledger_pages_are_newest_first_filtered_by_tenant_and_paged_by_cursor() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let rows = [
            ledger_row(
                &id_at(now - 3_000),
                Some("acme"),
                "routed",
                None,
                now - 3_000,
            ),
            ledger_row(
                &id_at(now - 2_000),
                Some("globex"),
                "routed",
                None,
                now - 2_000,
            ),
            ledger_row(
                &id_at(now - 1_000),
                Some("acme"),
                "no_match",
                None,
                now - 1_000,
            ),
            ledger_row(&id_at(now), None, "unauthenticated", None, now),
        ];
        insert_ledger(store, &rows).await;
        let every = store
            .ledger_page(Filter::default(), 10)
            .await
            .expect("page");
        assert_eq!(
            ids(&every),
            [&rows[3].id, &rows[2].id, &rows[1].id, &rows[0].id].map(String::as_str),
            "{backend:?}"
        );
        assert_eq!(every[0], rows[3], "{backend:?}: read back as stored");
        let next = Filter {
            before: Some(rows[2].id.as_str()),
            ..Filter::default()
        };
        assert_eq!(
            ids(&store.ledger_page(next, 1).await.expect("next")),
            [rows[1].id.as_str()]
        );
        let acme = ["acme".to_owned()];
        let of_acme = Filter {
            tenants: Some(&acme),
            ..Filter::default()
        };
        assert_eq!(
            ids(&store.ledger_page(of_acme, 10).await.expect("acme")),
            [rows[2].id.as_str(), rows[0].id.as_str()]
        );
        let routed_in_window = Filter {
            outcome: Some("routed"),
            since: Some(now - 2_500),
            until: Some(now),
            ..Filter::default()
        };
        assert_eq!(
            ids(&store
                .ledger_page(routed_in_window, 10)
                .await
                .expect("window")),
            [rows[1].id.as_str()]
        );
        let none = Filter {
            tenants: Some(&[]),
            ..Filter::default()
        };
        assert!(store.ledger_page(none, 10).await.expect("none").is_empty());

        assert_eq!(
            store
                .ledger_row(&rows[0].id, Some(&acme))
                .await
                .expect("row"),
            Some(rows[0].clone())
        );
        assert_eq!(
            store
                .ledger_row(&rows[1].id, Some(&acme))
                .await
                .expect("row"),
            None
        );
        // A row without a tenant is seen only by a caller limited to none.
        assert_eq!(
            store
                .ledger_row(&rows[3].id, Some(&acme))
                .await
                .expect("row"),
            None
        );
        assert!(
            store
                .ledger_row(&rows[3].id, None)
                .await
                .expect("row")
                .is_some()
        );
    }
}

#[tokio::test]
async fn raw_deliveries_read_back_byte_for_byte_and_a_pruned_one_is_told_apart() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let kept = id_at(now);
        let pruned = id_at(now + 1);
        let mut rows = [
            ledger_row(&kept, Some("acme"), "routed", None, now),
            ledger_row(&pruned, Some("acme"), "routed", None, now + 1),
        ];
        for row in &mut rows {
            row.raw_ref = Some(format!("raw:{}", row.id));
        }
        insert_ledger(store, &rows).await;
        let raw = raw_delivery::Model {
            id: kept.clone(),
            source: "github".into(),
            content_type: "application/octet-stream".into(),
            body: vec![0, 159, 146, 150, 255, b'\n', 0],
            received_at: now,
        };
        write_raw(store, &raw).await;
        assert_eq!(
            store.raw_delivery(&kept).await.expect("raw"),
            Some(raw.clone()),
            "{backend:?}"
        );
        assert_eq!(store.raw_delivery(&pruned).await.expect("raw"), None);
        let found = store
            .raw_deliveries(&[kept.as_str(), pruned.as_str()])
            .await
            .expect("raws");
        assert_eq!(found.len(), 1);
        assert_eq!(found[&kept], raw);
        assert!(
            store.raw_was_pruned(&pruned).await.expect("pruned"),
            "{backend:?}"
        );
        assert!(!store.raw_was_pruned("no-such-row").await.expect("missing"));
        let unstored = id_at(now + 2);
        insert_ledger(
            store,
            &[ledger_row(&unstored, None, "routed", None, now + 2)],
        )
        .await;
        assert!(!store.raw_was_pruned(&unstored).await.expect("never stored"));
    }
}

#[tokio::test]
async fn message_claims_find_the_routed_row_of_each_source_and_key() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let mut claimed = ledger_row(&id_at(now), Some("acme"), "routed", None, now);
        claimed.message_key = Some("C1:1700000000.000100".into());
        let mut elsewhere = ledger_row(&id_at(now + 1), Some("acme"), "routed", None, now + 1);
        elsewhere.source = "slack-other".into();
        elsewhere.message_key = Some("C1:1700000000.000200".into());
        insert_ledger(store, &[claimed.clone(), elsewhere]).await;
        let found = store
            .message_claims(&[
                ("github", "C1:1700000000.000100"),
                ("github", "C1:1700000000.000200"),
                ("github", "C9:none"),
            ])
            .await
            .expect("claims");
        assert_eq!(found.len(), 1, "{backend:?}: {found:?}");
        assert_eq!(
            found[&("github".to_owned(), "C1:1700000000.000100".to_owned())],
            claimed
        );
    }
}

#[tokio::test]
async fn outcome_and_run_status_counts_group_by_workflow_for_the_tenants_asked() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let mut rows = vec![
            ledger_row(
                &id_at(now - 60_000),
                Some("acme"),
                "routed",
                Some("run-old"),
                now - 60_000,
            ),
            ledger_row(&id_at(now), Some("acme"), "routed", Some("run-1"), now),
            ledger_row(
                &id_at(now + 1),
                Some("acme"),
                "routed",
                Some("run-2"),
                now + 1,
            ),
            ledger_row(&id_at(now + 2), Some("acme"), "no_match", None, now + 2),
            ledger_row(
                &id_at(now + 3),
                Some("globex"),
                "routed",
                Some("run-3"),
                now + 3,
            ),
        ];
        rows[4].workflow_id = Some("billing".into());
        insert_ledger(store, &rows).await;
        let acme = ["acme".to_owned()];
        let counts: BTreeSet<_> = store
            .outcome_counts(Some(&acme), now)
            .await
            .expect("counts")
            .into_iter()
            .collect();
        let expected: BTreeSet<_> = [
            (Some(WORKFLOW.to_owned()), "routed".to_owned(), 2),
            (None, "no_match".to_owned(), 1),
        ]
        .into();
        assert_eq!(counts, expected, "{backend:?}");
        assert_eq!(store.outcome_counts(None, now).await.expect("all").len(), 3);
        assert!(
            store
                .outcome_counts(Some(&[]), now)
                .await
                .expect("none")
                .is_empty()
        );

        let all = many(store, 1..4, HOOK, now).await;
        set_run_status(store, &all[0].run.id, RunStatus::Superseded, now).await;
        routed(store, 9, "billing", HOOK, now).await;
        let counts: BTreeSet<_> = store
            .run_status_counts(Some(&acme), now)
            .await
            .expect("run counts")
            .into_iter()
            .collect();
        let expected: BTreeSet<_> = [
            (WORKFLOW.to_owned(), "queued".to_owned(), 2),
            (WORKFLOW.to_owned(), "superseded".to_owned(), 1),
            ("billing".to_owned(), "queued".to_owned(), 1),
        ]
        .into();
        assert_eq!(counts, expected, "{backend:?}");
        let globex = ["globex".to_owned()];
        assert!(
            store
                .run_status_counts(Some(&globex), now)
                .await
                .expect("globex")
                .is_empty()
        );
    }
}

/// A schedule's latest recorded fire is the row with the greatest delivery id of its source,
/// whatever order the rows were written in, never another source's or another scope's.
#[tokio::test]
async fn latest_delivery_is_the_greatest_id_of_its_source_and_empty_scope() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let row = |offset: i64, source: &str, scope: &str, delivery_id: &str| {
            let mut row = ledger_row(&id_at(now + offset), Some("acme"), "routed", None, now);
            row.source = source.into();
            row.scope = scope.into();
            row.delivery_id = delivery_id.into();
            row
        };
        assert_eq!(
            store.latest_delivery("schedule:sweep").await.expect("none"),
            None,
            "{backend:?}"
        );
        let rows = [
            row(0, "schedule:sweep", "", "2027-03-28T01:00:02Z"),
            // Recorded later (a catch-up, another replica), yet an earlier fire.
            row(1, "schedule:sweep", "", "2027-03-28T01:00:01Z"),
            row(2, "schedule:sweep", "", "2027-03-28T01:00:03Z"),
            row(3, "schedule:other", "", "2099-01-01T00:00:00Z"),
            row(4, "schedule:sweep", "acme", "2099-01-01T00:00:00Z"),
        ];
        insert_ledger(store, &rows).await;
        let latest = store
            .latest_delivery("schedule:sweep")
            .await
            .expect("latest")
            .expect("a row");
        assert_eq!(latest, rows[2], "{backend:?}");
        assert_eq!(
            store
                .latest_delivery("schedule:other")
                .await
                .expect("other")
                .map(|r| r.delivery_id),
            Some("2099-01-01T00:00:00Z".into()),
            "{backend:?}"
        );
    }
}

/// Prefix searches on entity and delivery ids find exactly the rows that start with the text:
/// `%` and `_` are literal, a longer id with another prefix is not found, and the tenant
/// filter still holds.
#[tokio::test]
async fn ledger_search_finds_entity_and_delivery_ids_by_prefix() {
    use switchyard_store::ledger::Prefixes;
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let mut rows = Vec::new();
        for (n, (entity, delivery)) in [
            ("TCK-5510", "zd-evt-001"),
            ("TCK-5511", "zd-evt-002"),
            ("TCK-551", "zd-other"),
            ("TCK-56", "zd-evt_3"),
            ("TCK%5", "zd-evt%4"),
        ]
        .into_iter()
        .enumerate()
        {
            let at = now - 10_000 + n as i64 * 1_000;
            let mut row = ledger_row(&id_at(at), Some("acme"), "routed", None, at);
            row.target_entity_id = Some(entity.into());
            row.delivery_id = delivery.into();
            rows.push(row);
        }
        insert_ledger(store, &rows).await;
        let search = |entity: Option<&'static str>, delivery: Option<&'static str>| async move {
            let found = store
                .ledger_search(
                    Filter::default(),
                    Prefixes {
                        target_entity_id: entity,
                        delivery_id: delivery,
                    },
                    50,
                )
                .await
                .expect("search");
            found
                .into_iter()
                .map(|r| r.target_entity_id.unwrap_or_default())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            search(Some("TCK-551"), None).await,
            ["TCK-551", "TCK-5511", "TCK-5510"],
            "{backend:?}"
        );
        assert_eq!(search(Some("TCK-5510"), None).await, ["TCK-5510"]);
        assert_eq!(search(Some("TCK%"), None).await, ["TCK%5"], "{backend:?}");
        assert!(search(Some("TCK-9"), None).await.is_empty());
        assert_eq!(
            search(None, Some("zd-evt_")).await,
            ["TCK-56"],
            "{backend:?}: `_` is literal"
        );
        assert_eq!(
            search(Some("TCK-55"), Some("zd-evt")).await,
            ["TCK-5511", "TCK-5510"]
        );
        let globex = ["globex".to_owned()];
        let hidden = store
            .ledger_search(
                Filter {
                    tenants: Some(&globex),
                    ..Filter::default()
                },
                Prefixes {
                    target_entity_id: Some("TCK"),
                    delivery_id: None,
                },
                50,
            )
            .await
            .expect("search");
        assert!(hidden.is_empty(), "{backend:?}: another tenant's rows");
    }
}

/// The console's chart: rows in the window counted per bucket and outcome (per workflow or
/// source when asked), rows outside the window and of other tenants left out.
#[tokio::test]
async fn ledger_chart_counts_rows_per_bucket_and_outcome() {
    use switchyard_store::ledger::{Bucket, ChartBy};
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let since = now - 180_000;
        let mut rows = Vec::new();
        for (n, (offset, outcome, tenant)) in [
            (-1_000, "routed", "acme"), // before the window
            (0, "routed", "acme"),
            (59_999, "routed", "acme"),
            (60_000, "entity_locked", "acme"),
            (61_000, "routed", "acme"),
            (125_000, "routed", "globex"),
            (179_999, "no_trigger_match", "acme"),
            (180_000, "routed", "acme"), // at `until`: after the window
        ]
        .into_iter()
        .enumerate()
        {
            let at = since + offset;
            let mut row = ledger_row(&id_at(at), Some(tenant), outcome, None, at);
            row.delivery_id = format!("chart-{n}");
            if outcome == "routed" {
                row.workflow_id = Some("triage".into());
            }
            rows.push(row);
        }
        insert_ledger(store, &rows).await;
        let acme = ["acme".to_owned()];
        let mut buckets = store
            .ledger_chart(Some(&acme), ChartBy::Ledger, since, now, 60_000)
            .await
            .expect("chart");
        buckets.sort_by(|a, b| (a.bucket, &a.outcome).cmp(&(b.bucket, &b.outcome)));
        let bar = |bucket: i64, outcome: &str, count: i64| Bucket {
            key: None,
            bucket: since + bucket,
            outcome: outcome.into(),
            count,
        };
        assert_eq!(
            buckets,
            [
                bar(0, "routed", 2),
                bar(60_000, "entity_locked", 1),
                bar(60_000, "routed", 1),
                bar(120_000, "no_trigger_match", 1),
            ],
            "{backend:?}"
        );
        let mut by_workflow = store
            .ledger_chart(None, ChartBy::Workflow, since, now, 60_000)
            .await
            .expect("by workflow");
        by_workflow.retain(|b| b.key.as_deref() == Some("triage"));
        by_workflow.sort_by_key(|b| b.bucket);
        assert_eq!(
            by_workflow
                .iter()
                .map(|b| (b.bucket - since, b.count))
                .collect::<Vec<_>>(),
            [(0, 2), (60_000, 1), (120_000, 1)],
            "{backend:?}"
        );
        let by_source = store
            .ledger_chart(None, ChartBy::Source, since, now, 180_000)
            .await
            .expect("by source");
        let total: i64 = by_source
            .iter()
            .filter(|b| b.key.as_deref() == Some("github"))
            .map(|b| b.count)
            .sum();
        assert_eq!(total, 6, "{backend:?}");
        assert!(
            store
                .ledger_chart(Some(&[]), ChartBy::Ledger, since, now, 60_000)
                .await
                .expect("none")
                .is_empty()
        );
    }
}

/// A delivery's replays: the results of every replay that took it, newest replay first, and
/// none of another delivery's.
#[tokio::test]
async fn replays_of_a_delivery_are_its_results_newest_replay_first() {
    use sea_orm::EntityTrait;
    use switchyard_store::entities::replay_result;
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let (original, other) = (id_at(now - 5_000), id_at(now - 4_000));
        let result = |replay: &str, intake: &str, new: Option<&str>| replay_result::Model {
            id: id_at(now),
            replay_id: replay.into(),
            intake_id: intake.into(),
            source: "github".into(),
            delivery_id: intake.into(),
            tenant_id: Some("acme".into()),
            event_type: Some("issues.opened".into()),
            received_at: now - 5_000,
            original_outcome: "entity_locked".into(),
            original_workflow_id: None,
            replayed_outcome: "routed".into(),
            replayed_workflow_id: None,
            differs: true,
            why: None,
            new_intake_id: new.map(str::to_owned),
            new_run_id: None,
        };
        let (older, newer) = (id_at(now - 2_000), id_at(now - 1_000));
        for row in [
            result(&older, &original, None),
            result(&newer, &original, Some("new-row")),
            result(&newer, &other, Some("other-row")),
        ] {
            replay_result::Entity::insert(replay_result::ActiveModel::from(row))
                .exec_without_returning(store.connection())
                .await
                .expect("insert result");
        }
        let found = store
            .replays_of_delivery(&original, 20)
            .await
            .expect("replays of");
        assert_eq!(
            found
                .iter()
                .map(|r| (r.replay_id.as_str(), r.new_intake_id.as_deref()))
                .collect::<Vec<_>>(),
            [(newer.as_str(), Some("new-row")), (older.as_str(), None)],
            "{backend:?}"
        );
        assert!(
            store
                .replays_of_delivery("nothing", 20)
                .await
                .expect("none")
                .is_empty()
        );
    }
}
