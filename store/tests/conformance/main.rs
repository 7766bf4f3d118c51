//! The conformance suite: every named operation's contract, run against SQLite, PostgreSQL and
//! MariaDB (River's `riverdrivertest`). Every driver passes the same tests; under `CI=true` a
//! missing database server is a failure, never a skip.

#[allow(dead_code)] // Each area uses the parts it needs.
mod fixtures;
#[allow(dead_code)] // Each area uses the parts it needs.
mod harness;

mod alerts;
mod bounded;
mod ceilings;
mod intake;
mod ledger;
mod mailbox;
mod mailbox_start;
mod outbox;
mod retention;
mod revisions;
mod runs;
mod slack_messages;
mod waits;
mod worker_races;
