//! Only the delivery meant for a wait resumes it: two runs on one account wait for P-17 and
//! P-22, and every other attempt is recorded with its reason.

use std::collections::BTreeMap;

use super::*;

/// Two runs on one account wait for P-17 and P-22; only the delivery meant for a wait resumes
/// it, every other attempt is recorded with its reason and changes nothing.
#[tokio::test]
async fn the_approval_for_p17_resumes_exactly_the_p17_run() {
    for backend in Backend::ALL {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let (p17, t17) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let (p22, t22) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let token17 = open_wait(&daemon, &p17, t17, "P-17", "48h", "fail").await;
        let token22 = open_wait(&daemon, &p22, t22, "P-22", "48h", "fail").await;
        assert_ne!(token17, token22);

        // A stale fencing token, a second `approve`, a bad digest, a bad deadline: refused.
        let stale = daemon
            .post(
                &format!("/v1/runs/{p17}/waits"),
                &json!({"fencing_token": t17 + 5, "wait_id": "x", "expects": "approval",
                        "proposal": {"id": "P-17", "digest": digest("P-17")}, "deadline": "1h"}),
            )
            .await;
        assert_eq!(
            (stale.0, stale.1["error"].as_str()),
            (StatusCode::CONFLICT, Some("lease_lost")),
            "{backend:?}: {}",
            stale.1
        );
        let again = daemon
            .post(
                &format!("/v1/runs/{p17}/waits"),
                &json!({"fencing_token": t17, "wait_id": "approve", "expects": "approval",
                        "proposal": {"id": "P-17", "digest": digest("P-17")}, "deadline": "1h"}),
            )
            .await;
        assert_eq!(
            (again.0, again.1["error"].as_str()),
            (StatusCode::CONFLICT, Some("duplicate_wait")),
            "{}",
            again.1
        );
        for (field, body) in [
            (
                "proposal.digest",
                json!({"fencing_token": t17, "wait_id": "y", "expects": "approval",
                "proposal": {"id": "P-17", "digest": "sha256:nothex"}, "deadline": "1h"}),
            ),
            (
                "deadline",
                json!({"fencing_token": t17, "wait_id": "y", "expects": "approval",
                "proposal": {"id": "P-17", "digest": digest("P-17")}, "deadline": "soon"}),
            ),
            (
                "on_timeout",
                json!({"fencing_token": t17, "wait_id": "y", "expects": "approval",
                "proposal": {"id": "P-17", "digest": digest("P-17")}, "deadline": "1h", "on_timeout": "retry"}),
            ),
        ] {
            let (status, answer) = daemon.post(&format!("/v1/runs/{p17}/waits"), &body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
            assert!(
                answer["detail"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(field),
                "{field}: {answer}"
            );
        }
        let unknown = daemon
            .post(
                "/v1/runs/no-such-run/waits",
                &json!({"fencing_token": 1, "wait_id": "a", "expects": "b",
                "proposal": {"id": "P", "digest": digest("P")}, "deadline": "1h"}),
            )
            .await;
        assert_eq!(unknown.0, StatusCode::NOT_FOUND);
        assert_eq!(
            waits_of(&daemon, &p17).await.len(),
            1,
            "refusals stored nothing"
        );

        // Refused resumes: each recorded with its outcome, none resumes anything.
        let refusals = [
            (
                unique("k"),
                token22.clone(),
                digest("P-17"),
                "alice",
                "reapproval_required",
                StatusCode::OK,
            ),
            (
                unique("k"),
                "swyw_0000000000000000000000000000000000000000000000000000000000000000".into(),
                digest("P-17"),
                "alice",
                "no_wait_match",
                StatusCode::OK,
            ),
            (
                unique("k"),
                token17.clone(),
                digest("P-17"),
                "mallory",
                "unauthorized_source",
                StatusCode::UNAUTHORIZED,
            ),
        ];
        for (key, token, digest, actor, outcome, status) in &refusals {
            let (got, answer) = resume(&daemon, key, token, digest, actor).await;
            assert_eq!(
                (got, answer["outcome"].as_str()),
                (*status, Some(*outcome)),
                "{backend:?}: {answer}"
            );
            assert!(answer["intake_id"].is_string(), "recorded: {answer}");
        }
        for run in [&p17, &p22] {
            assert_eq!(
                daemon.get(&format!("/v1/runs/{run}")).await["status"],
                "needs_input"
            );
            assert_eq!(waits_of(&daemon, run).await[0]["status"], "open");
        }

        // The approval for P-17 resumes exactly the P-17 run.
        let key = unique("approval");
        let (status, answer) = resume(&daemon, &key, &token17, &digest("P-17"), "alice").await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{answer}"
        );
        assert_eq!(answer["run_id"], json!(p17));
        let message = worker.wait_for(&p17, "resume").await;
        assert_eq!(message["data"]["resume"]["decision"], "approve");
        assert_eq!(message["data"]["resume"]["actor"], "alice");
        assert_eq!(message["data"]["resume"]["wait_id"], "approve");
        assert_eq!(
            message["data"]["resume"]["proposal"]["digest"],
            json!(digest("P-17"))
        );
        assert_eq!(
            message["data"]["resume"]["event"]["event_type"],
            "wait.resume"
        );
        assert_eq!(message["data"]["resume"]["intake_id"], answer["intake_id"]);
        let view = wait_status(&daemon, &p17, "dispatched").await;
        assert_eq!(
            view["dispatch"]["id"], message["id"],
            "the resume's id is its dispatch's"
        );
        assert_eq!(view["waits"][0]["status"], "resumed", "{view:#}");
        assert_eq!(view["waits"][0]["resumed_by"], answer["intake_id"]);
        assert!(
            !view.to_string().contains(&token17),
            "a run's view never shows its token"
        );
        let console =
            super::super::console::Console::login(&daemon, super::super::harness::TOKEN).await;
        let page = console.page(&format!("/ui/runs/{p17}")).await;
        for shown in ["Waits", "approve", "resumed", "approve by alice", "P-17"] {
            assert!(
                page.contains(shown),
                "the console's run page shows {shown}: {page}"
            );
        }
        assert!(!page.contains(&token17));
        assert_eq!(
            daemon.get(&format!("/v1/runs/{p22}")).await["status"],
            "needs_input",
            "P-22 still waits"
        );

        // Sent twice: the same delivery, and another delivery of the same approval.
        let (_, copy) = resume(&daemon, &key, &token17, &digest("P-17"), "alice").await;
        assert_eq!(
            (copy["outcome"].as_str(), copy["first_outcome"].as_str()),
            (Some("duplicate"), Some("resumed")),
            "{copy}"
        );
        let (status, second) = resume(
            &daemon,
            &unique("approval"),
            &token17,
            &digest("P-17"),
            "alice",
        )
        .await;
        assert_eq!(
            (status, second["outcome"].as_str()),
            (StatusCode::OK, Some("duplicate")),
            "{second}"
        );

        // A canonical event carrying the approval for P-22 resumes P-22.
        let (status, via_event) = daemon
            .post_event_as(
                token_of(MANAGER),
                &unique("evt"),
                &json!({
                "channel": "chat", "event_type": "approval.given", "tenant_id": "acme",
                "target_entity_id": "approvals", "payload": {"resume": {
                    "token": token22, "proposal_digest": digest("P-22"), "decision": "approve",
                    "actor": MANAGER}}}),
            )
            .await;
        assert_eq!(
            (status, via_event["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{via_event}"
        );
        assert_eq!(via_event["run_id"], json!(p22));
        let message = worker.wait_for(&p22, "resume").await;
        assert_eq!(message["data"]["resume"]["actor"], MANAGER);
        assert_eq!(
            message["data"]["resume"]["event"]["event_type"],
            "approval.given"
        );

        // Exactly one resume message per run; the ledger holds every attempt, never a token.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(worker.of(&p17, "resume").len(), 1);
        assert_eq!(worker.of(&p22, "resume").len(), 1);
        let ledger = daemon.intake("tenant=acme&limit=100").await;
        let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
        for row in &ledger {
            *outcomes
                .entry(row["outcome"].as_str().unwrap_or_default().into())
                .or_default() += 1;
            let text = row.to_string();
            assert!(
                !text.contains(&token17) && !text.contains(&token22),
                "a token in the ledger: {row}"
            );
        }
        for (outcome, n) in [
            ("resumed", 2),
            ("reapproval_required", 1),
            ("no_wait_match", 1),
            ("unauthorized_source", 1),
            ("duplicate", 1),
        ] {
            assert_eq!(
                outcomes.get(outcome).copied().unwrap_or(0),
                n,
                "{backend:?} {outcome}: {outcomes:?}"
            );
        }

        // The worker goes on with its fencing token and finishes.
        let (status, done) = daemon
            .post(
                &format!("/v1/runs/{p17}/finish"),
                &json!({"status": "completed", "fencing_token": t17}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{done}");
        // Late: the wait ended with its run; recorded, nothing changes.
        let (_, late) = resume(&daemon, &unique("late"), &token17, &digest("P-17"), "alice").await;
        assert_eq!(late["outcome"], "duplicate", "{late}");
        daemon.stop();
        setup.db.drop_database().await;
    }
}
