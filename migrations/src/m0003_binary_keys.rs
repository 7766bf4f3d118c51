//! Keys compare byte for byte on MySQL/MariaDB too: every table moves to a binary collation
//! without padding, so `abc`, `ABC` and `abc ` are three ids, as on SQLite and PostgreSQL.
//!
//! The tables were created with the database's default collation (`utf8mb4_general_ci` on
//! MariaDB), under which ids differing only in case, accents or trailing spaces collided in the
//! unique keys and were refused forever. SQLite and PostgreSQL already compare bytes; there this
//! migration does nothing.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DatabaseBackend, Statement};

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0003_binary_keys"
    }
}

/// Every table of m0001 and m0002.
const TABLES: [&str; 10] = [
    "workflows",
    "intake",
    "raw_deliveries",
    "runs",
    "entity_locks",
    "mailbox_cursors",
    "poller_leases",
    "dispatches",
    "dispatch_attempts",
    "run_history",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DatabaseBackend::MySql {
            return Ok(());
        }
        let db = manager.get_connection();
        let version = db
            .query_one_raw(Statement::from_string(
                DatabaseBackend::MySql,
                "SELECT VERSION() AS version",
            ))
            .await?
            .map(|row| row.try_get::<String>("", "version"))
            .transpose()?
            .unwrap_or_default();
        // MariaDB's `_bin` collations pad with spaces; `_nopad_bin` does not. MySQL 8's
        // `utf8mb4_0900_bin` is NO PAD.
        let collation = if version.contains("MariaDB") {
            "utf8mb4_nopad_bin"
        } else {
            "utf8mb4_0900_bin"
        };
        for table in TABLES {
            db.execute_unprepared(&format!(
                "ALTER TABLE `{table}` CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}"
            ))
            .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DatabaseBackend::MySql {
            return Ok(());
        }
        let db = manager.get_connection();
        for table in TABLES {
            db.execute_unprepared(&format!(
                "ALTER TABLE `{table}` CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
            ))
            .await?;
        }
        Ok(())
    }
}
