//! What is particular to the embedded SQLite store: its write-ahead log is copied into the
//! database file in the background, while deliveries keep being answered.

use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::json;

use super::harness::{Backend, Daemon, TestDb, config, event, unique};
use super::spine::WORKED_EXAMPLE;

/// The intake writer never checkpoints inside a commit; a thread of its own does. Without it
/// the database file would stay as migrated while the WAL grew without end.
#[tokio::test]
async fn the_wal_reaches_the_database_file_in_the_background() {
    let db = TestDb::create(Backend::Sqlite)
        .await
        .expect("SQLite is embedded");
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    let file = db.dir.path().join("switchyard.db");
    let size = || std::fs::metadata(&file).expect("database file").len();
    let before = size();

    // About 1 MB of payloads, in concurrent batches.
    for round in 0..10 {
        let posts = (0..40).map(|n| {
            let mut body = event("webhook", "ticket.created", "acme", &unique("T"));
            body["payload"] = json!({"description": "x".repeat(2_500)});
            let daemon = &daemon;
            async move { daemon.post_event(&format!("wal-{round}-{n}"), &body).await }
        });
        for (status, answer) in join_all(posts).await {
            assert!(status.is_success(), "{status}: {answer}");
            assert_eq!(answer["outcome"], "routed", "{answer}");
        }
    }

    let deadline = Instant::now() + Duration::from_secs(10);
    while size() < before + 1_000_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        size() >= before + 1_000_000,
        "the database file grew from {before} to only {} bytes: the WAL was not checkpointed",
        size()
    );
    assert_eq!(daemon.intake("limit=1000").await.len(), 400);
}
