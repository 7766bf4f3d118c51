//! Conformance of mailbox cursors and poller leases: a cursor reads back per mailbox, and a
//! poller lease has one owner at a time, taken over (with a larger fencing token) once it
//! expires or is released, however many pollers race for it.

use sea_orm::EntityTrait;
use switchyard_store::Store;
use switchyard_store::entities::{mailbox_cursor, poller_lease};

use crate::fixtures::start;
use crate::harness::TestStore;

const SOURCE: &str = "support-mail";
const LEASE_TTL: i64 = 30_000;

async fn lease_row(store: &Store) -> poller_lease::Model {
    poller_lease::Entity::find_by_id(SOURCE)
        .one(store.connection())
        .await
        .expect("read lease")
        .expect("lease exists")
}

/// `(owner, fencing token, expiry)` of the stored lease.
async fn lease(store: &Store) -> (Option<String>, i64, i64) {
    let row = lease_row(store).await;
    (row.owner, row.fencing_token, row.expires_at)
}

fn held(owner: &str, token: i64, expires_at: i64) -> (Option<String>, i64, i64) {
    (Some(owner.to_owned()), token, expires_at)
}

#[tokio::test]
async fn a_mailbox_cursor_reads_back_per_mailbox_and_is_none_before_the_first_poll() {
    for test in TestStore::all().await {
        let store = &test.store;
        assert_eq!(
            store.mailbox_cursor(SOURCE, "INBOX").await.expect("cursor"),
            None
        );
        let cursor = mailbox_cursor::Model {
            source: SOURCE.into(),
            mailbox: "INBOX".into(),
            uidvalidity: 4_294_967_295,
            last_uid: 42,
            updated_at: start(),
        };
        mailbox_cursor::Entity::insert(mailbox_cursor::ActiveModel::from(cursor.clone()))
            .exec_without_returning(store.connection())
            .await
            .expect("insert cursor");
        assert_eq!(
            store.mailbox_cursor(SOURCE, "INBOX").await.expect("cursor"),
            Some(cursor),
            "{:?}",
            test.backend
        );
        assert_eq!(
            store
                .mailbox_cursor(SOURCE, "Archive")
                .await
                .expect("other"),
            None
        );
        assert_eq!(
            store
                .mailbox_cursor("other-mail", "INBOX")
                .await
                .expect("other"),
            None
        );
    }
}

#[tokio::test]
async fn a_poller_lease_has_one_owner_until_it_expires_then_is_taken_over_with_a_larger_token() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        assert!(
            store
                .acquire_poller_lease(SOURCE, "a", now, LEASE_TTL)
                .await
                .expect("take")
        );
        assert_eq!(
            lease(store).await,
            held("a", 1, now + LEASE_TTL),
            "{backend:?}"
        );
        assert!(
            !store
                .acquire_poller_lease(SOURCE, "b", now + 1, LEASE_TTL)
                .await
                .expect("held"),
            "{backend:?}: b must not take a held lease"
        );
        assert_eq!(lease(store).await, held("a", 1, now + LEASE_TTL));
        // Renewing keeps the token and moves the expiry.
        assert!(
            store
                .acquire_poller_lease(SOURCE, "a", now + 10, LEASE_TTL)
                .await
                .expect("renew")
        );
        let expiry = now + 10 + LEASE_TTL;
        assert_eq!(lease(store).await, held("a", 1, expiry));
        assert!(
            !store
                .acquire_poller_lease(SOURCE, "b", expiry - 1, LEASE_TTL)
                .await
                .expect("not yet")
        );
        assert!(
            store
                .acquire_poller_lease(SOURCE, "b", expiry, LEASE_TTL)
                .await
                .expect("take over"),
            "{backend:?}: an expired lease is taken over"
        );
        assert_eq!(
            lease(store).await,
            held("b", 2, expiry + LEASE_TTL),
            "{backend:?}"
        );
        assert!(
            !store
                .acquire_poller_lease(SOURCE, "a", expiry + 1, LEASE_TTL)
                .await
                .expect("lost")
        );
        assert_eq!(lease(store).await, held("b", 2, expiry + LEASE_TTL));
    }
}

#[tokio::test]
async fn a_released_poller_lease_is_taken_over_at_once_and_only_its_owner_releases_it() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        assert!(
            store
                .acquire_poller_lease(SOURCE, "a", now, LEASE_TTL)
                .await
                .expect("take")
        );
        store
            .release_poller_lease(SOURCE, "b", now + 1)
            .await
            .expect("not b's");
        assert_eq!(
            lease(store).await,
            held("a", 1, now + LEASE_TTL),
            "{backend:?}"
        );
        store
            .release_poller_lease(SOURCE, "a", now + 2)
            .await
            .expect("release");
        assert_eq!(lease(store).await, (None, 1, now + 2), "{backend:?}");
        assert!(
            store
                .acquire_poller_lease(SOURCE, "b", now + 3, LEASE_TTL)
                .await
                .expect("take")
        );
        assert_eq!(lease(store).await, held("b", 2, now + 3 + LEASE_TTL));
    }
}

/// Two pollers on two stores of one database race for the lease at `at`: exactly one holds
/// it, and the stored owner is the winner.
async fn race(test: &TestStore, at: i64) -> String {
    let replica = test.replica().await;
    let (a, b) = tokio::join!(
        test.store.acquire_poller_lease(SOURCE, "a", at, LEASE_TTL),
        replica.acquire_poller_lease(SOURCE, "b", at, LEASE_TTL)
    );
    let (a, b) = (a.expect("poller a"), b.expect("poller b"));
    assert!(a ^ b, "{:?}: exactly one holds it ({a}, {b})", test.backend);
    let winner = if a { "a" } else { "b" };
    assert_eq!(lease_row(&test.store).await.owner.as_deref(), Some(winner));
    winner.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pollers_racing_for_a_new_lease_get_one_owner() {
    for test in TestStore::all().await {
        let now = start();
        race(&test, now).await;
        assert_eq!(lease_row(&test.store).await.fencing_token, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pollers_racing_for_an_expired_lease_get_one_owner_with_the_next_token() {
    for test in TestStore::all().await {
        let now = start();
        assert!(
            test.store
                .acquire_poller_lease(SOURCE, "old", now, LEASE_TTL)
                .await
                .expect("take")
        );
        race(&test, now + LEASE_TTL).await;
        assert_eq!(
            lease_row(&test.store).await.fencing_token,
            2,
            "{:?}: one takeover, one new token",
            test.backend
        );
    }
}
