//! The SQLite driver: every statement that is SQLite's own, grouped by area and table, and
//! the intake writer thread that serialises every write of this process ([`writer`]).

mod checkpoint;
mod intake;
pub use intake::CLAIMED_MESSAGE;
mod ledger;
pub(crate) mod outbox;
mod riders;
mod row_insert;
mod runs;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;

use crate::connect::{Durability, Options};
use crate::outbox::Recorded;

/// The SQLite driver.
#[derive(Debug)]
pub struct Sqlite {
    /// The database file (from the URL), which the writer thread opens itself.
    path: PathBuf,
    durability: Durability,
    riders: Arc<riders::Riders>,
}

impl Sqlite {
    pub(crate) fn new(url: &str, options: &Options) -> Self {
        let path = url
            .parse::<sea_orm::sqlx::sqlite::SqliteConnectOptions>()
            .map(|o| o.get_filename().to_path_buf())
            .unwrap_or_default();
        Self {
            path,
            durability: options.durability,
            riders: Arc::default(),
        }
    }

    fn start_writer(
        &self,
        mut sources: Vec<Box<dyn crate::intake::Batches>>,
    ) -> Result<(), sea_orm::DbErr> {
        let (Some(batches), true) = (sources.pop(), sources.is_empty()) else {
            return Err(sea_orm::DbErr::Custom(
                "SQLite has exactly one intake writer".into(),
            ));
        };
        writer::start(
            self.path.clone(),
            self.durability,
            self.riders.clone(),
            batches,
        )
        .map_err(sea_orm::DbErr::Custom)
    }

    async fn record_riding(&self, attempts: Vec<Recorded>) -> Result<usize, Vec<Recorded>> {
        self.riders.record(attempts).await
    }

    async fn claim_riding(
        &self,
        target: &str,
        owner: &str,
        limit: usize,
        claim_until: crate::Millis,
    ) -> Option<Result<Vec<crate::outbox::ClaimedRun>, String>> {
        self.riders
            .claim(riders::ClaimRequest {
                target: target.to_owned(),
                owner: owner.to_owned(),
                limit,
                claim_until,
            })
            .await
    }
}
