//! The outbox as a state machine: every transition of a dispatch (claimed, delivered, retry
//! scheduled, dead-lettered, claim lapsed or released, cancelled, redispatched) computed once, as
//! the row changes it makes, with no I/O. The appliers (`super::apply` on a sea-orm
//! transaction, `sqlite::outbox::apply` on the SQLite writer's `rusqlite` one) write a
//! [`Change`] as it says and decide nothing.
//!
//! Invariant: a change applies only while its dispatch row is still as its [`Expect`] says; one
//! that does not apply changes nothing but its attempt row (the attempt was made either way). A
//! run's status changes only from the statuses its [`RunChange`] names, and an ending's lease
//! release and history entry ([`Ended`]) are written only if the run did end there.
//!
//! The row changes are in `change`; the transitions by group in `claims`, `records` (a claimed
//! dispatch's attempts and pull claims) and `redispatch`.

mod change;
mod claims;
mod records;
mod redispatch;

pub use change::{
    ACTIVE_RUNS, Applied, Attempts, Change, DispatchSet, Ended, Expect, Finished, Held,
    LeaseChange, RUN_ENDED, RunChange,
};
pub use claims::{PullStep, PushStep, cancelled, claim_pull, claim_push};
pub use records::{extended, lapsed, recorded, released};
pub use redispatch::{RedispatchStep, redispatch};

#[cfg(test)]
mod tests;
