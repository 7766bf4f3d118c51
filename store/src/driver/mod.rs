//! The per-database seam, River's driver shape: what each database does its own way is an
//! operation of one of the traits below, implemented once per database in `sqlite/`,
//! `postgres/` and `mysql/`, each module holding all of that database's SQL, grouped by table.
//! Operations whose one statement serves all three (sea-orm renders each dialect) are written
//! once, in the table modules, and are not here.
//!
//! Invariant: no code outside this crate names a database; a new rule or table is a new named
//! operation (here if a database does it its own way) plus its conformance test in
//! `tests/conformance/`, never a switch on the backend at a call site.

mod intake;
mod ledger;
mod outbox;
mod runs;

use std::sync::Arc;

pub use intake::IntakeDriver;
pub use ledger::LedgerDriver;
pub use outbox::OutboxDriver;
pub use runs::RunsDriver;

use crate::connect::Options;
use crate::handle::Backend;

/// Every per-database operation, by area of the schema.
pub trait Driver:
    IntakeDriver + OutboxDriver + RunsDriver + LedgerDriver + std::fmt::Debug + Send + Sync
{
}

impl<T> Driver for T where
    T: IntakeDriver + OutboxDriver + RunsDriver + LedgerDriver + std::fmt::Debug + Send + Sync
{
}

/// The driver of `backend` for a pool opened at `url` with `options`.
pub(crate) fn for_backend(backend: Backend, url: &str, options: &Options) -> Arc<dyn Driver> {
    match backend {
        Backend::Sqlite => Arc::new(crate::sqlite::Sqlite::new(url, options)),
        Backend::Postgres => Arc::new(crate::postgres::Postgres::new(url, options)),
        Backend::MySql => Arc::new(crate::mysql::MySql::new(url, options)),
    }
}
