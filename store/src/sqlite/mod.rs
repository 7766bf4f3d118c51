//! The SQLite driver: every statement that is SQLite's own, grouped by area and table.

mod intake;
mod ledger;
pub(crate) mod outbox;
mod runs;

use crate::connect::Options;

/// The SQLite driver.
#[derive(Debug)]
pub struct Sqlite {}

impl Sqlite {
    pub(crate) fn new(_url: &str, _options: &Options) -> Self {
        Self {}
    }
}
