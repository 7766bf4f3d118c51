//! Conformance of mailbox starts and rotated refresh tokens: a start is written only with the
//! mailbox's first cursor (a second start, or a start over an existing cursor, changes
//! nothing), a skip only moves a cursor forward under its UIDVALIDITY, and a stored refresh
//! token is answered only for the configured token it grew from, the newest one winning.

use switchyard_store::entities::{mailbox_cursor, mailbox_start};

use crate::fixtures::start;
use crate::harness::TestStore;

const SOURCE: &str = "support-mail";

/// A start at a fixed instant (`started_at` is also the first cursor's `updated_at`).
fn point(first_uid: i64, left_behind: i64) -> mailbox_start::Model {
    mailbox_start::Model {
        source: SOURCE.into(),
        mailbox: "INBOX".into(),
        start_from: "now".into(),
        uidvalidity: 4_294_967_295,
        first_uid,
        left_behind,
        started_at: AT,
    }
}

const AT: i64 = 1_796_000_000_000;

#[tokio::test]
async fn a_start_is_written_once_with_the_first_cursor() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        assert_eq!(
            store.mailbox_start(SOURCE, "INBOX").await.expect("store"),
            None
        );
        assert!(
            store.start_mailbox(point(31, 30)).await.expect("store"),
            "{backend:?}"
        );
        assert_eq!(
            store.mailbox_cursor(SOURCE, "INBOX").await.expect("store"),
            Some(mailbox_cursor::Model {
                source: SOURCE.into(),
                mailbox: "INBOX".into(),
                uidvalidity: 4_294_967_295,
                last_uid: 30,
                updated_at: AT,
            }),
            "{backend:?}"
        );
        assert_eq!(
            store.mailbox_start(SOURCE, "INBOX").await.expect("store"),
            Some(point(31, 30))
        );
        // A second start (another replica, a restart) changes nothing.
        assert!(
            !store.start_mailbox(point(99, 98)).await.expect("store"),
            "{backend:?}"
        );
        assert_eq!(
            store.mailbox_start(SOURCE, "INBOX").await.expect("store"),
            Some(point(31, 30))
        );
        assert_eq!(
            store
                .mailbox_cursor(SOURCE, "INBOX")
                .await
                .expect("store")
                .map(|c| c.last_uid),
            Some(30)
        );
        // `beginning` puts the cursor before UID 1.
        let mut beginning = point(1, 0);
        beginning.mailbox = "Archive".into();
        beginning.start_from = "beginning".into();
        assert!(store.start_mailbox(beginning).await.expect("store"));
        assert_eq!(
            store
                .mailbox_cursor(SOURCE, "Archive")
                .await
                .expect("store")
                .map(|c| c.last_uid),
            Some(0)
        );
    }
}

#[tokio::test]
async fn a_skip_moves_a_cursor_only_forward_and_only_under_its_uidvalidity() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        assert!(store.start_mailbox(point(11, 0)).await.expect("store"));
        let last = || async {
            store
                .mailbox_cursor(SOURCE, "INBOX")
                .await
                .expect("store")
                .map(|c| c.last_uid)
        };
        let now = start() + 1;
        assert!(
            store
                .skip_mailbox_cursor(SOURCE, "INBOX", 4_294_967_295, 20, now)
                .await
                .expect("store"),
            "{backend:?}"
        );
        assert_eq!(last().await, Some(20));
        assert!(
            !store
                .skip_mailbox_cursor(SOURCE, "INBOX", 4_294_967_295, 15, now)
                .await
                .expect("store")
        );
        assert!(
            !store
                .skip_mailbox_cursor(SOURCE, "INBOX", 7, 50, now)
                .await
                .expect("store")
        );
        assert!(
            !store
                .skip_mailbox_cursor("other", "INBOX", 4_294_967_295, 50, now)
                .await
                .expect("store")
        );
        assert_eq!(last().await, Some(20), "{backend:?}");
    }
}

#[tokio::test]
async fn a_rotated_refresh_token_is_kept_per_source_for_the_seed_it_grew_from() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        assert_eq!(
            store
                .mailbox_refresh_token(SOURCE, "seed-a")
                .await
                .expect("store"),
            None
        );
        store
            .store_mailbox_refresh_token(SOURCE, "seed-a", "rt-2", now)
            .await
            .expect("store");
        store
            .store_mailbox_refresh_token(SOURCE, "seed-a", "rt-3", now + 1)
            .await
            .expect("store");
        assert_eq!(
            store
                .mailbox_refresh_token(SOURCE, "seed-a")
                .await
                .expect("store")
                .as_deref(),
            Some("rt-3"),
            "{backend:?}"
        );
        // A newly configured token (another seed) does not get the old chain's token.
        assert_eq!(
            store
                .mailbox_refresh_token(SOURCE, "seed-b")
                .await
                .expect("store"),
            None
        );
        assert_eq!(
            store
                .mailbox_refresh_token("other", "seed-a")
                .await
                .expect("store"),
            None
        );
        store
            .store_mailbox_refresh_token(SOURCE, "seed-b", "rt-b2", now + 2)
            .await
            .expect("store");
        assert_eq!(
            store
                .mailbox_refresh_token(SOURCE, "seed-b")
                .await
                .expect("store")
                .as_deref(),
            Some("rt-b2")
        );
        assert_eq!(
            store
                .mailbox_refresh_token(SOURCE, "seed-a")
                .await
                .expect("store"),
            None
        );
    }
}
