//! Postgres's own statements for the outbox (claiming due dispatches, recording attempts, keep-alive of waiting leases, lapsed claims).

use super::Postgres;

impl crate::driver::OutboxDriver for Postgres {}
