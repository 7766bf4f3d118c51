//! Per-database operations of the ledger and the other records (reads of intake rows and raw bytes, revisions, replays, retention).

/// What each database does its own way in the ledger and the other records (reads of intake rows and raw bytes, revisions, replays, retention).
pub trait LedgerDriver {}
