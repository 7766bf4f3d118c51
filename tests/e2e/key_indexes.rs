//! m0022 leaves keys most rows lack out of their unique indexes on SQLite and PostgreSQL:
//! `intake_message_key` holds only ledger rows with a message key (mail, Slack) and
//! `dispatches_claim` only claimed dispatches, so a routed webhook or event inserts into
//! neither. Checked here: both are unique and partial, the lookups that need them still read
//! them, and the migration goes down to the old full indexes and up again on every database.

use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, QueryTrait, Statement,
};
use sea_orm_migration::MigratorTrait;
use switchyard_store::entities::dispatch;

use super::harness::Backend;
use super::query_plans::{indexes, migrated, plan};

/// Whether `names` holds `wanted` and not `gone`.
fn has(names: &[String], wanted: &str, gone: &str) -> bool {
    names.iter().any(|n| n == wanted) && !names.iter().any(|n| n == gone)
}

#[tokio::test]
async fn keys_most_rows_lack_stay_out_of_their_unique_indexes() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some((test_db, db)) = migrated(backend).await else {
            continue;
        };
        let kind = db.get_database_backend();
        for index in ["intake_message_key", "dispatches_claim"] {
            let sql = match kind {
                DbBackend::Sqlite => {
                    format!("SELECT sql FROM sqlite_master WHERE name = '{index}'")
                }
                _ => format!("SELECT indexdef FROM pg_indexes WHERE indexname = '{index}'"),
            };
            let rows = db
                .query_all_raw(Statement::from_string(kind, sql))
                .await
                .expect("index definition");
            let definition: String = rows
                .first()
                .unwrap_or_else(|| panic!("{backend:?}: no index {index}"))
                .try_get_by_index(0)
                .expect("definition");
            assert!(
                definition.to_uppercase().contains("UNIQUE")
                    && definition.contains("WHERE")
                    && definition.contains("IS NOT NULL"),
                "{backend:?}: {index} is not unique and partial: {definition}"
            );
        }
        // The intake writer's claim probe (on PostgreSQL the generic-plan test checks it).
        if kind == DbBackend::Sqlite {
            let probe = Statement::from_sql_and_values(
                kind,
                switchyard_store::SQLITE_CLAIMED_MESSAGE,
                ["m-1".into(), "slack".into()],
            );
            let plan = plan(&db, probe).await;
            assert!(
                plan.contains("intake_message_key") && !plan.contains("SCAN intake"),
                "{backend:?}: the claim probe does not read intake_message_key:\n{plan}"
            );
        }
        // A pull worker's claim: its dispatch by token.
        let by_token = dispatch::Entity::find()
            .filter(dispatch::Column::ClaimToken.eq("token-1"))
            .build(kind);
        let plan = plan(&db, by_token).await;
        assert!(
            plan.contains("dispatches_claim")
                && !plan.contains("SCAN dispatches")
                && !plan.contains("Seq Scan"),
            "{backend:?}: a claim's dispatch is not read through dispatches_claim:\n{plan}"
        );
        drop(db);
        test_db.drop_database().await;
    }
}

#[tokio::test]
async fn the_partial_key_indexes_migrate_up_down_and_up_again() {
    let m0022_and_newer = switchyard_migrations::Migrator::migrations()
        .iter()
        .rev()
        .position(|m| m.name() == "m0022_partial_key_indexes")
        .expect("m0022 is a migration") as u32
        + 1;
    for backend in Backend::ALL {
        let Some((test_db, db)) = migrated(backend).await else {
            continue;
        };
        let check = |intake: Vec<String>, dispatches: Vec<String>, after: &str, new: bool| {
            let (key, old_key, claim, old_claim) = if new {
                (
                    "intake_message_key",
                    "intake_message_key_source",
                    "dispatches_claim",
                    "dispatches_claim_token",
                )
            } else {
                (
                    "intake_message_key_source",
                    "intake_message_key",
                    "dispatches_claim_token",
                    "dispatches_claim",
                )
            };
            assert!(
                has(&intake, key, old_key) && has(&dispatches, claim, old_claim),
                "{backend:?} after {after}: intake {intake:?}, dispatches {dispatches:?}"
            );
        };
        check(
            indexes(&db, "intake").await,
            indexes(&db, "dispatches").await,
            "m0022",
            true,
        );
        switchyard_migrations::Migrator::down(&db, Some(m0022_and_newer))
            .await
            .expect("m0022 down");
        check(
            indexes(&db, "intake").await,
            indexes(&db, "dispatches").await,
            "m0022 down",
            false,
        );
        switchyard_migrations::Migrator::up(&db, None)
            .await
            .expect("m0022 up again");
        check(
            indexes(&db, "intake").await,
            indexes(&db, "dispatches").await,
            "m0022 up again",
            true,
        );
        drop(db);
        test_db.drop_database().await;
    }
}
