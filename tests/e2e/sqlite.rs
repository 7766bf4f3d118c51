//! What is particular to the embedded SQLite store: its write-ahead log is copied into the
//! database file in the background, while deliveries keep being answered.

use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::json;

use super::harness::{Backend, Daemon, TestDb, config, event, unique};
use super::spine::WORKED_EXAMPLE;

async fn daemon_on_sqlite() -> (TestDb, Daemon) {
    let db = TestDb::create(Backend::Sqlite)
        .await
        .expect("SQLite is embedded");
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    (db, daemon)
}

/// The intake writer never checkpoints inside a commit; a thread of its own does. Without it
/// the database file would stay as migrated while the WAL grew without end.
#[tokio::test]
async fn the_wal_reaches_the_database_file_in_the_background() {
    let (db, daemon) = daemon_on_sqlite().await;
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

/// Under load that never pauses, the write-ahead log still starts over after each checkpoint:
/// the writer copies the last frames itself between two batches. Without that, every commit
/// would append to the WAL for as long as the load lasts.
#[tokio::test]
async fn the_wal_starts_over_under_sustained_load() {
    let (db, daemon) = daemon_on_sqlite().await;
    let size = |name: &str| {
        std::fs::metadata(db.dir.path().join(name))
            .map(|m| m.len())
            .unwrap_or(0)
    };

    // 32 clients, each posting its next event as soon as it is answered, for 3 seconds.
    let until = Instant::now() + Duration::from_secs(3);
    let clients = (0..32).map(|client| {
        let daemon = &daemon;
        async move {
            let mut sent = 0_u32;
            while Instant::now() < until {
                let mut body = event("webhook", "ticket.created", "acme", &unique("T"));
                body["payload"] = json!({"description": "x".repeat(500)});
                let (status, answer) = daemon
                    .post_event(&format!("load-{client}-{sent}"), &body)
                    .await;
                assert!(status.is_success(), "{status}: {answer}");
                sent += 1;
            }
            sent
        }
    });
    let sent: u32 = join_all(clients).await.into_iter().sum();

    let (wal, database) = (size("switchyard.db-wal"), size("switchyard.db"));
    assert!(
        wal < database,
        "after {sent} deliveries the WAL is {wal} bytes, the database {database}: the WAL kept \
         growing instead of starting over"
    );
}
