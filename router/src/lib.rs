//! The router: picks at most one live workflow for an event and decides the lease on its
//! target entity, creating the run. It never sees a payload shape, and never a database: the
//! store reads the lease rows and writes what the router decided.
//!
//! - [`TriggerIndex`]: the in-memory match on (tenant, channel, event_type), best candidate first.
//! - [`LockBatch`]: entity leases for a batch of events decided inside one transaction.

mod index;
mod lock_batch;

pub use index::{Candidate, Choice, TriggerIndex, Verdict};
pub use lock_batch::{Decision, LockBatch};
use switchyard_store::Millis;
