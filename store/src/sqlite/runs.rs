//! SQLite's own statements for the run lifecycle after dispatch (heartbeats, finishes, bounded runs and the deadline timer, durable waits).

use sea_orm::TransactionOptions;

use super::Sqlite;

impl crate::driver::RunsDriver for Sqlite {
    /// A deferred transaction reads one snapshot from its first read (WAL).
    fn snapshot(&self) -> TransactionOptions {
        TransactionOptions::default()
    }
}
