//! The MySQL and MariaDB driver: every statement that is MySQL's own, grouped by area and table.

mod flow;
mod intake;
mod ledger;
mod outbox;
mod runs;

use crate::connect::Options;

/// The MySQL and MariaDB driver.
#[derive(Debug)]
pub struct MySql {}

impl MySql {
    pub(crate) fn new(_url: &str, _options: &Options) -> Self {
        Self {}
    }
}
