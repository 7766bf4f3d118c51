//! Per-database operations of the run lifecycle after dispatch (heartbeats, finishes, bounded runs and the deadline timer, durable waits).

use sea_orm::TransactionOptions;

/// What each database does its own way in the run lifecycle after dispatch (heartbeats, finishes, bounded runs and the deadline timer, durable waits).
pub trait RunsDriver {
    /// How a read of one moment begins (a run with its dispatch, attempts, history, waits and
    /// lease, never torn): its transaction's options.
    fn snapshot(&self) -> TransactionOptions;
}
