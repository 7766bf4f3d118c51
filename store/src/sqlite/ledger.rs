//! SQLite's own statements for the ledger and the other records (reads of intake rows and raw bytes, revisions, replays, retention): the file gives the pages retention freed back.

use sea_orm::sqlx::Row;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};

use super::Sqlite;

/// Pages one `PRAGMA incremental_vacuum` step gives back (1 MiB at SQLite's default page size):
/// each step is one short write transaction. A step moves live pages from the end of the file
/// into free ones, and every moved page is a WAL frame, so the steps are small and paced by the
/// caller: the WAL is checkpointed and starts over between them instead of growing by the whole
/// shrink (measured: a 20 MB shrink in 4 MiB steps 20 ms apart left a 9.4 MB WAL behind).
const VACUUM_PAGES: u32 = 256;

fn custom(what: &str, error: impl std::fmt::Display) -> DbErr {
    DbErr::Custom(format!("{what}: {error}"))
}

#[async_trait::async_trait]
impl crate::driver::LedgerDriver for Sqlite {
    /// Turns on `auto_vacuum = INCREMENTAL`. The mode takes effect only on a new database or
    /// through a `VACUUM`, so an older database is rewritten once here (it needs free disk
    /// space of about its size, and time).
    async fn prepare_space(&self, db: &DatabaseConnection) -> Result<(), DbErr> {
        // Setting the mode and the VACUUM that applies it must run on the same connection.
        let mut conn = db
            .get_sqlite_connection_pool()
            .acquire()
            .await
            .map_err(|e| custom("cannot open a connection to set auto_vacuum", e))?;
        let mode: i64 = sea_orm::sqlx::query("PRAGMA auto_vacuum")
            .fetch_one(&mut *conn)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| custom("cannot read PRAGMA auto_vacuum", e))?;
        if mode == 2 {
            return Ok(());
        }
        tracing::info!(
            auto_vacuum = mode,
            "turning on incremental auto_vacuum: rewriting the SQLite database once (VACUUM)"
        );
        for sql in ["PRAGMA auto_vacuum = INCREMENTAL", "VACUUM"] {
            sea_orm::sqlx::query(sql)
                .execute(&mut *conn)
                .await
                .map_err(|e| custom(&format!("cannot run `{sql}` on the SQLite database"), e))?;
        }
        tracing::info!("the SQLite database now gives space back after retention deletes rows");
        Ok(())
    }

    async fn give_back_space(&self, db: &DatabaseConnection) -> Result<bool, DbErr> {
        let free = db
            .query_one_raw(Statement::from_string(
                DbBackend::Sqlite,
                "PRAGMA freelist_count",
            ))
            .await?
            .map(|row| row.try_get_by_index::<i64>(0))
            .transpose()?
            .unwrap_or(0);
        if free == 0 {
            return Ok(false);
        }
        db.execute_unprepared(&format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"))
            .await?;
        Ok(true)
    }
}
