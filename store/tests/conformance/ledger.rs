//! Conformance of the ledger operations (intake rows, raw bytes, revisions, replays, retention).

use crate::harness::{Backend, TestStore};

/// Every backend opens, migrates, answers a ping, and says whether it is the embedded file.
#[tokio::test]
async fn every_backend_opens_migrated_and_answers() {
    for test in TestStore::all().await {
        test.store.ping().await.expect("ping");
        assert_eq!(
            test.store.is_embedded(),
            test.backend == Backend::Sqlite,
            "{:?}",
            test.backend
        );
        // Migrating twice is a no-op.
        test.store.migrate().await.expect("migrate again");
    }
}
