//! m0023 moves a delivery's raw bytes into its ledger row. Checked on every database: bytes
//! stored before the migration read back byte for byte after it (and a row without bytes
//! still has none), the old table is gone, and the migration goes down to `raw_deliveries`
//! with the same bytes and up again.

use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, QueryFilter, Statement,
};
use sea_orm_migration::MigratorTrait;
use switchyard_store::entities::{intake, raw_delivery};

use super::harness::{Backend, TestDb};

/// Bytes no text column would keep: NUL, invalid UTF-8, a newline.
const BYTES: [u8; 7] = [0, 159, 146, 150, 255, b'\n', 0];

/// A routed ledger row `id`, received at 1.
fn ledger_row(id: &str) -> intake::Model {
    intake::Model {
        id: id.to_owned(),
        source: "github".into(),
        delivery_id: id.to_owned(),
        scope: String::new(),
        outcome: "routed".into(),
        detail: None,
        channel: Some("github".into()),
        event_type: Some("issues.opened".into()),
        tenant_id: Some("acme".into()),
        target_entity_id: Some("ticket-1".into()),
        payload: Some("{}".into()),
        raw_ref: Some(format!("raw:{id}")),
        run_id: None,
        workflow_id: None,
        held_by_run_id: None,
        message_key: None,
        config_revision: "rev-1".into(),
        received_at: 1,
        decided_at: 1,
        traceparent: None,
        tracestate: None,
        shadow: None,
        replay_id: None,
        replay_of: None,
    }
}

async fn execute(db: &DatabaseConnection, sql: &str) {
    db.execute_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `raw_deliveries`' rows as `(id, content_type, body)`, by id.
async fn old_table(db: &DatabaseConnection) -> Vec<(String, String, Vec<u8>)> {
    db.query_all_raw(Statement::from_string(
        db.get_database_backend(),
        "SELECT id, content_type, body FROM raw_deliveries ORDER BY id",
    ))
    .await
    .expect("read raw_deliveries")
    .iter()
    .map(|row| {
        (
            row.try_get_by_index(0).expect("id"),
            row.try_get_by_index(1).expect("content_type"),
            row.try_get_by_index(2).expect("body"),
        )
    })
    .collect()
}

/// The bytes the store reads for `id`, as `(content_type, body)`.
async fn stored(db: &DatabaseConnection, id: &str) -> Option<(String, Vec<u8>)> {
    raw_delivery::Entity::find_by_id(id)
        .filter(raw_delivery::stored())
        .one(db)
        .await
        .expect("read raw")
        .map(|raw| (raw.content_type, raw.body))
}

#[tokio::test]
async fn raw_bytes_move_into_their_ledger_rows_and_back() {
    let migrations = switchyard_migrations::Migrator::migrations();
    let m0023 = migrations
        .iter()
        .position(|m| m.name() == "m0023_raw_in_ledger")
        .expect("m0023 is a migration");
    let newer = (migrations.len() - m0023) as u32;
    for backend in Backend::ALL {
        let Some(test_db) = TestDb::create(backend).await else {
            continue;
        };
        let db = sea_orm::Database::connect(&test_db.url)
            .await
            .expect("connect");
        switchyard_migrations::Migrator::up(&db, Some(m0023 as u32))
            .await
            .expect("migrate to m0022");
        for id in ["with-bytes", "without-bytes"] {
            intake::Entity::insert(intake::ActiveModel::from(ledger_row(id)))
                .exec_without_returning(&db)
                .await
                .expect("insert ledger row");
        }
        let hex = hex::encode(BYTES);
        let literal = match db.get_database_backend() {
            DbBackend::Postgres => format!("'\\x{hex}'::bytea"),
            _ => format!("X'{hex}'"),
        };
        for id in ["with-bytes", "orphan"] {
            execute(
                &db,
                &format!(
                    "INSERT INTO raw_deliveries (id, source, content_type, body, received_at) \
                     VALUES ('{id}', 'github', 'application/octet-stream', {literal}, 1)"
                ),
            )
            .await;
        }

        switchyard_migrations::Migrator::up(&db, None)
            .await
            .expect("m0023 up");
        let moved = Some(("application/octet-stream".to_owned(), BYTES.to_vec()));
        assert_eq!(stored(&db, "with-bytes").await, moved, "{backend:?}");
        assert_eq!(stored(&db, "without-bytes").await, None, "{backend:?}");
        assert_eq!(
            stored(&db, "orphan").await,
            None,
            "{backend:?}: bytes without a ledger row have nowhere to go"
        );
        let gone = db
            .query_all_raw(Statement::from_string(
                db.get_database_backend(),
                "SELECT id FROM raw_deliveries",
            ))
            .await;
        assert!(gone.is_err(), "{backend:?}: raw_deliveries is still there");

        switchyard_migrations::Migrator::down(&db, Some(newer))
            .await
            .expect("m0023 down");
        assert_eq!(
            old_table(&db).await,
            [(
                "with-bytes".to_owned(),
                "application/octet-stream".to_owned(),
                BYTES.to_vec()
            )],
            "{backend:?}"
        );
        switchyard_migrations::Migrator::up(&db, None)
            .await
            .expect("m0023 up again");
        assert_eq!(stored(&db, "with-bytes").await, moved, "{backend:?}");
        drop(db);
        test_db.drop_database().await;
    }
}
