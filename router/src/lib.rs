//! The router: picks at most one live workflow for an event and takes the database-backed lease
//! on its target entity, creating the run. It never sees a payload shape.
//!
//! - [`TriggerIndex`]: the in-memory match on (tenant, channel, event_type), best candidate first.
//! - [`LockBatch`]: entity leases for a batch of events decided inside one transaction.
//! - [`runs`]: the run lifecycle after routing (heartbeat, finish, listing).
//! - [`outbox`]: dispatch claims, attempts, dead letters, redispatch, the lease keep-alive.
//! - [`bounded`]: ending runs past their authority, deadline or budget; usage; the deadline timer.

pub mod bounded;
pub mod by_key;
pub mod ceilings;
pub mod entities;
mod index;
mod lock_batch;
pub mod outbox;
pub mod runs;
pub mod write_turn;

pub use index::{Candidate, Choice, TriggerIndex, Verdict};
pub use lock_batch::{ACTIVE, Decision, LockBatch, LockChanges, lock_leases};

/// Milliseconds since the Unix epoch: how every time is stored.
pub type Millis = i64;

/// The current time in stored form.
pub fn now_millis() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// A stored time as RFC 3339 UTC with milliseconds, for messages and history details.
pub fn millis_rfc3339(millis: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| millis.to_string())
}
