//! Per-database operations of the intake batch (stored answers, claimed messages, leases, flow gates and counts, coalescing windows, and the decided batch's writes).

/// What each database does its own way in the intake batch (stored answers, claimed messages, leases, flow gates and counts, coalescing windows, and the decided batch's writes).
pub trait IntakeDriver {}
