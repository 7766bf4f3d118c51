//! Postgres's own statements for the run lifecycle after dispatch (heartbeats, finishes, bounded runs and the deadline timer, durable waits).

use super::Postgres;

impl crate::driver::RunsDriver for Postgres {}
