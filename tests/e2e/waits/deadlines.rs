//! Deadlines: a wait fails or resumes its run on timeout, a late approval is `wait_expired`, and
//! resumes racing the deadline end the wait once.

use super::*;

/// `on_timeout = "fail"` fails the run and frees its entity; `"resume"` resumes it with decision
/// `timeout`; a resume after the deadline is `wait_expired`.
#[tokio::test]
async fn deadlines_fail_or_resume_and_late_approvals_are_wait_expired() {
    for backend in Backend::ALL {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let entity = unique("ACCT-9-ticket");
        let (failing, t1) = started_run(&daemon, worker, &entity).await;
        let (resuming, t2) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let token1 = open_wait(&daemon, &failing, t1, "P-17", "1s", "fail").await;
        open_wait(&daemon, &resuming, t2, "P-22", "1s", "resume").await;

        let view = wait_status(&daemon, &failing, "failed").await;
        assert_eq!(history_causes(&view, "wait_expired"), 1, "{view:#}");
        assert_eq!(waits_of(&daemon, &failing).await[0]["status"], "expired");
        let (_, late) = resume(&daemon, &unique("late"), &token1, &digest("P-17"), "alice").await;
        assert_eq!(late["outcome"], "wait_expired", "{backend:?}: {late}");
        // The entity is free again: the next request on it routes.
        let (_, next) = daemon
            .post_event(
                &unique("req"),
                &json!({"channel": "chat", "event_type": "credit.requested",
                "tenant_id": "acme", "target_entity_id": entity, "payload": {}}),
            )
            .await;
        assert_eq!(next["outcome"], "routed", "{next}");

        let message = worker.wait_for(&resuming, "resume").await;
        assert_eq!(message["data"]["resume"]["decision"], "timeout");
        assert!(message["data"]["resume"]["event"].is_null());
        wait_status(&daemon, &resuming, "dispatched").await;
        assert_eq!(waits_of(&daemon, &resuming).await[0]["status"], "timed_out");
        daemon.stop();
        setup.db.drop_database().await;
    }
}

/// Resumes racing the wait's deadline (and its timer): the wait ends once, either resumed (one
/// `resumed`, the rest `duplicate`, the run goes on) or expired (every answer `wait_expired`,
/// the run failed), never both and never neither.
#[tokio::test]
async fn resumes_racing_the_deadline_end_the_wait_once() {
    for backend in Backend::ALL {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let (run, fencing) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let token = open_wait(&daemon, &run, fencing, "P-17", "1s", "fail").await;
        tokio::time::sleep(Duration::from_millis(850)).await;
        let attempts = (0..10).map(|i| {
            let (daemon, token) = (&daemon, token.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(30 * i)).await;
                settled_resume(daemon, &unique("race"), &token, &digest("P-17"), "alice").await
            }
        });
        let answers = futures::future::join_all(attempts).await;
        let count = |outcome: &str| {
            answers
                .iter()
                .filter(|(_, a)| a["outcome"] == outcome)
                .count()
        };
        let (resumed, duplicate, expired) =
            (count("resumed"), count("duplicate"), count("wait_expired"));
        let errors: Vec<String> = daemon
            .logs()
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("WARN"))
            .map(str::to_owned)
            .collect();
        assert_eq!(
            resumed + duplicate + expired,
            10,
            "{backend:?}: {answers:#?}\n{errors:#?}"
        );
        assert!(resumed <= 1, "{answers:#?}");
        let wait = &waits_of(&daemon, &run).await[0];
        if resumed == 1 {
            assert_eq!(wait["status"], "resumed");
            worker.wait_for(&run, "resume").await;
            let view = wait_status(&daemon, &run, "dispatched").await;
            assert_eq!(history_causes(&view, "wait_expired"), 0, "{view:#}");
        } else {
            assert_eq!((duplicate, expired), (0, 10), "{answers:#?}");
            let view = wait_status(&daemon, &run, "failed").await;
            assert_eq!(history_causes(&view, "resumed"), 0, "{view:#}");
            assert_eq!(waits_of(&daemon, &run).await[0]["status"], "expired");
        }
        daemon.stop();
        setup.db.drop_database().await;
    }
}
