//! Resumes over other channels: a signed Slack button (and a forged one), a pull worker's claim
//! and a CloudEvent carrying the approval.

use super::*;

/// Slack's v0 signature, computed here with HMAC-SHA256 directly.
fn slack_v0(secret: &str, timestamp: i64, body: &str) -> String {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("v0:{timestamp}:{body}").as_bytes());
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

fn slack_click(user: &str, value: &str, trigger: &str) -> String {
    let payload = json!({
        "type": "block_actions",
        "team": {"id": SLACK_TEAM, "domain": "credit"},
        "user": {"id": user, "username": "manager"},
        "api_app_id": "A0APP",
        "trigger_id": trigger,
        "container": {"type": "message", "channel_id": "C0APPROVALS", "message_ts": "1764633600.000100"},
        "actions": [{"action_id": "approve", "block_id": "b", "type": "button", "value": value,
                     "action_ts": "1764633601.000200"}],
        "response_url": "https://hooks.slack.com/actions/T9CREDIT/1/abc",
    });
    format!(
        "payload={}",
        switchyard_slack::form_encode(&payload.to_string())
    )
}

async fn post_click(daemon: &Daemon, body: &str, signature: &str) -> (StatusCode, Value) {
    let timestamp = unix_now();
    let signature = if signature.is_empty() {
        slack_v0(SLACK_SECRET, timestamp, body)
    } else {
        signature.to_owned()
    };
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/slack/ws/interactivity"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("X-Slack-Request-Timestamp", timestamp.to_string())
        .header("X-Slack-Signature", signature)
        .body(body.to_owned())
        .send()
        .await
        .expect("POST interactivity");
    super::super::harness::read(response).await
}

/// A Slack button click with a real v0 signature resumes the run; a forged one is 401 and
/// records nothing; a click by someone not among the approvers is refused.
#[tokio::test]
async fn a_signed_slack_button_resumes_and_a_forged_one_is_401() {
    for backend in [Backend::Sqlite, Backend::Postgres, Backend::MySql] {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let (run, fencing) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let token = open_wait(&daemon, &run, fencing, "P-17", "48h", "fail").await;

        let forged = slack_click(MANAGER, &token, &unique("trigger"));
        let (status, answer) = post_click(
            &daemon,
            &forged,
            &slack_v0("not-the-secret", unix_now(), &forged),
        )
        .await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized_source")),
            "{answer}"
        );
        let (status, stranger) = post_click(
            &daemon,
            &slack_click("U0INTERN", &token, &unique("trigger")),
            "",
        )
        .await;
        assert_eq!(
            (status, stranger["outcome"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized_source")),
            "{stranger}"
        );
        assert!(
            stranger["intake_id"].is_string(),
            "an authenticated click is recorded"
        );
        assert_eq!(waits_of(&daemon, &run).await[0]["status"], "open");

        let click = slack_click(MANAGER, &token, &unique("trigger"));
        let (status, answer) = post_click(&daemon, &click, "").await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{backend:?}: {answer}"
        );
        let message = worker.wait_for(&run, "resume").await;
        assert_eq!(message["data"]["resume"]["actor"], MANAGER);
        assert_eq!(message["data"]["resume"]["event"]["channel"], "slack");
        assert_eq!(
            message["data"]["resume"]["event"]["event_type"],
            "block_actions"
        );
        // Slack's copy of the same click is a duplicate.
        let (status, copy) = post_click(&daemon, &click, "").await;
        assert_eq!(
            (status, copy["outcome"].as_str()),
            (StatusCode::OK, Some("duplicate")),
            "{copy}"
        );
        let recorded = daemon.intake("source=ws&limit=10").await;
        assert_eq!(
            recorded.len(),
            2,
            "the stranger's click and the manager's: {recorded:#?}"
        );
        assert!(recorded.iter().all(|r| !r.to_string().contains(&token)));
        daemon.stop();
        setup.db.drop_database().await;
    }
}

/// A pull worker receives the resume through `POST /v1/claims`, and a CloudEvent can carry the
/// approval.
#[tokio::test]
async fn pull_workers_claim_the_resume_and_cloudevents_carry_approvals() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let (_, answer) = daemon
            .post_event(
                &unique("req"),
                &json!({"channel": "chat", "event_type": "credit.pull",
                "tenant_id": "acme", "target_entity_id": unique("ACCT-9"), "payload": {}}),
            )
            .await;
        let run = run_id(&answer);
        let claims = daemon.claim(&["credit-pull"], 1).await;
        assert_eq!(claims.len(), 1);
        let fencing = claims[0]["message"]["data"]["run"]["fencing_token"]
            .as_i64()
            .unwrap();
        let token = open_wait(&daemon, &run, fencing, "P-5", "48h", "fail").await;
        assert!(
            daemon.claim(&["credit-pull"], 1).await.is_empty(),
            "the start is not handed out again"
        );

        let cloudevent = json!({
            "specversion": "1.0", "id": unique("ce"), "source": "/approvals", "type": "approval.given",
            "subject": "approvals",
            "data": {"resume": {"token": token, "proposal_digest": digest("P-5"),
                                "decision": "approve", "actor": "alice"}},
        });
        let response = daemon
            .client()
            .post(daemon.url("/v1/ingest/cloudevents/bus"))
            .bearer_auth(token_of("alice"))
            .header("Content-Type", "application/cloudevents+json")
            .body(cloudevent.to_string())
            .send()
            .await
            .expect("POST cloudevent");
        let (status, answer) = super::super::harness::read(response).await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{backend:?}: {answer}"
        );

        let deadline = Instant::now() + Duration::from_secs(30);
        let claim = loop {
            if let Some(claim) = daemon.claim(&["credit-pull"], 1).await.pop() {
                break claim;
            }
            assert!(Instant::now() < deadline, "no resume claim");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(claim["message"]["type"], "switchyard.run.resume");
        assert_eq!(claim["message"]["data"]["run"]["id"], json!(run));
        assert_eq!(
            claim["message"]["data"]["resume"]["event"]["event_type"],
            "approval.given"
        );
        let view = daemon.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(view["status"], "dispatched");
        assert_eq!(claim["message"]["id"], view["dispatch"]["id"]);
        let (status, _) = daemon
            .post(
                &format!("/v1/runs/{run}/finish"),
                &json!({"status": "completed", "fencing_token": fencing}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        daemon.stop();
        setup.db.drop_database().await;
    }
}
