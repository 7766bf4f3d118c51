//! Sqlite's own statements for the intake batch (stored answers, claimed messages, leases, flow gates and counts, coalescing windows, and the decided batch's writes).

use super::Sqlite;

impl crate::driver::IntakeDriver for Sqlite {}
