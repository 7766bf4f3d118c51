//! Per-database operations of the ledger and the other records (reads of intake rows and raw bytes, revisions, replays, retention).

use sea_orm::{DatabaseConnection, DbErr};

/// What each database does its own way in the ledger and the other records (reads of intake rows and raw bytes, revisions, replays, retention).
#[async_trait::async_trait]
pub trait LedgerDriver {
    /// Readies the database for retention to give freed space back to the file system, before
    /// any other connection of this process is open (SQLite: `auto_vacuum = INCREMENTAL`,
    /// rewriting an older file once). Nothing to do on a server.
    async fn prepare_space(&self, db: &DatabaseConnection) -> Result<(), DbErr>;

    /// One short step of giving the space retention freed back to the file system; whether
    /// freed space remains (a server manages its own: never).
    async fn give_back_space(&self, db: &DatabaseConnection) -> Result<bool, DbErr>;
}
