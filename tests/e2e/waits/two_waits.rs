//! A run with two waits resumes once per wait.

use super::*;

/// A run may hold several waits; each ends once and sends its own resume message (its own id),
/// and the run waits (`needs_input`) until the last one ended.
#[tokio::test]
async fn a_run_with_two_waits_resumes_once_per_wait() {
    for backend in Backend::ALL {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let (run, fencing) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let refund = open_wait(&daemon, &run, fencing, "P-17", "48h", "fail").await;
        let (status, answer) = daemon
            .post(
                &format!("/v1/runs/{run}/waits"),
                &json!({"fencing_token": fencing, "wait_id": "approve-discount",
                        "expects": "approval", "proposal": {"id": "P-18", "digest": digest("P-18")},
                        "deadline": "48h"}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let discount = answer["resume_token"].as_str().expect("token").to_owned();

        let (_, first) = resume(&daemon, &unique("k"), &refund, &digest("P-17"), "alice").await;
        assert_eq!(first["outcome"], "resumed", "{backend:?}: {first}");
        worker.wait_for(&run, "resume").await;
        let view = daemon.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(
            view["status"], "needs_input",
            "one wait is still open: {view:#}"
        );
        let (_, second) = resume(&daemon, &unique("k"), &discount, &digest("P-18"), "alice").await;
        assert_eq!(second["outcome"], "resumed", "{second}");
        wait_status(&daemon, &run, "dispatched").await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while worker.of(&run, "resume").len() < 2 {
            assert!(Instant::now() < deadline, "{:#?}", worker.messages());
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let resumes = worker.of(&run, "resume");
        let waits: BTreeSet<&str> = resumes
            .iter()
            .filter_map(|m| m["data"]["resume"]["wait_id"].as_str())
            .collect();
        assert_eq!(waits, BTreeSet::from(["approve", "approve-discount"]));
        assert_ne!(resumes[0]["id"], resumes[1]["id"]);
        let (_, again) = resume(&daemon, &unique("k"), &refund, &digest("P-17"), "alice").await;
        assert_eq!(again["outcome"], "duplicate", "{again}");

        // A third wait is open when the worker finishes: it ends with the run, and a late
        // approval changes nothing.
        let (status, answer) = daemon
            .post(
                &format!("/v1/runs/{run}/waits"),
                &json!({"fencing_token": fencing, "wait_id": "confirm", "expects": "answer",
                        "proposal": {"id": "P-19", "digest": digest("P-19")}, "deadline": "48h"}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let confirm = answer["resume_token"].as_str().expect("token").to_owned();
        let (status, _) = daemon
            .post(
                &format!("/v1/runs/{run}/finish"),
                &json!({"status": "completed", "fencing_token": fencing}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(waits_of(&daemon, &run).await[2]["status"], "cancelled");
        let (_, late) = resume(&daemon, &unique("k"), &confirm, &digest("P-19"), "alice").await;
        assert_eq!(late["outcome"], "no_wait_match", "{late}");
        assert_eq!(
            daemon.get(&format!("/v1/runs/{run}")).await["status"],
            "completed"
        );
        daemon.stop();
        setup.db.drop_database().await;
    }
}
