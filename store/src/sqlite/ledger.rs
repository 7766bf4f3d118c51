//! Sqlite's own statements for the ledger and the other records (reads of intake rows and raw bytes, revisions, replays, retention).

use super::Sqlite;

impl crate::driver::LedgerDriver for Sqlite {}
