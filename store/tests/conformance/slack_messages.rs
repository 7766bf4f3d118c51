//! Conformance of the Slack approval-message outbox (m0016): a message is written with its
//! wait, claimed by one replica at a time, posted (its token dropped), left alone while its
//! wait is open, claimed again for the update once the wait ended, retried at its due time
//! after a failure, and skipped when its wait ended before it was posted.

use switchyard_store::entities::run::RunStatus;
use switchyard_store::entities::slack_message::status;
use switchyard_store::slack_messages::NewSlackMessage;
use switchyard_store::waits::NewWait;
use switchyard_store::{Millis, Store};

use crate::fixtures::*;
use crate::harness::TestStore;

const LEASE: i64 = 30_000;

/// Routes run `n`, dispatched, and opens wait `approve` with an approval message.
async fn waiting(store: &Store, n: usize, now: Millis) -> Routed {
    let r = routed(store, n, WORKFLOW, HOOK, now).await;
    set_run_status(store, &r.run.id, RunStatus::Dispatched, now).await;
    let new = NewWait {
        fencing_token: 1,
        wait_id: "approve".into(),
        expects: "approval".into(),
        proposal_id: "P-17".into(),
        proposal_digest: "sha256:00".into(),
        token_hash: format!("token-{}", r.run.id),
        deadline: now + 5_000,
        on_timeout: "fail".into(),
        notify: Some(NewSlackMessage {
            source: "ws".into(),
            channel: "C0APPROVALS".into(),
            body: "Approve credit".into(),
            button_value: "{\"token\":\"secret\"}".into(),
        }),
    };
    store.open_wait(&r.run.id, &new, now).await.expect("open");
    r
}

#[tokio::test]
async fn a_message_is_posted_once_then_updated_after_its_wait_ends() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let r = waiting(store, 1, now).await;
        let replica = test.replica().await;

        let claimed = store
            .claim_slack_messages(now, LEASE, 10)
            .await
            .expect("claim");
        assert_eq!(claimed.len(), 1, "{backend:?}");
        let message = &claimed[0].message;
        assert_eq!(
            (
                message.status.as_str(),
                message.run_id.as_str(),
                message.tenant_id.as_str()
            ),
            (status::PENDING, r.run.id.as_str(), "acme"),
            "{backend:?}"
        );
        assert_eq!(
            message.button_value.as_deref(),
            Some("{\"token\":\"secret\"}")
        );
        // Held: another replica gets nothing.
        assert!(
            replica
                .claim_slack_messages(now + 1, LEASE, 10)
                .await
                .expect("claim")
                .is_empty(),
            "{backend:?}"
        );

        // A failure releases it until its retry time.
        assert!(
            store
                .slack_message_failed(message, "internal_error", now + 1_000, now)
                .await
                .expect("failed")
        );
        assert!(
            store
                .claim_slack_messages(now + 500, LEASE, 10)
                .await
                .expect("claim")
                .is_empty()
        );
        let again = replica
            .claim_slack_messages(now + 1_000, LEASE, 10)
            .await
            .expect("claim");
        assert_eq!(again.len(), 1, "{backend:?}");
        assert_eq!(again[0].message.attempts, 1);
        assert_eq!(
            again[0].message.last_error.as_deref(),
            Some("internal_error")
        );
        // The first holder's claim is gone: its late answer changes nothing.
        assert!(
            !store
                .slack_message_posted(message, "1.1", now + 1_000)
                .await
                .expect("stale")
        );
        assert!(
            replica
                .slack_message_posted(&again[0].message, "1764633600.000100", now + 1_001)
                .await
                .expect("posted")
        );

        // Posted, wait open: nothing to do.
        assert!(
            store
                .claim_slack_messages(now + 2_000, LEASE, 10)
                .await
                .expect("claim")
                .is_empty(),
            "{backend:?}"
        );
        let rows = store.slack_messages_of_run(&r.run.id).await.expect("rows");
        assert_eq!(rows[0].ts.as_deref(), Some("1764633600.000100"));
        assert_eq!(rows[0].button_value, None, "the token goes once posted");

        // The wait times out: the message is due for its update.
        let wait = store
            .due_waits(now + 5_000, 10)
            .await
            .expect("due")
            .remove(0);
        store
            .fire_wait(&wait, "t", now + 5_000)
            .await
            .expect("fire");
        let update = store
            .claim_slack_messages(now + 5_001, LEASE, 10)
            .await
            .expect("claim");
        assert_eq!(update.len(), 1, "{backend:?}");
        assert_eq!(update[0].message.status, status::POSTED);
        assert_eq!(
            update[0].wait.as_ref().map(|w| w.status.as_str()),
            Some("expired")
        );
        assert!(
            store
                .slack_message_done(&update[0].message, None, now + 5_002)
                .await
                .expect("done")
        );
        assert!(
            store
                .claim_slack_messages(now + 60_000, LEASE, 10)
                .await
                .expect("claim")
                .is_empty()
        );
    }
}

#[tokio::test]
async fn a_message_whose_wait_ended_before_posting_is_claimed_to_be_skipped() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        waiting(store, 2, now).await;
        let wait = store
            .due_waits(now + 5_000, 10)
            .await
            .expect("due")
            .remove(0);
        store
            .fire_wait(&wait, "t", now + 5_000)
            .await
            .expect("fire");
        let claimed = store
            .claim_slack_messages(now + 5_001, LEASE, 10)
            .await
            .expect("claim");
        assert_eq!(claimed.len(), 1, "{backend:?}");
        assert_eq!(claimed[0].message.status, status::PENDING);
        assert_ne!(
            claimed[0].wait.as_ref().map(|w| w.status.as_str()),
            Some("open")
        );
        assert!(
            store
                .slack_message_done(
                    &claimed[0].message,
                    Some("wait ended before posting"),
                    now + 5_002
                )
                .await
                .expect("done")
        );
        let rows = store
            .slack_messages_of_run(&claimed[0].message.run_id)
            .await
            .expect("rows");
        assert_eq!(
            (rows[0].status.as_str(), rows[0].button_value.as_deref()),
            (status::DONE, None)
        );
    }
}
