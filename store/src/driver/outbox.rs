//! Per-database operations of the outbox (claiming due dispatches, recording attempts, keep-alive of waiting leases, lapsed claims).

/// What each database does its own way in the outbox (claiming due dispatches, recording attempts, keep-alive of waiting leases, lapsed claims).
pub trait OutboxDriver {}
