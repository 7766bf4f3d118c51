//! MySQL and MariaDB's own statements for the ledger and the other records (reads of intake rows and raw bytes, revisions, replays, retention): none yet; the server manages its own space.

use sea_orm::{DatabaseConnection, DbErr};

use super::MySql;

#[async_trait::async_trait]
impl crate::driver::LedgerDriver for MySql {
    async fn prepare_space(&self, _db: &DatabaseConnection) -> Result<(), DbErr> {
        Ok(())
    }

    async fn give_back_space(&self, _db: &DatabaseConnection) -> Result<bool, DbErr> {
        Ok(false)
    }
}
