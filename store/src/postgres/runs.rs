//! PostgreSQL's own statements for the run lifecycle after dispatch (heartbeats, finishes, bounded runs and the deadline timer, durable waits).

use sea_orm::{AccessMode, IsolationLevel, TransactionOptions};

use super::Postgres;

impl crate::driver::RunsDriver for Postgres {
    /// REPEATABLE READ, read-only: every read sees the snapshot of the first.
    fn snapshot(&self) -> TransactionOptions {
        TransactionOptions {
            isolation_level: Some(IsolationLevel::RepeatableRead),
            access_mode: Some(AccessMode::ReadOnly),
            ..Default::default()
        }
    }
}
