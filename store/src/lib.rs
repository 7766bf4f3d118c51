//! `switchyard-store`: every table of the Switchyard schema, and every statement over it, as
//! named operations. Nothing outside this crate (and the frozen migrations) names a database.
//!
//! - [`Store`]: the handle the daemon holds; its methods are the named operations.
//! - [`driver`]: the per-database seam (`sqlite/`, `postgres/`, `mysql/` implement it).
//! - [`entities`]: the row types of every table.
//! - [`connect`]: opening the pool (SQLite's durability pragmas, the servers' timeouts) and
//!   migrating.
//! - [`intake`]: the intake batch's keys, rows and the order of its transaction; the writers.
//! - by table: [`ledger`] (intake rows, raw bytes), [`leases`] (entity leases), [`runs`] and
//!   [`bounded`] (the run lifecycle after routing), [`waits`] (durable waits), [`outbox`],
//!   [`ceilings`] and [`by_key`] (dispatches, attempts, history), [`mailbox`] (cursors, poller
//!   leases), [`revisions`], [`workflows`], [`replays`] (replays, their results, past lock
//!   holders), [`retention`] (deleting past retention).
//! - [`alerts`]: the alert lifecycle, its notification outbox and the reads rules evaluate.
//! - [`write_turn`]: this process's turns at SQLite's one write lock.

pub mod alerts;
pub mod bounded;
pub mod by_key;
pub mod ceilings;
pub mod connect;
pub mod driver;
pub mod entities;
mod failure_streak;
mod handle;
pub mod intake;
pub mod leases;
pub mod ledger;
mod lost_race;
pub mod mailbox;
mod mailbox_start;
pub mod members;
pub mod outbox;
pub mod replays;
pub mod retention;
pub mod revisions;
pub mod runs;
pub mod slack_messages;
pub mod waits;
pub mod workflows;
pub mod write_turn;

mod mysql;
mod postgres;
mod sqlite;

pub use connect::{connect, migrate, ping};
pub use handle::Store;
pub use leases::ACTIVE;
/// The PostgreSQL intake writer's per-key lookup (stored answers, message claims, leases), for
/// the query-plan test that checks its generic plan still probes by key after an index is added.
#[doc(hidden)]
pub use postgres::INTAKE_LOOK_UP;
/// The error every operation returns.
pub use sea_orm::DbErr;
/// The SQLite intake writer's probe for a claimed message, for the query-plan test that checks
/// it reads the partial `intake_message_key`.
#[doc(hidden)]
pub use sqlite::CLAIMED_MESSAGE as SQLITE_CLAIMED_MESSAGE;

/// Milliseconds since the Unix epoch: how every time is stored.
pub type Millis = i64;

/// The current time in stored form.
pub fn now_millis() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// A stored time as RFC 3339 UTC with milliseconds, for messages and history details.
pub fn millis_rfc3339(millis: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| millis.to_string())
}

/// Longest id or key the indexed columns hold (tenant, event type, entity, delivery id, ...).
pub const MAX_KEY_LEN: usize = switchyard_migrations::KEY_LEN as usize;

/// Longest `raw_ref` the ledger holds (`intake.raw_ref` is `VARCHAR(64)` since m0001).
pub const MAX_RAW_REF_LEN: usize = 64;

/// The smallest UUIDv7 string of millisecond `millis` (every bit after the timestamp zero):
/// every id made before `millis` sorts below it, every id made at or after it above.
pub fn cutoff_id(millis: i64) -> String {
    let millis = millis.clamp(0, (1 << 48) - 1) as u64;
    format!(
        "{:08x}-{:04x}-0000-0000-000000000000",
        millis >> 16,
        millis & 0xffff
    )
}
