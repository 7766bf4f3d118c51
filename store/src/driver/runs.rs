//! Per-database operations of the run lifecycle after dispatch (heartbeats, finishes, bounded runs and the deadline timer, durable waits).

/// What each database does its own way in the run lifecycle after dispatch (heartbeats, finishes, bounded runs and the deadline timer, durable waits).
pub trait RunsDriver {}
