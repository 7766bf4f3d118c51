//! Conformance of the outbox operations, on every backend: claims (with real concurrency on
//! two stores of one database), records, redispatch and leases, the keep-alive, the reads.

mod claims;
mod leases;
mod lock_order;
mod records;

/// The shared fixtures, under the name the outbox's modules use.
use crate::fixtures;
