//! Replays: stored deliveries run again from their raw bytes through the same adapters and
//! router, under the revision that decided them (`original`), the one in force (`current`) or
//! a candidate file. Diagnostic by default: the result is a stored report per delivery
//! (`replays`, `replay_results`) and nothing live is written (no ledger row, run, lock or
//! dispatch). A live replay re-admits the deliveries through the normal intake under new
//! delivery ids `replay:<replay id>:<original delivery id>`.
//!
//! `engine` decides in memory (`normalize` re-runs the adapters, the store's `Holders` rebuild
//! past lock state); `runner` drives a replay in the background in bounded batches that yield
//! to live intake; the store keeps replays and their results (`switchyard_store::replays`);
//! `report` summarises how outcomes move (`switchyard check --candidate --against-ledger`).
//!
//! Invariant: a diagnostic replay writes only `replays` and `replay_results`.

pub mod engine;
mod normalize;
pub mod report;
mod reread;
pub mod runner;

use serde::{Deserialize, Serialize};

pub use engine::{Routing, Under};
pub use reread::{Again, Rereader, Stored};
pub use runner::{Replayer, Request};
/// Which stored deliveries a replay takes.
pub use switchyard_store::replays::Filters;

/// `diagnostic` (a report, nothing live) or `live` (re-admitted for real).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Diagnostic,
    Live,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Diagnostic => "diagnostic",
            Mode::Live => "live",
        }
    }

    /// Whether it reads only original deliveries: a live replay never re-admits another
    /// replay's re-admissions.
    pub fn originals_only(self) -> bool {
        self == Mode::Live
    }
}

/// Which revision decides the replayed deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RevisionChoice {
    Original,
    Current,
    Candidate,
}

impl RevisionChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            RevisionChoice::Original => "original",
            RevisionChoice::Current => "current",
            RevisionChoice::Candidate => "candidate",
        }
    }
}

impl std::str::FromStr for RevisionChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "original" => Ok(RevisionChoice::Original),
            "current" => Ok(RevisionChoice::Current),
            "candidate" => Ok(RevisionChoice::Candidate),
            other => Err(format!(
                "unknown revision `{other}` (expected original or current, or give a candidate file)"
            )),
        }
    }
}

/// The delivery id a live replay re-admits a delivery under: never the original's, and the
/// same every time this replay re-admits it (so a rerun is a `duplicate`).
pub fn replay_delivery_id(replay_id: &str, original: &str) -> String {
    format!("replay:{replay_id}:{original}")
}
