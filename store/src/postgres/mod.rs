//! The PostgreSQL driver: every statement that is PostgreSQL's own, grouped by area and table.

mod intake;
mod ledger;
pub(crate) mod outbox;
mod runs;

use crate::connect::Options;

/// The PostgreSQL driver.
#[derive(Debug)]
pub struct Postgres {}

impl Postgres {
    pub(crate) fn new(_url: &str, _options: &Options) -> Self {
        Self {}
    }
}
