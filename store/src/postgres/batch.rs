//! One batch on PostgreSQL: the pool writer's lookups and writes as two fixed statements over
//! arrays (`UNNEST`), so each is parsed and planned once per connection, not once per batch size.
//!
//! A batch is `BEGIN`, one lookup (stored answers for duplicates and claimed messages, and the
//! row-locked leases), one statement that writes every table through data-modifying `WITH`
//! clauses, and `COMMIT`: four round trips (five when an expired lease is taken over). When
//! another batch is already queued behind it, the `COMMIT` carries the next batch's `BEGIN`
//! in the same message, so a busy writer spends three round trips a batch (see [`Txn`]).
//! Multi-row `VALUES` lists and `IN (...)` lists made PostgreSQL parse and plan a new statement
//! text for almost every batch, which cost it more CPU than the rows themselves.
//!
//! The statements run with their generic plan (`plan_cache_mode = force_generic_plan`):
//! planning them anew for each batch's array sizes took a quarter of PostgreSQL's CPU. A generic
//! plan is made once per connection, with the table statistics of that moment, often an empty
//! table's, so no statement leaves the planner a choice that depends on them: each lookup
//! probes a unique index once per key (`LATERAL ... LIMIT 1`, never turned into a hash join),
//! and every write is an `INSERT` whose conflicts go through a unique index. (Plain joins
//! against `UNNEST` got sequential scans and hash joins, planned on empty tables and kept while
//! the tables grew: 1,546 webhooks/s against 6,184 for the baseline.) The rare expiry of runs
//! whose lease was taken over is its own statement, planned with its values.
//!
//! The pool writer and a batch's steps are in `writer`, the lookup statement in `lookup`, the
//! write statements in `write`.
//!
//! [`Txn`]: writer::Txn

mod lookup;
pub use lookup::LOOK_UP;
mod write;
mod writer;

use sea_orm::DbErr;
use sea_orm::sqlx::{self, PgConnection};

use crate::intake::pool::db_err;

pub(crate) use writer::Writer;

/// Sends `sql` (one or more statements without parameters) in one simple-query message.
async fn simple(conn: &mut PgConnection, sql: &'static str) -> Result<(), DbErr> {
    sqlx::raw_sql(sql).execute(conn).await.map_err(db_err)?;
    Ok(())
}
