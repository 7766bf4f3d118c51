//! The PostgreSQL driver: every statement that is PostgreSQL's own, grouped by area and table.
//! Intake writers keep a connection of their own and run each batch as fixed statements over
//! arrays ([`batch`]).

mod batch;
pub use batch::LOOK_UP as INTAKE_LOOK_UP;
mod flow;
mod intake;
mod ledger;
mod outbox;
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
