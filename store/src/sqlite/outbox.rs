//! Sqlite's own statements for the outbox (claiming due dispatches, recording attempts, keep-alive of waiting leases, lapsed claims).

use super::Sqlite;

impl crate::driver::OutboxDriver for Sqlite {}
