//! MySql's own statements for the run lifecycle after dispatch (heartbeats, finishes, bounded runs and the deadline timer, durable waits).

use super::MySql;

impl crate::driver::RunsDriver for MySql {}
