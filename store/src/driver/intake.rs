//! Per-database operations of the intake batch: starting the writers that run it, and the
//! outbox work a database's one writer can carry in its own transactions.

use crate::outbox::Recorded;

/// What each database does its own way for intake: its writers (a thread with a connection
/// of its own on SQLite; tasks on the pool elsewhere).
#[async_trait::async_trait]
pub trait IntakeDriver {
    /// Starts one writer per source of batches.
    fn start_intake(
        &self,
        store: &crate::Store,
        sources: Vec<Box<dyn crate::intake::Batches>>,
    ) -> Result<(), sea_orm::DbErr>;

    /// Records attempts in the intake writer's next transaction, where the database has one
    /// writer that carries them (SQLite); gives them back otherwise.
    async fn record_in_intake(&self, attempts: Vec<Recorded>) -> Result<usize, Vec<Recorded>> {
        Err(attempts)
    }

    /// Claims up to `limit` due dispatches of the push target for `owner` in the intake
    /// writer's next transaction, where the database has one writer that carries claims
    /// (SQLite): the dispatches claimed, with their runs. `None` where it has none, or it did not take the
    /// claim in time.
    async fn claim_in_intake(
        &self,
        _target: &str,
        _owner: &str,
        _limit: usize,
        _claim_until: crate::Millis,
    ) -> Option<Result<Vec<crate::outbox::ClaimedRun>, String>> {
        None
    }
}
